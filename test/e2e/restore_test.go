package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// restoreObjects is how many PropagationPolicies and how many ConfigMaps the
// test writes into Karmada before the backup.
const restoreObjects = 100

// restoreNamespace is the Karmada namespace the test's objects live in.
const restoreNamespace = "restore-e2e"

// controlPlaneUnits are every Karmada unit a restore stops and starts.
const controlPlaneUnits = "karmada-etcd karmada-apiserver karmada-aggregated-apiserver kube-controller-manager " +
	"karmada-controller-manager karmada-scheduler karmada-webhook"

// backupAndRestore runs on TestBinaryInstall's control plane (three hosts,
// Ready): it writes 200 Karmada objects, takes a one-shot EtcdBackup,
// deletes the objects, and restores the backup with an EtcdRestore: every
// object comes back with the same content, what was written after the backup
// is gone, the etcd cluster has a new identity, each member keeps its old
// data, and the deployment is Ready again and converges on a later install
// run without a change. A restore whose sha256 does not match is refused
// without stopping anything. It shares the install to keep CI short.
func backupAndRestore(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	ctx := context.Background()
	ns := kd.Namespace
	nodes := dc.Hosts()
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 5*time.Minute)
	kubectl := karmadaKubectl(t, ready)

	// 100 PropagationPolicies and 100 ConfigMaps, in one apply.
	kubectl("create", "namespace", restoreNamespace)
	manifest := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(manifest, []byte(restoreManifest(restoreObjects)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kubectl("apply", "-f", manifest)
	before := dumpObjects(t, kubectl)
	if len(before) != 2*restoreObjects {
		t.Fatalf("wrote %d objects, want %d", len(before), 2*restoreObjects)
	}
	t.Logf("wrote %d objects in %s", len(before), time.Since(start).Round(time.Second))
	etcdBefore := etcdEndpointStatus(t, dc, nodes[0])

	// A one-shot backup to the operator's state volume.
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "before-delete", Namespace: ns},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if err := k8s.Create(ctx, eb); err != nil {
		t.Fatal(err)
	}
	backedUp := waitForBackup(t, eb)
	snap := backedUp.Status.LastSnapshot
	t.Logf("snapshot %s: revision %d, %s", snap.Name, snap.Revision, snap.Size.String())
	checkBackupMetrics(t, eb)

	// Everything goes; something new arrives that the restore must take away.
	kubectl("delete", "propagationpolicies,configmaps", "-n", restoreNamespace, "-l", "kao-e2e=restore", "--wait=true")
	kubectl("create", "configmap", "after-backup", "-n", restoreNamespace, "--from-literal=written=after-the-backup")
	if left := dumpObjects(t, kubectl); len(left) != 0 {
		t.Fatalf("%d objects left after the delete", len(left))
	}

	// A snapshot whose sha256 is not the expected one is refused, and
	// nothing on the hosts stops or restarts.
	units := unitInvocations(t, dc, nodes)
	refused := &kaov1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "wrong-sum", Namespace: ns},
		Spec: kaov1.EtcdRestoreSpec{DeploymentName: kd.Name,
			Source: kaov1.RestoreSource{Path: snap.Location, SHA256: strings.Repeat("0", 64)}},
	}
	if err := k8s.Create(ctx, refused); err != nil {
		t.Fatal(err)
	}
	failed := waitForRestore(t, refused, 2*time.Minute)
	c := meta.FindStatusCondition(failed.Status.Conditions, kaov1.RestoreSucceededCondition)
	if failed.Status.Phase != kaov1.RestoreFailed ||
		c == nil || c.Status != metav1.ConditionFalse || c.Reason != kaov1.ChecksumMismatchReason || !strings.Contains(c.Message, strings.Repeat("0", 64)) {
		t.Fatalf("a restore with the wrong sha256 was not refused as a checksum mismatch: %+v", failed.Status)
	}
	if strings.Contains(c.Message, snap.SHA256) {
		t.Errorf("the refusal tells the file's real sha256: %s", c.Message)
	}
	if failed.Status.LastRun != nil {
		t.Errorf("a refused restore ran a playbook: %+v", failed.Status.LastRun)
	}
	if got := unitInvocations(t, dc, nodes); !maps.Equal(got, units) {
		t.Errorf("a refused restore stopped or restarted services:\nbefore %v\nafter  %v", units, got)
	}
	if holder := get(t, kd).Annotations[kaov1.RestoreInProgressAnnotation]; holder != "" {
		t.Errorf("a refused restore holds the deployment: %q", holder)
	}
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz after a refused restore: %s", out)
	}

	// The real restore, from the backup's newest snapshot.
	er := &kaov1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: "from-backup", Namespace: ns},
		Spec:       kaov1.EtcdRestoreSpec{DeploymentName: kd.Name, Source: kaov1.RestoreSource{BackupName: eb.Name}},
	}
	start = time.Now()
	if err := k8s.Create(ctx, er); err != nil {
		t.Fatal(err)
	}
	restored := waitForRestore(t, er, 20*time.Minute)
	took := time.Since(start)
	if restored.Status.Phase != kaov1.RestoreSucceeded {
		t.Fatalf("the restore failed: %+v", restored.Status)
	}
	checkRestoreMetrics(t, er, string(kaov1.RestoreSucceeded))
	last := restored.Status.LastRun
	t.Logf("restored in %s (playbook %s)", took.Round(time.Second), last.EndTime.Sub(last.StartTime.Time).Round(time.Second))
	if last.Result != kaov1.RunSucceeded || last.LogConfigMapName == "" || len(last.FailedTasks) != 0 {
		t.Errorf("status.lastRun does not show a clean run: %+v", last)
	}
	for _, n := range nodes {
		if !slices.ContainsFunc(last.Hosts, func(h kaov1.HostRunStats) bool { return h.Name == n.Name && h.Changed > 0 && h.Failed == 0 }) {
			t.Errorf("the restore's run did not change %s: %+v", n.Name, last.Hosts)
		}
	}
	if s := restored.Status.Snapshot; s == nil || s.Name != snap.Name || s.SHA256 != snap.SHA256 || s.Revision != snap.Revision {
		t.Errorf("status.snapshot is %+v, want the backup's %s", s, snap.Name)
	}
	if holder := get(t, kd).Annotations[kaov1.RestoreInProgressAnnotation]; holder != "" {
		t.Errorf("the deployment is still held after the restore: %q", holder)
	}
	prev := restored.Status.PreviousDataDir
	if !strings.HasPrefix(prev, "/var/lib/karmada-etcd.before-restore-from-backup-") {
		t.Errorf("status.previousDataDir is %q", prev)
	}
	for _, n := range nodes {
		out, err := dc.Run(ctx, n.Name, "test -d "+prev+"/member/wal && test -d /var/lib/karmada-etcd/member/wal && echo kept; "+
			"stat -c %a /var/lib/karmada-etcd; ls /var/lib/kao-etcd-restore/ | wc -l; systemctl is-active "+controlPlaneUnits+" | sort -u")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Fields(out)
		if len(lines) < 4 || lines[0] != "kept" || lines[1] != "700" || lines[2] != "0" || slices.Contains(lines[3:], "failed") {
			t.Errorf("%s after the restore: %q (want the old data kept, a 0700 data directory, no snapshot copy, no failed unit)", n.Name, out)
		}
	}

	// The cluster is a new one (a new token), holding the snapshot's data
	// with its revisions moved well past every one handed out before.
	etcdAfter := etcdEndpointStatus(t, dc, nodes[0])
	if etcdAfter.clusterID == etcdBefore.clusterID {
		t.Errorf("the restored etcd kept the cluster ID %s: the cluster token did not change", etcdAfter.clusterID)
	}
	if etcdAfter.revision < snap.Revision+1_000_000_000 {
		t.Errorf("the restored etcd is at revision %d, want at least the snapshot's %d plus the bump", etcdAfter.revision, snap.Revision)
	}

	// Every object is back as it was; the one written after the backup is not.
	if after := dumpObjects(t, kubectl); !maps.Equal(after, before) {
		t.Errorf("the restored objects differ: %d before, %d after; first difference: %s", len(before), len(after), firstDifference(before, after))
	}
	if out, err := karmadaKubectlErr(t, ready, "get", "configmap", "after-backup", "-n", restoreNamespace); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("the ConfigMap written after the backup survived the restore: %v: %s", err, out)
	}

	// The install run that the restore asks for by itself
	// (kao.io/restored-at) keeps the restored cluster: nothing on the hosts
	// changes. Only the EndpointSlices that route to karmada-aggregated-apiserver
	// and karmada-webhook may be applied again: while the restore stopped them,
	// the operator's probes marked their endpoints not ready and ready again,
	// and the install's server-side apply takes that field back.
	again := runAfterRestore(t, kd, runWait)
	if !slices.ContainsFunc(deploymentEvents(t, kd), func(e eventsv1.Event) bool { return e.Reason == "ReapplyingAfterRestore" }) {
		t.Error("no Event says why the install ran after the restore")
	}
	// The deployment comes back to Ready from probes made after the restore
	// (and the install that follows it: probes wait while a run goes on).
	readyAgain := waitForReadySince(t, kd, restored.Status.StartTime.Time, 5*time.Minute)
	t.Logf("Ready again %s after the restore started, the install after it included", readyAgain.Sub(start).Round(time.Second))
	if again.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install run after the restore failed: %+v", again.Status.LastRun)
	}
	for _, c := range changedTasks(t, again) {
		if slices.Contains(routingTasks, c.task) {
			t.Logf("the install run after the restore applied the routing again on %s: %s", c.host, c.task)
			continue
		}
		t.Errorf("the install run after the restore changed %s on %s", c.task, c.host)
	}
	if after := dumpObjects(t, kubectl); !maps.Equal(after, before) {
		t.Errorf("the objects changed with the install run after the restore: %s", firstDifference(before, after))
	}
	if id := etcdEndpointStatus(t, dc, nodes[0]).clusterID; id != etcdAfter.clusterID {
		t.Errorf("the install run after the restore changed the etcd cluster ID from %s to %s", etcdAfter.clusterID, id)
	}
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
}

