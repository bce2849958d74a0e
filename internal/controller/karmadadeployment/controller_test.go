package karmadadeployment

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/testenv"
)

func condition(kd *kaov1.KarmadaDeployment, t string) *metav1.Condition {
	return meta.FindStatusCondition(kd.Status.Conditions, t)
}

func lastRunIs(result kaov1.RunResult) func(*kaov1.KarmadaDeployment) bool {
	return func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.LastRun != nil && kd.Status.LastRun.Result == result && kd.Status.Progress == nil
	}
}

// readRunLog decompresses the log ConfigMap of the last run.
func readRunLog(t *testing.T, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: kd.Namespace, Name: kd.Status.LastRun.LogConfigMapName}
	if err := controllertest.K8s.Get(context.Background(), key, cm); err != nil {
		t.Fatalf("reading the run log ConfigMap named in status.lastRun: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[kaov1.LogKey]))
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestRunProgressAndResultAreWrittenToStatus(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "progress", false, "slow-a", "ok-b")

	// Live progress: a run in progress with a known total and a moving count.
	running := controllertest.WaitFor(t, kd, 30*time.Second, "progress with some tasks done", func(kd *kaov1.KarmadaDeployment) bool {
		p := kd.Status.Progress
		return p != nil && p.TasksDone > 0 && p.TasksDone < p.TasksTotal
	})
	p := running.Status.Progress
	if p.Playbook != pipeline.InstallPlaybook || p.TasksTotal != 19 || p.Percent <= 0 || p.Percent >= 100 || p.CurrentTask == "" || p.CurrentHost == "" {
		t.Errorf("progress is incomplete: %+v", p)
	}
	if running.Status.Phase != kaov1.InstallingPhase {
		t.Errorf("phase %q during a run, want Installing", running.Status.Phase)
	}
	if c := condition(running, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.RunningReason {
		t.Errorf("PlaybookSucceeded during a run: %+v", c)
	}

	done := controllertest.WaitFor(t, kd, runWait, "a successful run", lastRunIs(kaov1.RunSucceeded))
	last := done.Status.LastRun
	if last.Playbook != pipeline.InstallPlaybook || last.Generation != done.Generation || last.EndTime.Before(&last.StartTime) {
		t.Errorf("lastRun is wrong: %+v", last)
	}
	hosts := map[string]kaov1.HostRunStats{}
	for _, h := range last.Hosts {
		hosts[h.Name] = h
	}
	for _, h := range []string{"host_cluster", "member_slow-a", "member_ok-b"} {
		if hosts[h].OK == 0 || hosts[h].Changed == 0 || hosts[h].Failed != 0 {
			t.Errorf("host %s stats are wrong: %+v", h, hosts[h])
		}
	}
	if c := condition(done, kaov1.PlaybookSucceededCondition); c == nil || c.Status != metav1.ConditionTrue || c.Reason != kaov1.RunSucceededReason {
		t.Errorf("PlaybookSucceeded after success: %+v", c)
	}
	for _, ct := range deploymentConditions {
		if condition(done, ct) == nil {
			t.Errorf("condition %s is missing: every condition is set from the first visit", ct)
		}
	}
	if done.Status.ObservedGeneration != done.Generation {
		t.Errorf("observedGeneration %d, want %d after a successful run", done.Status.ObservedGeneration, done.Generation)
	}
	if log := readRunLog(t, done); !strings.Contains(log, "Test | Work slowly for slow members") || !strings.Contains(log, "member_slow-a") {
		t.Errorf("the run log lacks tasks and hosts:\n%s", log)
	}
	waitForEvent(t, kd, "PlaybookStarted")
	waitForEvent(t, kd, "PlaybookSucceeded")
	waitForEvent(t, kd, "CertificatesIssued")

	// Certificates are issued before the run, kept in a Secret the deployment
	// owns, and their expiry is in status.
	certified := controllertest.WaitFor(t, kd, 20*time.Second, "CertificatesValid", func(kd *kaov1.KarmadaDeployment) bool {
		c := condition(kd, kaov1.CertificatesValidCondition)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if n := len(certified.Status.Certificates); n < 10 {
		t.Errorf("status.certificates lists %d certificates", n)
	}
	for _, c := range certified.Status.Certificates {
		if left := time.Until(c.NotAfter.Time); left < 300*24*time.Hour {
			t.Errorf("certificate %s expires in %s, want about a year (a CA ten)", c.Name, left)
		}
	}
	secret := &corev1.Secret{}
	if err := controllertest.K8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "progress-pki"}, secret); err != nil {
		t.Fatalf("the PKI Secret: %v", err)
	}
	if refs := secret.OwnerReferences; len(refs) != 1 || refs[0].UID != certified.UID {
		t.Errorf("the PKI Secret must be owned by its deployment: %+v", refs)
	}
	if len(secret.Data["ca.key"]) == 0 || len(secret.Data["sa.key"]) == 0 {
		t.Error("the PKI Secret lacks the CA or service account key")
	}
}

func TestFailedRunIsReportedAndBacksOff(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "failing", false, "fail-a", "ok-b")

	failed := controllertest.WaitFor(t, kd, runWait, "a failed run", lastRunIs(kaov1.RunFailed))
	last := failed.Status.LastRun
	if len(last.FailedTasks) != 1 {
		t.Fatalf("want one failed task, got %+v", last.FailedTasks)
	}
	if f := last.FailedTasks[0]; f.Host != "member_fail-a" || f.Task != "Test | Fail for failing members" || f.Message != "member fail-a is broken" {
		t.Errorf("failed task lacks host, task or message: %+v", f)
	}
	c := condition(failed, kaov1.PlaybookSucceededCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kaov1.RunFailedReason || !strings.Contains(c.Message, "member_fail-a") {
		t.Errorf("PlaybookSucceeded after a failure: %+v", c)
	}
	retry := failed.Status.Retry
	if retry == nil || retry.Failures != 1 || retry.NextRetryTime == nil ||
		retry.NextRetryTime.Sub(retry.LastFailureTime.Time) != retryBase {
		t.Fatalf("retry status after the first failure: %+v", retry)
	}
	if failed.Status.Phase != kaov1.FailedPhase {
		t.Errorf("phase %q, want Failed", failed.Status.Phase)
	}
	waitForEvent(t, kd, "PlaybookFailed")

	// Within the backoff nothing runs again.
	time.Sleep(3 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.LastRun.ID != last.ID || cur.Status.Progress != nil {
		t.Fatalf("a run started during the backoff: %+v", cur.Status)
	}

	// A new generation runs at once, whatever the backoff says.
	update(t, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Members = cur.Spec.Members[1:] })
	fixed := controllertest.WaitFor(t, kd, 30*time.Second, "a successful run of the new generation", func(kd *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.Generation == kd.Generation
	})
	if fixed.Status.Retry != nil {
		t.Errorf("retry status must be cleared after a success: %+v", fixed.Status.Retry)
	}
}

func TestSpecChangeDuringARunIsNotLost(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "queued", false, "slow-a")
	controllertest.WaitFor(t, kd, 30*time.Second, "a run in progress", func(kd *kaov1.KarmadaDeployment) bool { return kd.Status.Progress != nil })

	update(t, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Members[0].Region = "eu-west" })
	firstID := ""
	done := controllertest.WaitFor(t, kd, runWait, "a run of the changed spec", func(kd *kaov1.KarmadaDeployment) bool {
		if kd.Status.LastRun != nil && firstID == "" {
			firstID = kd.Status.LastRun.ID
		}
		return lastRunIs(kaov1.RunSucceeded)(kd) && kd.Status.LastRun.Generation == kd.Generation
	})
	if done.Status.LastRun.ID == firstID || done.Generation != 2 {
		t.Errorf("the changed spec must get its own run: first %s, last %+v", firstID, done.Status.LastRun)
	}
	if done.Status.ObservedGeneration != 2 {
		t.Errorf("observedGeneration %d, want 2", done.Status.ObservedGeneration)
	}
	// Only a member changed since the install succeeded: the members playbook ran.
	if done.Status.LastRun.Playbook != pipeline.MembersPlaybook {
		t.Errorf("a change of spec.members alone ran %s, want %s", done.Status.LastRun.Playbook, pipeline.MembersPlaybook)
	}
}

