package etcdbackup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/testenv"
)

// TestEtcdBackupOneShotSnapshotIsCompleteAndVerified takes a one-shot
// backup of a three-member TLS etcd with kao's PKI. The backup waits while
// the deployment is not installed; then the snapshot comes from a follower,
// status records the file's real sha256 and etcd's revision, and the file
// restores with etcdutl into an etcd that serves every key.
func TestEtcdBackupOneShotSnapshotIsCompleteAndVerified(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	cluster := controllertest.StartEtcdCluster(t, 3)
	const keys = 200
	rev := cluster.PutKeys(t, "/registry/test/", keys)
	// The deployment's bundle (a tenant's choice) holds an "etcdutl" that
	// would leave a mark if the operator ran it: the operator checks the
	// snapshot with its own (startBackupOperator's --artifacts-dir).
	marker := filepath.Join(t.TempDir(), "tenant-program-ran")
	kd := binaryDeployment(t, ns, "kd", cluster, tenantBundle(t, marker), false)
	stateDir := testenv.StateDir(t)
	startBackupOperator(t, ns, pipeline.Options{StateDir: stateDir})

	eb := controllertest.NewBackup(t, ns, "once", kd.Name, "", 0, nil)
	waiting := controllertest.WaitFor(t, eb, time.Minute, "Ready WaitingForRun while the deployment is not installed",
		backupConditionIs(kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.WaitingForRunReason))
	if !strings.Contains(backupCondition(waiting, kaov1.ReadyCondition).Message, "first install") || waiting.Status.LastSnapshot != nil {
		t.Fatalf("a backup of a deployment not installed yet must wait and say so: %+v", waiting.Status)
	}

	leader := cluster.WaitHealthy(t).Leader
	markInstalled(t, kd)
	done := controllertest.WaitFor(t, eb, 3*time.Minute, "BackupSucceeded",
		backupConditionIs(kaov1.BackupSucceededCondition, metav1.ConditionTrue, kaov1.SnapshotSavedReason))

	snap := done.Status.LastSnapshot
	if snap == nil || len(done.Status.Snapshots) != 1 || done.Status.Snapshots[0].Name != snap.Name {
		t.Fatalf("want one snapshot in status, got %+v", done.Status)
	}
	wantDir := filepath.Join(stateDir, "backups", ns, kd.Name)
	if filepath.Dir(snap.Location) != wantDir || !strings.HasPrefix(snap.Name, "once-") || !strings.HasSuffix(snap.Name, "Z.db") {
		t.Errorf("snapshot %s stored at %s, want <backup>-<UTC time>.db in %s", snap.Name, snap.Location, wantDir)
	}
	data, err := os.ReadFile(snap.Location)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); snap.SHA256 != hex.EncodeToString(sum[:]) || snap.Size.Value() != int64(len(data)) {
		t.Errorf("status says sha256 %s size %s; the file has %x, %d bytes", snap.SHA256, snap.Size.String(), sum, len(data))
	}
	if snap.Revision != rev {
		t.Errorf("snapshot revision %d, etcd's revision after the writes is %d", snap.Revision, rev)
	}
	if snap.Member == "" || snap.Member == leader {
		t.Errorf("snapshot taken from %q; want a follower, not the leader %s", snap.Member, leader)
	}
	for path, want := range map[string]os.FileMode{snap.Location: 0o600, wantDir: 0o700, filepath.Join(stateDir, "backups", ns): 0o700} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(wantDir, ".*")); len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
	ready := backupCondition(done, kaov1.ReadyCondition)
	if ready.Status != metav1.ConditionTrue || done.Status.NextScheduleTime != nil || done.Status.ObservedGeneration != done.Generation {
		t.Errorf("a one-shot backup with its snapshot is Ready with nothing scheduled: %+v", done.Status)
	}
	if msg := backupCondition(done, kaov1.BackupSucceededCondition).Message; !strings.Contains(msg, fmt.Sprintf("revision %d", rev)) || !strings.Contains(msg, "keys") {
		t.Errorf("BackupSucceeded must tell the revision and key count: %q", msg)
	}
	waitForEventOf(t, eb, backupSucceededEvent)
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the operator ran the etcdutl of the deployment's bundle (%v)", err)
	}

	restored := restoreSnapshot(t, cluster.Bin, snap.Location)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := restored.Get(ctx, "/registry/test/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != keys || string(resp.Kvs[keys-1].Value) != fmt.Sprintf("value-%d", keys-1) {
		t.Errorf("the restored etcd serves %d keys under /registry/test/, want %d", len(resp.Kvs), keys)
	}

	key := string(cluster.Bundle["etcd-healthcheck-client.key"])
	keyLine := strings.Split(key, "\n")[1]
	raw, _ := json.Marshal(controllertest.Get(t, eb).Status)
	for what, text := range map[string]string{"status": string(raw), "Events": strings.Join(backupEvents(t, eb), "\n"), "logs": controllertest.OperatorLog.String()} {
		if strings.Contains(text, keyLine) {
			t.Errorf("the etcd client key leaked into %s", what)
		}
	}
}

