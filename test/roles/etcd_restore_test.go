package roles

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// etcdRestoreSteps run playbooks/etcd-restore.yml on TestEtcd's
// three-member cluster, which the etcd role installed as kd (no API servers:
// their plays find nothing to stop or start), through the paths the
// end-to-end restore in test/e2e/restore_test.go does not take: a member cut
// off between its two renames by an interrupted run is continued while the
// others are restored afresh; the same restore run again does not restore
// twice; and a host in a state no restore leaves fails the run before
// anything stops. The successful restore of a whole control plane, and the
// install run after it, are the end-to-end test's. The steps borrow
// TestEtcd's cluster rather than boot three hosts and install etcd for
// themselves.
func etcdRestoreSteps(t *testing.T, dc *hosts.Cluster, a *ansible, bundle, pki, etcdctlBin string, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	hs := dc.Hosts()
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	ctx := context.Background()
	restore := filepath.Join(repoRoot(t), "playbooks", "etcd-restore.yml")
	// A restore is for a deployment that installed (status.version): its
	// hosts, installed here by the etcd role alone, carry no owner marker.
	kd.Status.Version = kd.Spec.Version
	inv := a.inventory(t, "etcd3-restore.json", kd)

	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs), args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	value := func(t *testing.T, key string) string {
		t.Helper()
		return run(t, "get", key, "--print-value-only")
	}
	clusterID := func(t *testing.T) string {
		t.Helper()
		var st []struct {
			Status struct {
				Header struct {
					ClusterID json.Number `json:"cluster_id"`
				} `json:"header"`
			} `json:"Status"`
		}
		dec := json.NewDecoder(strings.NewReader(run(t, "endpoint", "status", "--write-out=json")))
		dec.UseNumber()
		if err := dec.Decode(&st); err != nil || len(st) != len(hs) {
			t.Fatalf("endpoint status: %v (%d members)", err, len(st))
		}
		for _, s := range st[1:] {
			if s.Status.Header.ClusterID != st[0].Status.Header.ClusterID {
				t.Fatalf("members disagree on the cluster ID: %+v", st)
			}
		}
		return st[0].Status.Header.ClusterID.String()
	}
	onHost := func(t *testing.T, h, script string) string {
		t.Helper()
		out, err := dc.Run(ctx, h, script)
		if err != nil {
			t.Fatalf("on %s: %s: %v", h, script, err)
		}
		return strings.TrimSpace(out)
	}

	snapshot := filepath.Join(a.dir, "snapshot.db")
	var sum, installedID, restoredID string
	restoreVars := func(t *testing.T, id string) string {
		t.Helper()
		return a.extraVars(t, "restore-"+id+".json", map[string]string{
			"kao_artifacts_dir": bundle, "kao_pki_dir": pki,
			"kao_restore_snapshot": snapshot, "kao_restore_sha256": sum,
			"kao_restore_id": id, "kao_restore_cluster_token": "karmada-etcd-restore-" + id,
		})
	}

	testenv.Step(t, "takes a snapshot to restore", func(t *testing.T) {
		run(t, "put", "/kao/restore/kept", "in-the-snapshot")
		if _, err := etcdctl(ctx, etcdctlBin, pki, clientURLs(hs[:1]), "snapshot", "save", snapshot); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(snapshot)
		if err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(data)
		sum = hex.EncodeToString(s[:])
		run(t, "put", "/kao/restore/kept", "changed-after-the-snapshot")
		run(t, "put", "/kao/restore/late", "written-after-the-snapshot")
		installedID = clusterID(t)
	})

	testenv.Step(t, "restores every member, continuing one cut off between its renames", func(t *testing.T) {
		// hs[1] is left as a run of restore t1 cut off after it moved the
		// data aside and before it put the restored data in place; etcd
		// keeps its quorum on the other two.
		h := hs[1]
		cmd, err := dc.SSHCommand(ctx, h.Name, "cat > /tmp/t1.db")
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(snapshot)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		cmd.Stdin = f
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("copying the snapshot to %s: %v: %s", h.Name, err, out)
		}
		initial := []string{}
		for _, o := range hs {
			initial = append(initial, o.Name+"=https://"+o.Address+":2380")
		}
		onHost(t, h.Name, "systemctl stop karmada-etcd && /usr/local/bin/etcdutl snapshot restore /tmp/t1.db "+
			"--data-dir=/var/lib/karmada-etcd.restore-t1 --name="+h.Name+" --initial-advertise-peer-urls=https://"+h.Address+":2380 "+
			"--initial-cluster="+strings.Join(initial, ",")+" --initial-cluster-token=karmada-etcd-restore-t1 "+
			"--bump-revision=1000000000 --mark-compacted >/dev/null && mv -T /var/lib/karmada-etcd /var/lib/karmada-etcd.before-restore-t1 && rm /tmp/t1.db")

		a.playbook(t, inv, restoreVars(t, "t1"), restore).mustSucceed(t, names...)
		if got := value(t, "/kao/restore/kept"); got != "in-the-snapshot" {
			t.Errorf("/kao/restore/kept is %q after the restore", got)
		}
		if got := value(t, "/kao/restore/late"); got != "" {
			t.Errorf("a key written after the snapshot survived the restore: %q", got)
		}
		if restoredID = clusterID(t); restoredID == installedID {
			t.Errorf("the restored cluster kept the cluster ID %s", restoredID)
		}
		for _, h := range names {
			got := onHost(t, h, "test -d /var/lib/karmada-etcd.before-restore-t1/member/wal && echo kept; "+
				"test -e /var/lib/karmada-etcd.restore-t1 && echo staging-left; test -e /var/lib/kao-etcd-restore/t1.db && echo copy-left; "+
				"stat -c %a /var/lib/karmada-etcd")
			if got != "kept\n700" {
				t.Errorf("%s after the restore: %q (want the old data kept, nothing else left, the data directory 0700)", h, got)
			}
		}
	})

	testenv.Step(t, "runs again without restoring twice", func(t *testing.T) {
		run(t, "put", "/kao/restore/after", "written-after-the-restore")
		a.playbook(t, inv, restoreVars(t, "t1"), restore).mustSucceed(t, names...)
		if got := value(t, "/kao/restore/after"); got != "written-after-the-restore" {
			t.Errorf("running the same restore again restored the snapshot again: /kao/restore/after is %q", got)
		}
		if id := clusterID(t); id != restoredID {
			t.Errorf("running the same restore again changed the cluster ID from %s to %s", restoredID, id)
		}
	})

	testenv.Step(t, "refuses a member in a state it cannot have left, before stopping anything", func(t *testing.T) {
		h := hs[2].Name
		onHost(t, h, "mkdir /var/lib/karmada-etcd.before-restore-t2 /var/lib/karmada-etcd.restore-t2")
		r := a.playbook(t, inv, restoreVars(t, "t2"), restore)
		if r.err == nil || !strings.Contains(r.out, h+" is in a state this restore did not leave it in") {
			t.Fatalf("the restore did not refuse %s:\n%s", h, r.out)
		}
		for _, o := range names {
			if got := onHost(t, o, "systemctl is-active karmada-etcd"); got != "active" {
				t.Errorf("etcd on %s is %s after a refused restore", o, got)
			}
		}
		if got := value(t, "/kao/restore/after"); got != "written-after-the-restore" {
			t.Errorf("a refused restore changed the data: /kao/restore/after is %q", got)
		}
	})
}