func TestPausedDeploymentDoesNotRun(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "paused", true, "ok-a")
	cur := controllertest.WaitFor(t, kd, 20*time.Second, "the Paused condition", func(kd *kaov1.KarmadaDeployment) bool {
		c := condition(kd, kaov1.PausedCondition)
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if cur.Status.Phase != kaov1.PausedPhase {
		t.Errorf("phase %q, want Paused", cur.Status.Phase)
	}
	time.Sleep(2 * time.Second)
	if cur = controllertest.Get(t, kd); cur.Status.LastRun != nil || cur.Status.Progress != nil {
		t.Fatalf("a paused deployment ran: %+v", cur.Status)
	}
	update(t, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Paused = false })
	controllertest.WaitFor(t, kd, 30*time.Second, "a run after unpausing", lastRunIs(kaov1.RunSucceeded))
}

func TestRunInterruptedByACrashIsRunAgain(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	// A previous operator process started a run and died: status says a run is
	// in progress, but no process runs it.
	kd := newDeployment(t, ns, "crashed", true, "ok-a")
	cur := controllertest.Get(t, kd)
	cur.Status.Progress = &kaov1.RunProgress{
		RunID: "20260101-000000-dead", Playbook: pipeline.InstallPlaybook, TasksDone: 3, TasksTotal: 9, Percent: 33,
		StartTime: metav1.NewTime(time.Now().Add(-time.Minute)),
	}
	if err := controllertest.K8s.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	update(t, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Paused = false })
	startOperator(t, ns, "")
	e := waitForEvent(t, kd, "PlaybookInterrupted")
	if !strings.Contains(e.Note, "20260101-000000-dead") {
		t.Errorf("the Event does not name the interrupted run: %q", e.Note)
	}
	done := controllertest.WaitFor(t, kd, runWait, "a new successful run", lastRunIs(kaov1.RunSucceeded))
	if done.Status.LastRun.ID == "20260101-000000-dead" {
		t.Fatal("the interrupted run was recorded as succeeded")
	}
}