// TestEtcdBackupScheduleKeepsRetention drives a backup scheduled every
// minute with a fake clock: a snapshot per schedule time, retention 2
// deletes older files and status entries, a failed attempt (the only member
// down) is a condition and the next time runs normally, missed times
// collapse into one snapshot, and suspend stops snapshots.
func TestEtcdBackupScheduleKeepsRetention(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	cluster := controllertest.StartEtcdCluster(t, 1)
	cluster.PutKeys(t, "/registry/sched/", 20)
	kd := binaryDeployment(t, ns, "kd", cluster, controllertest.BackupBundle(t, true), true)
	eb := controllertest.NewBackup(t, ns, "every-minute", kd.Name, "* * * * *", 2, nil)
	eb = controllertest.Get(t, eb)
	clock := clocktesting.NewFakePassiveClock(eb.CreationTimestamp.Time)
	recorder := events.NewFakeRecorder(100)
	stateDir := testenv.StateDir(t)
	r := &Reconciler{Client: controllertest.K8s, APIReader: controllertest.K8s, Recorder: recorder, Clock: clock, Options: pipeline.Options{StateDir: stateDir, ArtifactsDir: controllertest.BackupBundle(t, true)}}
	reconcile := func() (ctrl.Result, *kaov1.EtcdBackup) {
		t.Helper()
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(eb)})
		if err != nil {
			t.Fatal(err)
		}
		return res, controllertest.Get(t, eb)
	}
	files := func() []string {
		t.Helper()
		m, _ := filepath.Glob(filepath.Join(stateDir, "backups", ns, kd.Name, "*.db"))
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m
	}
	names := func(s []kaov1.Snapshot) []string {
		out := []string{}
		for _, x := range s {
			out = append(out, x.Name)
		}
		return out
	}

	first := eb.CreationTimestamp.Truncate(time.Minute).Add(time.Minute)
	res, got := reconcile()
	if got.Status.LastSnapshot != nil || got.Status.NextScheduleTime == nil || !got.Status.NextScheduleTime.Equal(&metav1.Time{Time: first}) {
		t.Fatalf("before the first schedule time: want no snapshot and next at %s, got %+v", first, got.Status)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
		t.Errorf("requeue after %s, want the time to the next schedule", res.RequeueAfter)
	}

	want := []string{}
	for i := range 3 {
		at := first.Add(time.Duration(i) * time.Minute)
		clock.SetTime(at.Add(2 * time.Second))
		res, got = reconcile()
		if c := backupCondition(got, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionTrue {
			t.Fatalf("snapshot %d: %+v", i, c)
		}
		want = append([]string{got.Status.LastSnapshot.Name}, want...)
		if len(want) > 2 {
			want = want[:2]
		}
		if !got.Status.LastScheduleTime.Equal(&metav1.Time{Time: at}) || !got.Status.NextScheduleTime.Equal(&metav1.Time{Time: at.Add(time.Minute)}) {
			t.Errorf("snapshot %d: lastScheduleTime %v nextScheduleTime %v, want %s and a minute later", i, got.Status.LastScheduleTime, got.Status.NextScheduleTime, at)
		}
		if res.RequeueAfter <= 0 || res.RequeueAfter > time.Minute {
			t.Errorf("snapshot %d: requeue after %s", i, res.RequeueAfter)
		}
	}
	if strings.Join(names(got.Status.Snapshots), ",") != strings.Join(want, ",") {
		t.Errorf("status.snapshots %v, want the newest two, newest first: %v", names(got.Status.Snapshots), want)
	}
	if f := files(); strings.Join(f, ",") != want[1]+","+want[0] {
		t.Errorf("files on disk %v, want only %v", f, want)
	}
	if evs := drainEvents(recorder); !hasReason(evs, snapshotPrunedEvent) || hasReason(evs, pruneFailedEvent) {
		t.Errorf("want a SnapshotsPruned Event and no PruneFailed: %v", evs)
	}

	// The only member is down at the next time: the attempt fails, the one after runs.
	cluster.Stop("etcd-1")
	clock.SetTime(first.Add(3*time.Minute + time.Second))
	_, got = reconcile()
	failed := backupCondition(got, kaov1.BackupSucceededCondition)
	if failed.Status != metav1.ConditionFalse || failed.Reason != kaov1.SnapshotFailedReason || !strings.Contains(failed.Message, "etcd-1") {
		t.Errorf("a down member must fail the attempt with a message naming it: %+v", failed)
	}
	if backupCondition(got, kaov1.ReadyCondition).Status != metav1.ConditionFalse || len(got.Status.Snapshots) != 2 {
		t.Errorf("after a failure: Ready False, snapshots kept: %+v", got.Status)
	}
	if evs := drainEvents(recorder); !hasReason(evs, backupFailedEvent) {
		t.Errorf("no BackupFailed Event: %v", evs)
	}
	cluster.Start(t, "etcd-1")
	cluster.WaitHealthy(t)
	clock.SetTime(first.Add(4*time.Minute + time.Second))
	_, got = reconcile()
	if backupCondition(got, kaov1.BackupSucceededCondition).Status != metav1.ConditionTrue ||
		backupCondition(got, kaov1.ReadyCondition).Status != metav1.ConditionTrue {
		t.Errorf("the next scheduled attempt after a failure must run normally: %+v", got.Status.Conditions)
	}

	// Ten minutes without the operator: one snapshot for the newest missed time.
	before := got.Status.LastSnapshot.Name
	latest := first.Add(14 * time.Minute)
	clock.SetTime(latest.Add(30 * time.Second))
	_, got = reconcile()
	if got.Status.LastSnapshot.Name == before || !got.Status.LastScheduleTime.Equal(&metav1.Time{Time: latest}) {
		t.Errorf("missed times: want one snapshot for %s, got last %s at %v", latest, got.Status.LastSnapshot.Name, got.Status.LastScheduleTime)
	}
	if _, again := reconcile(); again.Status.LastSnapshot.Name != got.Status.LastSnapshot.Name {
		t.Error("a second reconcile at the same time took another snapshot")
	}
	if n := len(files()); n != 2 {
		t.Errorf("%d files on disk, want 2", n)
	}

	// Suspended: no snapshot, nothing scheduled.
	got.Spec.Suspend = true
	if err := controllertest.K8s.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(latest.Add(5 * time.Minute))
	res, got = reconcile()
	if c := backupCondition(got, kaov1.ReadyCondition); c.Reason != kaov1.PausedReason || got.Status.NextScheduleTime != nil || res.RequeueAfter != 0 {
		t.Errorf("a suspended backup says so and schedules nothing: %+v, %+v", c, got.Status)
	}
	if !got.Status.LastScheduleTime.Equal(&metav1.Time{Time: latest}) {
		t.Errorf("a suspended backup took a snapshot: %+v", got.Status)
	}
}

