package etcdrestore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/testenv"
)

// TestEtcdRestoreRefusesASnapshotThatFailsItsChecksum gives three restores a
// snapshot kao must refuse: a file whose sha256 is not the one in the spec,
// a backup's snapshot damaged after it was stored, and a file outside the
// state volume. Each ends Failed with the reason, before the deployment is
// held or any run starts.
func TestEtcdRestoreRefusesASnapshotThatFailsItsChecksum(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	stateDir := testenv.StateDir(t)
	kd := restoreDeployment(t, ns, "kd", restoreBundle(t), false)
	startRestoreOperator(t, ns, pipeline.Options{StateDir: stateDir, PlaybookDir: controllertest.PlaybookDir()})

	// A file of the namespace's backups with a sha256 that is not the spec's.
	file := filepath.Join(stateDir, "backups", ns, "upload", "snap.db")
	controllertest.WriteTestFile(t, file, []byte("not the snapshot you are looking for"))
	wrong := strings.Repeat("ab", 32)
	byPath := controllertest.NewRestore(t, ns, "by-path", kd.Name, kaov1.RestoreSource{Path: file, SHA256: wrong})

	// A backup whose recorded snapshot was damaged after it was stored.
	stored := filepath.Join(stateDir, "backups", ns, kd.Name, "nightly-20250101T000000Z.db")
	controllertest.WriteTestFile(t, stored, []byte("the bytes etcd sent"))
	sum := sha256.Sum256([]byte("the bytes etcd sent"))
	controllertest.WriteTestFile(t, stored, []byte("the bytes etcd sent, then bit rot"))
	eb := controllertest.NewBackup(t, ns, "nightly", kd.Name, "", 0, nil)
	snap := kaov1.Snapshot{Name: filepath.Base(stored), Location: stored, SHA256: hex.EncodeToString(sum[:]),
		Size: resource.MustParse("19"), Revision: 42, Time: metav1.Now()}
	eb.Status.Snapshots, eb.Status.LastSnapshot = []kaov1.Snapshot{snap}, &snap
	if err := controllertest.K8s.Status().Update(context.Background(), eb); err != nil {
		t.Fatal(err)
	}
	byBackup := controllertest.NewRestore(t, ns, "by-backup", kd.Name, kaov1.RestoreSource{BackupName: eb.Name})

	// A file outside the state volume, with its right checksum.
	outside := filepath.Join(t.TempDir(), "elsewhere.db")
	controllertest.WriteTestFile(t, outside, []byte("x"))
	xSum := sha256.Sum256([]byte("x"))
	elsewhere := controllertest.NewRestore(t, ns, "elsewhere", kd.Name, kaov1.RestoreSource{Path: outside, SHA256: hex.EncodeToString(xSum[:])})
	// Another namespace's backup, with its right checksum, and a file of
	// that namespace that does not exist: one and the same refusal, which
	// says nothing about the other namespace's files.
	theirs := filepath.Join(stateDir, "backups", ns+"-other", "kd", "nightly-20250101T000000Z.db")
	controllertest.WriteTestFile(t, theirs, []byte("x"))
	otherNamespace := controllertest.NewRestore(t, ns, "other-namespace", kd.Name, kaov1.RestoreSource{Path: theirs, SHA256: hex.EncodeToString(xSum[:])})
	notThere := filepath.Join(stateDir, "backups", ns+"-other", "kd", "no-such.db")
	guess := controllertest.NewRestore(t, ns, "guess", kd.Name, kaov1.RestoreSource{Path: notThere, SHA256: hex.EncodeToString(xSum[:])})
	// A path that climbs out of the namespace's directory.
	climb := controllertest.NewRestore(t, ns, "climb", kd.Name, kaov1.RestoreSource{
		Path: filepath.Join(stateDir, "backups", ns, "..", ns+"-other", "kd", "nightly-20250101T000000Z.db"), SHA256: hex.EncodeToString(xSum[:])})
	notOurs := "is not one of namespace " + ns + "'s backups"

	for _, tc := range []struct {
		er     *kaov1.EtcdRestore
		reason string
		says   []string
	}{
		{byPath, kaov1.ChecksumMismatchReason, []string{file, wrong, "spec.source.sha256", "stopped nothing"}},
		{byBackup, kaov1.ChecksumMismatchReason, []string{stored, snap.SHA256, "EtcdBackup nightly", "stopped nothing"}},
		{elsewhere, kaov1.InvalidSpecReason, []string{outside, notOurs}},
		{otherNamespace, kaov1.InvalidSpecReason, []string{theirs, notOurs}},
		{guess, kaov1.InvalidSpecReason, []string{notThere, notOurs}},
		{climb, kaov1.InvalidSpecReason, []string{notOurs}},
	} {
		done := controllertest.WaitFor(t, tc.er, time.Minute, "the restore refused", func(er *kaov1.EtcdRestore) bool {
			return er.Status.Phase == kaov1.RestoreFailed
		})
		c := restoreCondition(done, kaov1.RestoreSucceededCondition)
		if c.Status != metav1.ConditionFalse || c.Reason != tc.reason {
			t.Errorf("%s: RestoreSucceeded is %s/%s, want False/%s: %s", tc.er.Name, c.Status, c.Reason, tc.reason, c.Message)
		}
		for _, s := range tc.says {
			if !strings.Contains(c.Message, s) {
				t.Errorf("%s: the message does not say %q: %s", tc.er.Name, s, c.Message)
			}
		}
		// A refusal never tells whether a file exists, nor a file's real
		// checksum (only the expected one).
		if tc.reason == kaov1.InvalidSpecReason && strings.Contains(c.Message, "does not exist") {
			t.Errorf("%s: the refusal tells whether the file exists: %s", tc.er.Name, c.Message)
		}
		if damaged := sha256.Sum256([]byte("the bytes etcd sent, then bit rot")); strings.Contains(c.Message, hex.EncodeToString(damaged[:])) {
			t.Errorf("%s: the message tells the file's real sha256: %s", tc.er.Name, c.Message)
		}
		if r := restoreCondition(done, kaov1.ReadyCondition); r.Status != metav1.ConditionFalse {
			t.Errorf("%s: Ready is %s after a refusal", tc.er.Name, r.Status)
		}
		if done.Status.CompletionTime == nil || done.Status.LastRun != nil || done.Status.Progress != nil {
			t.Errorf("%s: a refused restore ends without a run: %+v", tc.er.Name, done.Status)
		}
	}
	waitForRestoreEvent(t, byPath, checksumMismatchEvent)
	waitForRestoreEvent(t, byBackup, checksumMismatchEvent)
	if cur := controllertest.Get(t, kd); cur.Annotations[kaov1.RestoreInProgressAnnotation] != "" || cur.Annotations[kaov1.RestoredAtAnnotation] != "" {
		t.Errorf("a refused restore held the deployment or asked it for a run: %v", cur.Annotations)
	}
	if runs, _ := filepath.Glob(filepath.Join(stateDir, "runs", "*", "*")); len(runs) > 0 {
		t.Errorf("a refused restore started runs: %v", runs)
	}
	// The damaged files stay: kao reports, it does not delete.
	for _, f := range []string{file, stored} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the refused snapshot %s is gone: %v", f, err)
		}
	}
}