func TestOperatorRestartDuringARunNeverLeavesItRunning(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	op := startOperator(t, ns, "")
	kd := newDeployment(t, ns, "restart", false, "slow-a")
	first := controllertest.WaitFor(t, kd, 30*time.Second, "a run in progress", func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.Progress != nil && kd.Status.Progress.TasksDone > 0
	})
	op.stop() // cancels the run: the manager shuts down
	stopped := controllertest.Get(t, kd)
	if stopped.Status.Progress != nil {
		t.Fatalf("after shutdown the run is still shown as running: %+v", stopped.Status.Progress)
	}
	if stopped.Status.LastRun == nil || stopped.Status.LastRun.ID != first.Status.Progress.RunID || stopped.Status.LastRun.Result != kaov1.RunCancelled {
		t.Fatalf("the cancelled run is not recorded: %+v", stopped.Status.LastRun)
	}
	startOperator(t, ns, op.stateDir)
	controllertest.WaitFor(t, kd, runWait, "a successful run after the restart", lastRunIs(kaov1.RunSucceeded))
}

func TestMissingSecretIsACondition(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "nosecret", true, "ok-a")
	update(t, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Spec.Members[0].KubeconfigSecretRef.Key = "absent"
		cur.Spec.Paused = false
	})
	want := `has no key "absent" named in spec.members[0].kubeconfigSecretRef`
	got := controllertest.WaitFor(t, kd, 20*time.Second, "PrerequisitesMissing", func(kd *kaov1.KarmadaDeployment) bool {
		c := condition(kd, kaov1.PlaybookSucceededCondition)
		return c != nil && c.Reason == kaov1.PrerequisitesMissingReason
	})
	if c := condition(got, kaov1.PlaybookSucceededCondition); !strings.Contains(c.Message, want) {
		t.Errorf("condition message %q lacks %q", c.Message, want)
	}
	if got.Status.Retry == nil || got.Status.Retry.Failures < 1 {
		t.Errorf("the failed attempt must back off: %+v", got.Status.Retry)
	}
	if e := waitForEvent(t, kd, kaov1.PrerequisitesMissingReason); !strings.Contains(e.Note, want) {
		t.Errorf("Event note %q lacks %q", e.Note, want)
	}
	if got.Status.LastRun != nil {
		t.Errorf("no run may start without its inputs: %+v", got.Status.LastRun)
	}
}