// TestEtcdBackupFailuresNameTheirCause runs one-shot backups that cannot
// succeed: each records BackupSucceeded False with a message naming the
// cause, a BackupFailed Event, and a retry time; a backup of a deployment
// that does not exist waits and says so.
func TestEtcdBackupFailuresNameTheirCause(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	startBackupOperator(t, ns, pipeline.Options{StateDir: testenv.StateDir(t)})
	caPEM, _ := controllertest.SelfSignedPair(t, "user-etcd-ca")
	clientPEM, clientKey := controllertest.SelfSignedPair(t, "user-etcd-client")
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-ca", Namespace: ns}, Data: map[string][]byte{"ca.crt": caPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-client", Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": clientPEM, "tls.key": clientKey}},
		{ObjectMeta: metav1.ObjectMeta{Name: "etcd-client-nokey", Namespace: ns}, Data: map[string][]byte{"tls.crt": clientPEM}},
		{ObjectMeta: metav1.ObjectMeta{Name: "backup-host", Namespace: ns}, Data: map[string][]byte{"known_hosts": []byte("10.0.0.9 ssh-ed25519 AAAA\n")}},
	} {
		if err := controllertest.K8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	closed := fmt.Sprintf("https://127.0.0.1:%d", freeTCPPort(t))
	external := func(name, clientSecret, bundle string) string {
		kd := &kaov1.KarmadaDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.ContainerizedMode, Version: "v1.18.1",
				HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns},
				Artifacts:   kaov1.ArtifactsSpec{LocalPath: bundle, ImageRegistry: controllertest.TestImageRegistry},
				Etcd: kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{
					Endpoints:            []string{closed},
					CASecretRef:          kaov1.SecretKeyReference{Name: "etcd-ca", Key: "ca.crt"},
					ClientCertSecretName: clientSecret,
				}},
			},
		}
		if err := controllertest.K8s.Create(ctx, kd); err != nil {
			t.Fatal(err)
		}
		markInstalled(t, kd)
		return name
	}
	good := controllertest.BackupBundle(t, true)
	tests := []struct {
		// name says what is wrong.
		name string
		// deployment is the KarmadaDeployment backed up.
		deployment string
		// dest is the destination; Local when nil.
		dest *kaov1.BackupDestination
		// want are parts of the BackupSucceeded message.
		want []string
	}{
		{
			name:       "unreachable",
			deployment: external("unreachable", "etcd-client", good),
			want:       []string{"no etcd member answers", "0/1", strings.TrimPrefix(closed, "https://")},
		},
		{
			name:       "client-secret-without-key",
			deployment: external("nokey", "etcd-client-nokey", good),
			want:       []string{"etcd-client-nokey", "tls.key"},
		},
		{
			name:       "ssh-key-secret-missing",
			deployment: external("ssh-key", "etcd-client", good),
			dest: &kaov1.BackupDestination{Type: kaov1.SSHDestination, SSH: &kaov1.SSHBackupDestination{
				Address: "10.0.0.9", Directory: "/var/backups",
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "no-such-key", Key: "id"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "backup-host", Key: "known_hosts"},
			}},
			want: []string{"no-such-key", "spec.destination.ssh.privateKeySecretRef", "does not exist"},
		},
	}
	backups := map[string]*kaov1.EtcdBackup{}
	for _, tc := range tests {
		backups[tc.name] = controllertest.NewBackup(t, ns, tc.name, tc.deployment, "", 0, tc.dest)
	}
	missing := controllertest.NewBackup(t, ns, "missing-deployment", "nope", "", 0, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := controllertest.WaitFor(t, backups[tc.name], 2*time.Minute, "BackupSucceeded False",
				backupConditionIs(kaov1.BackupSucceededCondition, metav1.ConditionFalse, kaov1.SnapshotFailedReason))
			msg := backupCondition(got, kaov1.BackupSucceededCondition).Message
			t.Logf("BackupSucceeded: %s", msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("BackupSucceeded message lacks %q: %s", w, msg)
				}
			}
			if strings.Contains(msg, strings.Split(string(clientKey), "\n")[1]) {
				t.Error("the client key leaked into the message")
			}
			if got.Status.NextScheduleTime == nil || got.Status.LastSnapshot != nil || backupCondition(got, kaov1.ReadyCondition).Status != metav1.ConditionFalse {
				t.Errorf("a failed one-shot backup is not Ready and has a retry time: %+v", got.Status)
			}
			waitForEventOf(t, got, backupFailedEvent)
		})
	}
	got := controllertest.WaitFor(t, missing, time.Minute, "Ready PrerequisitesMissing",
		backupConditionIs(kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.PrerequisitesMissingReason))
	if c := backupCondition(got, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionUnknown || !strings.Contains(backupCondition(got, kaov1.ReadyCondition).Message, "nope") {
		t.Errorf("a backup of a missing deployment waits, naming it: %+v", got.Status.Conditions)
	}
}