// TestEtcdRestoreWaitsForTheRunThenHoldsTheDeployment proves the restore
// side of the mutual exclusion with the stand-in playbook: a restore waits
// while the deployment has a run in progress, then holds it with the
// annotation for exactly as long as its own run, records the run, and lets
// it go.
func TestEtcdRestoreWaitsForTheRunThenHoldsTheDeployment(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	stateDir := testenv.StateDir(t)
	kd := restoreDeployment(t, ns, "kd", restoreBundle(t), true)
	snapFile, sum := takeTestSnapshot(t, filepath.Join(stateDir, "backups", ns, "upload"))
	startRestoreOperator(t, ns, pipeline.Options{StateDir: stateDir, PlaybookDir: controllertest.PlaybookDir(), RunTimeout: 3 * time.Minute})

	er := controllertest.NewRestore(t, ns, "restore-1", kd.Name, kaov1.RestoreSource{Path: snapFile, SHA256: sum})
	waiting := controllertest.WaitFor(t, er, time.Minute, "waiting for the deployment's run", func(er *kaov1.EtcdRestore) bool {
		c := restoreCondition(er, kaov1.ReadyCondition)
		return c.Reason == kaov1.WaitingForRunReason && strings.Contains(c.Message, "install.yml")
	})
	if waiting.Status.Phase != kaov1.RestorePending || waiting.Status.Progress != nil {
		t.Errorf("a restore waiting for the deployment's run is Pending without a run: %+v", waiting.Status)
	}
	time.Sleep(2 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Annotations[kaov1.RestoreInProgressAnnotation] != "" {
		t.Fatalf("the restore held the deployment during its run: %v", cur.Annotations)
	}

	// The deployment's run ends: the restore takes the deployment and runs.
	cur := controllertest.Get(t, kd)
	cur.Status.Progress = nil
	if err := controllertest.K8s.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	running := controllertest.WaitFor(t, er, time.Minute, "the restore's run", func(er *kaov1.EtcdRestore) bool {
		return er.Status.Phase == kaov1.RestoreRunning && er.Status.Progress != nil
	})
	if holder := controllertest.Get(t, kd).Annotations[kaov1.RestoreInProgressAnnotation]; holder != er.Name {
		t.Fatalf("the deployment is not held by the running restore: annotation %q", holder)
	}
	if running.Status.StartTime == nil || running.Status.Snapshot == nil || running.Status.Snapshot.SHA256 != sum ||
		running.Status.Snapshot.Revision <= 0 || running.Status.Progress.Playbook != pipeline.EtcdRestorePlaybook {
		t.Errorf("a running restore shows its snapshot (with etcdutl's revision) and its run: %+v", running.Status)
	}
	wantPrev := "/var/lib/karmada-etcd.before-restore-restore-1-"
	if !strings.HasPrefix(running.Status.PreviousDataDir, wantPrev) {
		t.Errorf("status.previousDataDir is %q, want %s<uid>", running.Status.PreviousDataDir, wantPrev)
	}

	// The run got the snapshot and a new cluster token made from the UID.
	vars := waitForFile(t, snapFile+".vars", time.Minute)
	id := strings.TrimPrefix(running.Status.PreviousDataDir, "/var/lib/karmada-etcd.before-restore-")
	if want := id + " karmada-etcd-restore-" + string(running.UID) + " True\n"; vars != want {
		t.Errorf("the run's variables are %q, want %q", vars, want)
	}
	controllertest.WriteTestFile(t, snapFile+".release", nil)

	done := controllertest.WaitFor(t, er, 2*time.Minute, "the restore's end", func(er *kaov1.EtcdRestore) bool {
		return er.Status.Phase == kaov1.RestoreSucceeded
	})
	if c := restoreCondition(done, kaov1.RestoreSucceededCondition); c.Status != metav1.ConditionTrue || c.Reason != kaov1.RestoredReason ||
		!strings.Contains(c.Message, done.Status.PreviousDataDir) {
		t.Errorf("RestoreSucceeded after the run: %+v", c)
	}
	last := done.Status.LastRun
	if last == nil || last.Result != kaov1.RunSucceeded || len(last.Hosts) == 0 || last.LogConfigMapName == "" || done.Status.Progress != nil ||
		done.Status.CompletionTime == nil {
		t.Fatalf("status.lastRun does not record the run: %+v", done.Status)
	}
	released := controllertest.Get(t, kd)
	if holder := released.Annotations[kaov1.RestoreInProgressAnnotation]; holder != "" {
		t.Errorf("the deployment is still held after the restore: %q", holder)
	}
	// The same write asks the deployment for an install run after the restore.
	if at, err := time.Parse(time.RFC3339, released.Annotations[kaov1.RestoredAtAnnotation]); err != nil ||
		at.Before(done.Status.StartTime.Truncate(time.Second)) || at.After(done.Status.CompletionTime.Time) {
		t.Errorf("%s is %q, want the time the restore ended (it started %s and ended %s)", kaov1.RestoredAtAnnotation,
			released.Annotations[kaov1.RestoredAtAnnotation], done.Status.StartTime, done.Status.CompletionTime)
	}
	waitForRestoreEvent(t, er, restoreStartedEvent)
	waitForRestoreEvent(t, er, restoreSucceededEvent)
	cm := &corev1.ConfigMap{}
	if err := controllertest.K8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: last.LogConfigMapName}, cm); err != nil {
		t.Errorf("the run's log: %v", err)
	}

	// A restore runs once: it stays Succeeded and never holds the deployment again.
	time.Sleep(2 * time.Second)
	if again := controllertest.Get(t, er); again.Status.Phase != kaov1.RestoreSucceeded || again.Status.LastRun.ID != last.ID {
		t.Errorf("the restore ran again: %+v", again.Status)
	}
	if err := controllertest.K8s.Delete(context.Background(), er); err != nil {
		t.Fatal(err)
	}
	waitForRestoreGone(t, er)
}

