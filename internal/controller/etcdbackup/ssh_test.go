package etcdbackup

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// TestEtcdBackupToSSHHost stores snapshots on a real backup host over SSH:
// the remote file has the sha256 status records and mode 0600, retention
// deletes the older one on the host, no key file or snapshot stays on the
// operator's side, and a known_hosts that pins another key is refused with
// a message naming its Secret.
func TestEtcdBackupToSSHHost(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	dc := hosts.Start(t, 1)
	host := dc.Hosts()[0]
	cluster := controllertest.StartEtcdCluster(t, 1)
	cluster.PutKeys(t, "/registry/ssh/", 20)
	kd := binaryDeployment(t, ns, "kd", cluster, controllertest.BackupBundle(t, true), true)

	privateKey, destIn := backupHostSecret(t, ns, dc)
	const dir = "/var/backups/kao"
	dest := func(knownHostsKey string) *kaov1.BackupDestination { return destIn(dir, knownHostsKey) }
	eb := controllertest.Get(t, controllertest.NewBackup(t, ns, "to-host", kd.Name, "* * * * *", 1, dest("known_hosts")))
	clock := clocktesting.NewFakePassiveClock(eb.CreationTimestamp.Time)
	recorder := events.NewFakeRecorder(100)
	stateDir := testenv.StateDir(t)
	r := &Reconciler{Client: controllertest.K8s, APIReader: controllertest.K8s, Recorder: recorder, Clock: clock, Options: pipeline.Options{StateDir: stateDir, ArtifactsDir: controllertest.BackupBundle(t, true)}}
	reconcile := func(eb *kaov1.EtcdBackup) *kaov1.EtcdBackup {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(eb)}); err != nil {
			t.Fatal(err)
		}
		return controllertest.Get(t, eb)
	}
	onHost := func(script string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := dc.Run(rctx, host.Name, script)
		if err != nil {
			t.Fatalf("%s on the backup host: %v", script, err)
		}
		return strings.TrimSpace(out)
	}

	first := eb.CreationTimestamp.Truncate(time.Minute).Add(time.Minute)
	var names []string
	for i := range 2 {
		clock.SetTime(first.Add(time.Duration(i)*time.Minute + time.Second))
		got := reconcile(eb)
		if c := backupCondition(got, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionTrue {
			t.Fatalf("snapshot %d to the backup host: %+v", i, c)
		}
		snap := got.Status.LastSnapshot
		names = append(names, snap.Name)
		if want := host.Address + ":" + dir + "/" + snap.Name; snap.Location != want {
			t.Errorf("location %q, want %q", snap.Location, want)
		}
		remote := onHost("sha256sum " + dir + "/" + snap.Name + " && stat -c %a " + dir + "/" + snap.Name + " " + dir)
		if fields := strings.Fields(remote); len(fields) != 4 || fields[0] != snap.SHA256 || fields[2] != "600" || fields[3] != "700" {
			t.Errorf("on the backup host: %q; want sha256 %s, file mode 600, directory mode 700", remote, snap.SHA256)
		}
	}
	if ls := onHost("ls -A " + dir); ls != names[1] {
		t.Errorf("the backup host holds %q; retention 1 keeps only %s", ls, names[1])
	}
	_ = filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("%s stayed on the operator's side: snapshots and SSH keys must not", path)
		}
		return nil
	})

	wrong := reconcile(controllertest.NewBackup(t, ns, "wrong-host-key", kd.Name, "", 0, dest("wrong_known_hosts")))
	c := backupCondition(wrong, kaov1.BackupSucceededCondition)
	t.Logf("with a wrong known_hosts: %s", c.Message)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "backup-host") ||
		!strings.Contains(c.Message, "wrong_known_hosts") || !strings.Contains(c.Message, "host key verification failed") {
		t.Errorf("a host key that does not match known_hosts must be refused, naming the Secret: %+v", c)
	}
	if ls := onHost("ls -A " + dir); ls != names[1] {
		t.Errorf("the refused backup wrote to the host: %q", ls)
	}

	keyLine := strings.Split(string(privateKey), "\n")[1]
	raw, _ := json.Marshal([]any{controllertest.Get(t, eb).Status, wrong.Status})
	for what, text := range map[string]string{"status": string(raw), "Events": strings.Join(drainEvents(recorder), "\n"), "logs": controllertest.OperatorLog.String()} {
		if strings.Contains(text, keyLine) {
			t.Errorf("the SSH private key leaked into %s", what)
		}
	}
}