func TestDeletionRunsUninstallThenReleasesTheObject(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "deleted", false, "ok-a")
	controllertest.WaitFor(t, kd, runWait, "a successful install", lastRunIs(kaov1.RunSucceeded))
	if err := controllertest.K8s.Delete(context.Background(), kd); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := controllertest.K8s.Get(context.Background(), client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment was not released after its uninstall: %v %+v", err, controllertest.Get(t, kd).Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	found := false
	for _, e := range controllertest.DeploymentEvents(t, kd) {
		found = found || e.Reason == "PlaybookSucceeded" && strings.Contains(e.Note, pipeline.UninstallPlaybook)
	}
	if !found {
		t.Error("no Event records the uninstall run")
	}
}

func TestNoSecretLeaksIntoStatusEventsLogsOrRunDirectories(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	op := startOperator(t, ns, "")
	kd := newDeployment(t, ns, "leaky", false, "leak-a")
	failed := controllertest.WaitFor(t, kd, runWait, "the leaking run to fail", lastRunIs(kaov1.RunFailed))
	secret := "leak-a-TOKEN-e5b1c0ffee4242deadbeef"
	if !strings.Contains(failed.Status.LastRun.FailedTasks[0].Message, "[redacted]") {
		t.Errorf("the failure message was not redacted: %q", failed.Status.LastRun.FailedTasks[0].Message)
	}
	waitForEvent(t, kd, "PlaybookFailed")
	status, _ := json.Marshal(failed.Status)
	evs, _ := json.Marshal(controllertest.DeploymentEvents(t, kd))
	places := map[string]string{
		"status":       string(status),
		"Events":       string(evs),
		"run log":      readRunLog(t, failed),
		"operator log": controllertest.OperatorLog.String(),
	}
	_ = filepath.Walk(op.stateDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			places[path] = string(data)
		}
		return nil
	})
	for where, text := range places {
		if strings.Contains(text, secret) {
			t.Errorf("the member's token leaked into %s", where)
		}
	}
}

