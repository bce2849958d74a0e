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
	"github.com/kao-io/kao/test/hosts"
)

// TestEtcdRestore restores a three-member cluster installed by the etcd role
// with playbooks/etcd-restore.yml (no API servers: their plays find nothing
// to stop or start). It proves the data comes back under a new cluster ID
// with every member's old data kept, that running the playbook again does
// not restore twice, that a run cut off between a member's two renames
// continues, that a host in a state the restore cannot have left fails the
// run before anything stops, and that the etcd role's next install run
// changes nothing on the restored cluster.
func TestEtcdRestore(t *testing.T) {
	requirePrerequisites(t)
	bundle, m := buildBundle(t)
	dc := hosts.Start(t, 3)
	hs := dc.Hosts()
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	ctx := context.Background()
	pki := genEtcdPKI(t, hs)
	a := newAnsible(t, dc)
	etcdctlBin := filepath.Join(bundle, "etcd", m.Etcd, "bin", "etcdctl")
	install := a.writeFile(t, "install.yml", []byte(installPlaybook))
	restore := filepath.Join(repoRoot(t), "playbooks", "etcd-restore.yml")
	inv := a.inventory(t, "etcd3.json", etcdDeployment(hs, kaov1.ManagedEtcd{}))
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pki})

	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
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

	step("installs and takes a snapshot", func(t *testing.T) {
		a.playbook(t, inv, vars, install).mustSucceed(t, names...)
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

	step("restores every member under a new cluster ID", func(t *testing.T) {
		r := a.playbook(t, inv, restoreVars(t, "t1"), restore)
		r.mustSucceed(t, names...)
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

	step("runs again without restoring twice", func(t *testing.T) {
		run(t, "put", "/kao/restore/after", "written-after-the-restore")
		a.playbook(t, inv, restoreVars(t, "t1"), restore).mustSucceed(t, names...)
		if got := value(t, "/kao/restore/after"); got != "written-after-the-restore" {
			t.Errorf("running the same restore again restored the snapshot again: /kao/restore/after is %q", got)
		}
		if id := clusterID(t); id != restoredID {
			t.Errorf("running the same restore again changed the cluster ID from %s to %s", restoredID, id)
		}
	})

	step("continues a member cut off between its renames", func(t *testing.T) {
		// hs[1] is left as a run of restore t2 cut off after it moved the
		// data aside and before it put the restored data in place.
		h := hs[1]
		cmd, err := dc.SSHCommand(ctx, h.Name, "cat > /tmp/t2.db")
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
		onHost(t, h.Name, "systemctl stop karmada-etcd && /usr/local/bin/etcdutl snapshot restore /tmp/t2.db "+
			"--data-dir=/var/lib/karmada-etcd.restore-t2 --name="+h.Name+" --initial-advertise-peer-urls=https://"+h.Address+":2380 "+
			"--initial-cluster="+strings.Join(initial, ",")+" --initial-cluster-token=karmada-etcd-restore-t2 "+
			"--bump-revision=1000000000 --mark-compacted >/dev/null && mv -T /var/lib/karmada-etcd /var/lib/karmada-etcd.before-restore-t2 && rm /tmp/t2.db")

		r := a.playbook(t, inv, restoreVars(t, "t2"), restore)
		r.mustSucceed(t, names...)
		if got := value(t, "/kao/restore/after"); got != "" {
			t.Errorf("restore t2 did not restore the snapshot: /kao/restore/after is %q", got)
		}
		if got := value(t, "/kao/restore/kept"); got != "in-the-snapshot" {
			t.Errorf("/kao/restore/kept is %q after restore t2", got)
		}
		if !strings.Contains(r.out, "Put the restored data in place") {
			t.Errorf("the run does not show the rename it continued:\n%s", r.out)
		}
		restoredID = clusterID(t)
	})

	step("refuses a member in a state it cannot have left, before stopping anything", func(t *testing.T) {
		h := hs[2].Name
		onHost(t, h, "mkdir /var/lib/karmada-etcd.before-restore-t3 /var/lib/karmada-etcd.restore-t3")
		r := a.playbook(t, inv, restoreVars(t, "t3"), restore)
		if r.err == nil || !strings.Contains(r.out, h+" is in a state this restore did not leave it in") {
			t.Fatalf("the restore did not refuse %s:\n%s", h, r.out)
		}
		for _, o := range names {
			if got := onHost(t, o, "systemctl is-active karmada-etcd"); got != "active" {
				t.Errorf("etcd on %s is %s after a refused restore", o, got)
			}
		}
		onHost(t, h, "rmdir /var/lib/karmada-etcd.before-restore-t3 /var/lib/karmada-etcd.restore-t3")
	})

	step("keeps the restored cluster through the next install", func(t *testing.T) {
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, names...)
		for _, h := range names {
			if r.recap[h].Changed != 0 {
				t.Errorf("the install after the restore changed %d things on %s:\n%s", r.recap[h].Changed, h, r.out)
			}
		}
		if id := clusterID(t); id != restoredID {
			t.Errorf("the install after the restore changed the cluster ID from %s to %s", restoredID, id)
		}
		if got := value(t, "/kao/restore/kept"); got != "in-the-snapshot" {
			t.Errorf("/kao/restore/kept is %q after the install", got)
		}
	})
}