// routingTasks are the install's tasks that apply the EndpointSlices whose
// readiness the operator's probes also write (internal/controller/karmadadeployment/routing.go).
var routingTasks = []string{
	"karmada_resources : Karmada resources | Apply the namespaces, the Cluster API's Service, endpoints and APIService, and RBAC",
	"karmada_resources : Karmada resources | Apply karmada-webhook's Service, endpoints and admission webhook configurations",
}

// changedTask is one task result a run reported as changed.
type changedTask struct{ host, task string }

// changedTasks reads the task results reported as changed from the log of
// the deployment's last run, which must have ended.
func changedTasks(t testing.TB, kd *kaov1.KarmadaDeployment) []changedTask {
	t.Helper()
	data := lastRunLog(t, kd)
	if !strings.Contains(data, " start ") || !strings.Contains(data, " end ") {
		t.Fatalf("the log of run %s is not whole:\n%s", kd.Status.LastRun.ID, data)
	}
	var out []changedTask
	for _, line := range strings.Split(data, "\n") {
		// 2026-01-02T03:04:05Z changed     node1                role : Area | Verb object
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "changed" {
			out = append(out, changedTask{host: f[2], task: strings.Join(f[3:], " ")})
		}
	}
	return out
}

// restoreManifest is n PropagationPolicies and n ConfigMaps as one
// multi-document file.
func restoreManifest(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: policy-%03[1]d
  namespace: %[2]s
  labels: {kao-e2e: restore}
spec:
  priority: %[1]d
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: app-%03[1]d
  placement:
    clusterAffinity:
      clusterNames: [member-%[3]d]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: config-%03[1]d
  namespace: %[2]s
  labels: {kao-e2e: restore}
data:
  index: "%[1]d"
  payload: %[4]q
`, i, restoreNamespace, i%3, strings.Repeat(fmt.Sprintf("%x", i*7919), 20))
	}
	return b.String()
}

// dumpObjects maps kind/name of the test's objects to their content in
// canonical JSON: a PropagationPolicy's spec, a ConfigMap's data.
func dumpObjects(t testing.TB, kubectl func(...string) string) map[string]string {
	t.Helper()
	out := kubectl("get", "propagationpolicies,configmaps", "-n", restoreNamespace, "-l", "kao-e2e=restore", "-o", "json")
	var list struct {
		Items []struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     json.RawMessage   `json:"spec"`
			Data     map[string]string `json:"data"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("reading the objects: %v", err)
	}
	dump := map[string]string{}
	for _, o := range list.Items {
		var content any = o.Data
		if o.Kind != "ConfigMap" {
			var spec any
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			content = spec
		}
		canonical, err := json.Marshal(content) // maps marshal with sorted keys
		if err != nil {
			t.Fatal(err)
		}
		dump[o.Kind+"/"+o.Metadata.Name] = string(canonical)
	}
	return dump
}