// TestEtcdRestoreResumesAfterAnOperatorRestart stops the operator in the
// middle of a restore, twice: a shutdown that records the cut-off run, and a
// crash that leaves status.progress behind. Each time the restore stays
// Running with the deployment held, and the next operator process runs the
// playbook again until the restore succeeds.
func TestEtcdRestoreResumesAfterAnOperatorRestart(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	stateDir := testenv.StateDir(t)
	kd := restoreDeployment(t, ns, "kd", restoreBundle(t), false)
	snapFile, sum := takeTestSnapshot(t, filepath.Join(stateDir, "backups", ns, "upload"))
	o := pipeline.Options{StateDir: stateDir, PlaybookDir: controllertest.PlaybookDir(), RunTimeout: 3 * time.Minute, ArtifactsDir: controllertest.BackupBundle(t, true), Policy: controllertest.TestPolicy}
	start := func() func() {
		return controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error { return Setup(mgr, o) })
	}

	// A shutdown in the middle of the run.
	stop := start()
	er := controllertest.NewRestore(t, ns, "restore-1", kd.Name, kaov1.RestoreSource{Path: snapFile, SHA256: sum})
	waitForFile(t, snapFile+".vars", time.Minute)
	first := controllertest.Get(t, er).Status.Progress
	stop()
	cut := controllertest.Get(t, er)
	if cut.Status.Phase != kaov1.RestoreRunning || cut.Status.LastRun == nil || cut.Status.LastRun.Result != kaov1.RunCancelled ||
		cut.Status.LastRun.ID != first.RunID || cut.Status.Progress != nil {
		t.Fatalf("a restore cut off by a shutdown stays Running with its run recorded as cancelled: %+v", cut.Status)
	}
	if holder := controllertest.Get(t, kd).Annotations[kaov1.RestoreInProgressAnnotation]; holder != er.Name {
		t.Fatalf("the deployment was released in the middle of a restore: annotation %q", holder)
	}

	// The next process runs the playbook again; then it crashes (simulated:
	// its manager stops, and status is put back as a crash leaves it).
	if err := os.Remove(snapFile + ".vars"); err != nil {
		t.Fatal(err)
	}
	stop = start()
	waitForFile(t, snapFile+".vars", time.Minute)
	waitForRestoreEvent(t, er, restoreResumedEvent)
	second := controllertest.Get(t, er).Status.Progress
	if second == nil || second.RunID == first.RunID {
		t.Fatalf("the resumed restore did not start a new run: %+v", second)
	}
	stop()
	crashed := controllertest.Get(t, er)
	crashed.Status.Progress = second
	if err := controllertest.K8s.Status().Update(context.Background(), crashed); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(snapFile + ".vars"); err != nil {
		t.Fatal(err)
	}
	controllertest.WriteTestFile(t, snapFile+".release", nil)
	start()
	done := controllertest.WaitFor(t, er, 2*time.Minute, "the restore's end", func(er *kaov1.EtcdRestore) bool {
		return er.Status.Phase == kaov1.RestoreSucceeded
	})
	if done.Status.LastRun == nil || done.Status.LastRun.Result != kaov1.RunSucceeded || done.Status.LastRun.ID == second.RunID {
		t.Errorf("the restore did not finish with a third run: %+v", done.Status.LastRun)
	}
	if holder := controllertest.Get(t, kd).Annotations[kaov1.RestoreInProgressAnnotation]; holder != "" {
		t.Errorf("the deployment is still held after the restore: %q", holder)
	}
}