// restoreSnapshot restores a snapshot with etcdutl into a new data
// directory, starts a one-member etcd on it and returns a client.
func restoreSnapshot(t *testing.T, bin, snapshot string) *clientv3.Client {
	t.Helper()
	dir := t.TempDir()
	peer := fmt.Sprintf("http://127.0.0.1:%d", freeTCPPort(t))
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", freeTCPPort(t))
	data := filepath.Join(dir, "data")
	out, err := exec.Command(filepath.Join(bin, "etcdutl"), "snapshot", "restore", snapshot, "--data-dir="+data,
		"--name=restored", "--initial-cluster=restored="+peer, "--initial-advertise-peer-urls="+peer).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	cmd := exec.Command(filepath.Join(bin, "etcd"), "--name=restored", "--data-dir="+data,
		"--listen-client-urls="+clientURL, "--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=restored="+peer,
		"--log-level=error", "--log-outputs="+filepath.Join(dir, "etcd.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Status(ctx, clientURL)
		cancel()
		if err == nil {
			return cli
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("the restored etcd does not answer: %v\n%s", err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitForEventOf waits until an Event with the reason exists for the backup.
func waitForEventOf(t *testing.T, eb *kaov1.EtcdBackup, reason string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, e := range backupEvents(t, eb) {
			if strings.HasPrefix(e, reason+": ") {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("no %s Event for EtcdBackup %s; have %v", reason, eb.Name, backupEvents(t, eb))
}

// drainEvents empties a fake recorder ("<type> <reason> <note>" each).
func drainEvents(r *events.FakeRecorder) []string {
	out := []string{}
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// hasReason tells whether one of a fake recorder's Events has the reason.
func hasReason(evs []string, reason string) bool {
	for _, e := range evs {
		if strings.Contains(e, " "+reason+" ") {
			return true
		}
	}
	return false
}

// freeTCPPort returns a loopback port nobody listens on right now.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// TestEtcdutlComesOnlyFromTheOperatorsBundle: the program that checks
// snapshots is the operator's own (EtcdutlFor does not even see the
// deployment, whose bundle a tenant chooses), for the asked etcd version or
// the bundle's default; without one the error names the operator's bundle.
func TestEtcdutlComesOnlyFromTheOperatorsBundle(t *testing.T) {
	own := controllertest.BackupBundle(t, true)
	g := &pipeline.Gatherer{Options: pipeline.Options{ArtifactsDir: own}}
	bin, err := g.EtcdutlFor(controllertest.TestEtcdVersion)
	if err != nil || bin != filepath.Join(own, "etcd", controllertest.TestEtcdVersion, "bin", "etcdutl") {
		t.Errorf("etcdutl from %q (%v), want the operator's bundle %s", bin, err, own)
	}
	// A version the operator's bundle lacks, or none: its default etcd reads it.
	for _, v := range []string{"v3.5.21", "", "$(reboot)"} {
		if bin, err := g.EtcdutlFor(v); err != nil || bin != filepath.Join(own, "etcd", controllertest.TestEtcdVersion, "bin", "etcdutl") {
			t.Errorf("etcdutl for version %q from %q (%v), want the operator's default", v, bin, err)
		}
	}
	for _, o := range []pipeline.Options{{ArtifactsDir: controllertest.BackupBundle(t, false)}, {}} {
		g := &pipeline.Gatherer{Options: o}
		if bin, err := g.EtcdutlFor(controllertest.TestEtcdVersion); err == nil || !strings.Contains(err.Error(), "--artifacts-dir") {
			t.Errorf("without etcdutl in the operator's bundle: %q, %v; want an error naming --artifacts-dir", bin, err)
		}
	}
}