// firstDifference names the first key, in order, whose content differs.
func firstDifference(want, got map[string]string) string {
	keys := slices.Sorted(maps.Keys(want))
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if want[k] != got[k] {
			return fmt.Sprintf("%s: want %q, got %q", k, want[k], got[k])
		}
	}
	return "none"
}

// karmadaKubectl writes the exported admin kubeconfig and returns a kubectl
// that fails the test on error and returns stdout.
func karmadaKubectl(t testing.TB, kd *kaov1.KarmadaDeployment) func(...string) string {
	t.Helper()
	return func(args ...string) string {
		t.Helper()
		out, err := karmadaKubectlErr(t, kd, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// karmadaKubectlErr runs kubectl with the exported admin kubeconfig
// (testenv.Kubectl: stdout, and an error that carries stderr).
func karmadaKubectlErr(t testing.TB, kd *kaov1.KarmadaDeployment, args ...string) (string, error) {
	t.Helper()
	return testenv.Kubectl(context.Background(), filepath.Join(env.AssetsDir, "kubectl"), writeKarmadaKubeconfig(t, kd), args...)
}

// etcdStatus is what etcdctl endpoint status says of one member.
type etcdStatus struct {
	clusterID string
	revision  int64
}

// etcdEndpointStatus asks a member for its cluster ID and revision, on the host.
func etcdEndpointStatus(t testing.TB, dc *hosts.Cluster, h hosts.Host) etcdStatus {
	t.Helper()
	out, err := dc.Run(context.Background(), h.Name, "/usr/local/bin/etcdctl --endpoints=https://"+h.Address+":2379 "+
		"--cacert=/etc/karmada/pki/etcd/ca.crt --cert=/etc/karmada/pki/etcd/healthcheck-client.crt "+
		"--key=/etc/karmada/pki/etcd/healthcheck-client.key endpoint status --write-out=json")
	if err != nil {
		t.Fatalf("etcdctl endpoint status on %s: %v", h.Name, err)
	}
	var st []struct {
		Status struct {
			Header struct {
				ClusterID json.Number `json:"cluster_id"`
				Revision  int64       `json:"revision"`
			} `json:"header"`
		} `json:"Status"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&st); err != nil || len(st) != 1 {
		t.Fatalf("etcdctl endpoint status on %s: %v: %s", h.Name, err, out)
	}
	return etcdStatus{clusterID: st[0].Status.Header.ClusterID.String(), revision: st[0].Status.Header.Revision}
}

// unitInvocations records each host's control-plane units' invocation IDs,
// which change whenever a unit starts.
func unitInvocations(t testing.TB, dc *hosts.Cluster, nodes []hosts.Host) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		s, err := dc.Run(context.Background(), n.Name, "systemctl show -p InvocationID --value "+controlPlaneUnits+"; systemctl is-active "+controlPlaneUnits+" | sort -u")
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name] = s
	}
	return out
}

func getRestore(t testing.TB, er *kaov1.EtcdRestore) *kaov1.EtcdRestore {
	t.Helper()
	cur := &kaov1.EtcdRestore{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(er), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// waitForRestore waits until a restore ends, succeeded or failed.
func waitForRestore(t testing.TB, er *kaov1.EtcdRestore, timeout time.Duration) *kaov1.EtcdRestore {
	t.Helper()
	deadline := time.Now().Add(timeout)
	lastTask := ""
	for {
		cur := getRestore(t, er)
		if p := cur.Status.Phase; p == kaov1.RestoreSucceeded || p == kaov1.RestoreFailed {
			return cur
		}
		if p := cur.Status.Progress; p != nil && p.CurrentTask != lastTask {
			lastTask = p.CurrentTask
			t.Logf("restore %s: %d%% %s", er.Name, p.Percent, p.CurrentTask)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restore did not end within %s: %+v", timeout, cur.Status)
		}
		time.Sleep(time.Second)
	}
}

// backupWait bounds waitForBackup: a snapshot of a test's etcd takes seconds.
const backupWait = 3 * time.Minute

// waitForBackup waits for a backup's first snapshot.
func waitForBackup(t testing.TB, eb *kaov1.EtcdBackup) *kaov1.EtcdBackup {
	t.Helper()
	deadline := time.Now().Add(backupWait)
	for {
		cur := &kaov1.EtcdBackup{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(eb), cur); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.BackupSucceededCondition)
		if c != nil && c.Status == metav1.ConditionTrue && cur.Status.LastSnapshot != nil {
			return cur
		}
		if c != nil && c.Status == metav1.ConditionFalse {
			t.Fatalf("the backup failed: %s", c.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot within %s: %+v", backupWait, cur.Status)
		}
		time.Sleep(time.Second)
	}
}

// waitForReadySince waits until the deployment is Ready from a transition
// after since: probes made after the restore began, not a stale status.
func waitForReadySince(t testing.TB, kd *kaov1.KarmadaDeployment, since time.Time, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.ReadyCondition)
		if c != nil && c.Status == metav1.ConditionTrue && !c.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
			return c.LastTransitionTime.Time
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment was not Ready again after the restore within %s: %+v; members: %+v", timeout, c, cur.Status.Members)
		}
		time.Sleep(time.Second)
	}
}