// restoreDeployment creates a Binary KarmadaDeployment with managed etcd on
// documentation addresses, its SSH and PKI Secrets, and a finished install in
// status; busy adds a run in progress.
func restoreDeployment(t *testing.T, ns, name, bundleDir string, busy bool) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode: kaov1.BinaryMode, Version: "v1.18.1",
			Hosts: []kaov1.Host{{Name: "node-1", Address: "192.0.2.10",
				Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}}},
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: name + "-ssh", Key: "id"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: name + "-ssh", Key: "known_hosts"},
			},
			Artifacts: kaov1.ArtifactsSpec{LocalPath: bundleDir},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{Version: controllertest.TestEtcdVersion}},
		},
	}
	if err := controllertest.K8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	key, knownHosts := testenv.SSHMaterial(t, "192.0.2.10")
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: name + "-ssh", Namespace: ns}, Data: map[string][]byte{
			"id": key, "known_hosts": knownHosts}},
		{ObjectMeta: metav1.ObjectMeta{Name: pipeline.PKISecretName(kd), Namespace: ns}, Data: map[string][]byte{"ca.crt": []byte("test")}},
	} {
		if err := controllertest.K8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	cur := controllertest.Get(t, kd)
	cur.Status.ObservedGeneration = cur.Generation
	if busy {
		cur.Status.Progress = &kaov1.RunProgress{RunID: "20250101-000000-abcd", Playbook: pipeline.InstallPlaybook, StartTime: metav1.Now()}
	}
	if err := controllertest.K8s.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// restoreBundle is an artifacts bundle with the version directories a run
// checks and the tools cache's etcdutl, which reads snapshots.
func restoreBundle(t *testing.T) string {
	t.Helper()
	dir := controllertest.BackupBundle(t, true)
	for _, d := range []string{"karmada/v1.18.1/bin", "kubernetes/v1.35.4/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// takeTestSnapshot saves a snapshot of a one-member etcd into dir and
// returns its path and sha256.
func takeTestSnapshot(t *testing.T, dir string) (string, string) {
	t.Helper()
	c := controllertest.StartEtcdCluster(t, 1)
	c.PutKeys(t, "/registry/test/", 10)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "etcd.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	saved, err := etcdsnapshot.Save(ctx, c.Members()[c.Hosts[0].Name], c.ClientTLS, nil, file, etcdsnapshot.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return file, saved.SHA256
}

// startRestoreOperator starts a manager with only the EtcdRestore controller.
// The operator's own bundle (--artifacts-dir) gives etcdutl unless o names one.
func startRestoreOperator(t *testing.T, ns string, o pipeline.Options) {
	t.Helper()
	controllertest.RequireEnv(t)
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = controllertest.BackupBundle(t, true)
	}
	o.Policy = controllertest.TestPolicy
	controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error { return Setup(mgr, o) })
}

func waitForRestoreGone(t *testing.T, er *kaov1.EtcdRestore) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := controllertest.K8s.Get(context.Background(), client.ObjectKeyFromObject(er), &kaov1.EtcdRestore{})
		if client.IgnoreNotFound(err) == nil && err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the EtcdRestore was not released: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func restoreCondition(er *kaov1.EtcdRestore, t string) metav1.Condition {
	for _, c := range er.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// waitForRestoreEvent waits until an Event with the reason exists for the restore.
func waitForRestoreEvent(t *testing.T, er *kaov1.EtcdRestore, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range controllertest.DeploymentEvents(t, &kaov1.KarmadaDeployment{ObjectMeta: er.ObjectMeta}) {
			if e.Regarding.Kind == "EtcdRestore" && e.Reason == reason {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s Event for EtcdRestore %s", reason, er.Name)
}

func waitForFile(t *testing.T, path string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear within %s", path, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