// TestRecreatedDeploymentIsANewObject deletes an installed deployment and
// creates it again under the same name at once, twice: each new object
// installs, is deleted and is released like the first. Nothing the operator
// remembered of the old object (its last run, its run directories and fact
// cache, its certificates) is taken for the new one's.
func TestRecreatedDeploymentIsANewObject(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	op := startOperator(t, ns, "")
	ctx := context.Background()
	var oldCA []byte
	var spec *kaov1.KarmadaDeploymentSpec
	for round := range 3 {
		var kd *kaov1.KarmadaDeployment
		if round == 0 {
			kd = newDeployment(t, ns, "again", false, "ok-a")
		} else {
			kd = &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "again", Namespace: ns}, Spec: *spec.DeepCopy()}
			if err := controllertest.K8s.Create(ctx, kd); err != nil {
				t.Fatal(err)
			}
		}
		installed := controllertest.WaitFor(t, kd, runWait, fmt.Sprintf("round %d: a successful install", round), lastRunIs(kaov1.RunSucceeded))
		if installed.Status.LastRun.Playbook != pipeline.InstallPlaybook {
			t.Fatalf("round %d: the first run of the new object ran %s", round, installed.Status.LastRun.Playbook)
		}
		pkiSecret := &corev1.Secret{}
		if err := controllertest.K8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "again-pki"}, pkiSecret); err != nil {
			t.Fatal(err)
		}
		if uid := pkiSecret.Labels[kaov1.DeploymentUIDLabel]; uid != string(installed.UID) {
			t.Errorf("round %d: the PKI Secret is labelled %s, not the new object's UID %s", round, uid, installed.UID)
		}
		if refs := pkiSecret.OwnerReferences; len(refs) != 1 || refs[0].UID != installed.UID {
			t.Errorf("round %d: the PKI Secret's owners are %+v, want the new object alone", round, refs)
		}
		if bytes.Equal(pkiSecret.Data["ca.crt"], oldCA) {
			t.Errorf("round %d: the new object took over the deleted one's CA", round)
		}
		oldCA = pkiSecret.Data["ca.crt"]
		spec = installed.Spec.DeepCopy()
		if err := controllertest.K8s.Delete(ctx, installed); err != nil {
			t.Fatal(err)
		}
		testenv.WaitReleased(t, controllertest.K8s, installed, 60*time.Second)
		for _, dir := range []string{pipeline.RunsDir(op.stateDir, installed.UID), pipeline.FactsDir(op.stateDir, installed.UID)} {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("round %d: %s is left after the deployment was released (%v)", round, dir, err)
			}
		}
	}
}

// TestStateSweepCleansWhatCrashesAndDeletionsLeft: a new leader removes,
// before any run, every run's secret files and compiled templates (a run
// removes its own when it ends: any left belong to a process that crashed) and the run directories
// and fact caches of deployments that no longer exist; a live deployment's
// runs and facts, and every backup, stay.
func TestStateSweepCleansWhatCrashesAndDeletionsLeft(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	live := newDeployment(t, ns, "live", true)
	stateDir := t.TempDir()
	gone := "5f0c1e2a-0000-4000-8000-00000000dead"
	files := map[string]bool{ // path → kept
		filepath.Join(pipeline.RunsDir(stateDir, live.UID), "run-1", "ansible.log"):                true,
		filepath.Join(pipeline.RunsDir(stateDir, live.UID), "run-1", "secrets", "ssh_key"):         false,
		filepath.Join(pipeline.RunsDir(stateDir, live.UID), "run-1", "jinja-cache", "0a1b"):        false,
		filepath.Join(pipeline.FactsDir(stateDir, live.UID), "node-1"):                             true,
		filepath.Join(stateDir, "runs", gone, "run-1", "ansible.log"):                              false,
		filepath.Join(stateDir, "facts", gone, "node-1"):                                           false,
		filepath.Join(stateDir, "runs", "5f0c1e2a", "run-0", "ansible.log"):                        false, // a short name of an older kao
		filepath.Join(stateDir, "backups", ns, "live", "nightly-20260101T000000Z.db"):              true,
		filepath.Join(stateDir, "backups", ns, "gone", "nightly-20260101T000000Z.db"):              true,
		filepath.Join(stateDir, pipeline.RestoresDir, "00000000-0000-4000-8000-0000000000ff", "x"): false,
	}
	for p := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := pipeline.NewSweep(stateDir, controllertest.K8s)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done:
	default:
		t.Fatal("the sweep did not say it is done: the run trackers would wait for ever")
	}
	for p, kept := range files {
		_, err := os.Stat(p)
		if exists := err == nil; exists != kept {
			t.Errorf("%s: exists %v after the sweep, want %v", p, exists, kept)
		}
	}
}
