package etcdbackup

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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
	"github.com/kao-io/kao/internal/jobexec"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// podTasks is a RemoteExecutor whose tasks are Jobs that have not started
// until the test says so; then each does what a snapshot Job's pod does
// (kao-manager snapshot: TakeRequestedSnapshot, its result as termination
// message), in this process. The Jobs themselves, their pods and their
// termination messages are test/incluster's, on a real node.
type podTasks struct {
	pipeline.RemoteExecutor // playbook runs: never called here

	mu      sync.Mutex
	started []jobexec.Task
	states  map[string]jobexec.TaskState
	removed []string
}

func (p *podTasks) StartTask(_ context.Context, t jobexec.Task) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = append(p.started, t)
	p.states[t.ID] = jobexec.TaskState{}
	return nil
}

func (p *podTasks) TaskState(_ context.Context, _ runner.Owner, id string) (jobexec.TaskState, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.states[id]
	return st, ok, nil
}

func (p *podTasks) RemoveTask(_ context.Context, _ runner.Owner, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.states, id)
	p.removed = append(p.removed, id)
	return nil
}

// statusDown is a client whose status writes fail.
type statusDown struct{ client.Client }

func (c statusDown) Status() client.SubResourceWriter { return failingStatus{c.Client.Status()} }

type failingStatus struct{ client.SubResourceWriter }

func (failingStatus) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errors.New("the API server is not answering")
}

// runPods runs every task that has not run yet, as its pod would.
func (p *podTasks) runPods(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, task := range p.started {
		if st, ok := p.states[task.ID]; !ok || st.Done {
			continue
		}
		if task.Command != SnapshotCommand {
			t.Fatalf("task %s runs %q, want %q", task.ID, task.Command, SnapshotCommand)
		}
		out := TakeRequestedSnapshot(context.Background(), task.Request, t.TempDir())
		result, err := json.Marshal(out)
		if err != nil || len(result) > jobexec.TerminationMessageLimit {
			t.Fatalf("the result of task %s: %v, %d bytes", task.ID, err, len(result))
		}
		st := jobexec.TaskState{Done: true, Succeeded: out.Snapshot != nil, Result: string(result)}
		if !st.Succeeded {
			st.Problem = "the task's pod ended: Error, exit code 1"
		}
		p.states[task.ID] = st
	}
}

// TestSnapshotsInJobs: with a Job executor, a snapshot for a backup host is
// taken by a task, which outlives the operator process that started it; it
// is recorded as one taken in the operator's process (the snapshot on the
// real backup host with the recorded sha256), the Job is then deleted, a
// refused host key names the backup's Secret, a Job deleted before it ended
// is a failure that says so, and a Local snapshot stays in the operator's
// process.
func TestSnapshotsInJobs(t *testing.T) {
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	dc := hosts.Start(t, 1)
	host := dc.Hosts()[0]
	cluster := controllertest.StartEtcdCluster(t, 1)
	cluster.PutKeys(t, "/registry/jobs/", 20)
	artifacts := controllertest.BackupBundle(t, true)
	// The deployment's bundle is the operator's, which a Job's pod has too.
	kd := binaryDeployment(t, ns, "kd-job", cluster, artifacts, true)

	privateKey, destIn := backupHostSecret(t, ns, dc)
	const dir = "/var/backups/kao-jobs"
	dest := func(knownHostsKey string) *kaov1.BackupDestination { return destIn(dir, knownHostsKey) }
	tasks := &podTasks{states: map[string]jobexec.TaskState{}}
	recorder := events.NewFakeRecorder(100)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	operator := func() *Reconciler {
		return &Reconciler{Client: controllertest.K8s, APIReader: controllertest.K8s, Recorder: recorder, Clock: clock,
			Options: pipeline.Options{StateDir: testenv.StateDir(t), ArtifactsDir: artifacts, Remote: tasks}}
	}
	reconcile := func(r *Reconciler, eb *kaov1.EtcdBackup) (*kaov1.EtcdBackup, ctrl.Result) {
		t.Helper()
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(eb)})
		if err != nil {
			t.Fatal(err)
		}
		return controllertest.Get(t, eb), res
	}

	// The Job starts; the operator comes back to look at it.
	eb := controllertest.NewBackup(t, ns, "in-job", kd.Name, "", 0, dest("known_hosts"))
	got, res := reconcile(operator(), eb)
	job := got.Status.SnapshotJob
	if job == nil || len(tasks.started) != 1 || res.RequeueAfter != snapshotJobPollInterval {
		t.Fatalf("no snapshot Job started: status %+v, tasks %d, %+v", got.Status, len(tasks.started), res)
	}
	task := tasks.started[0]
	if task.Owner.UID != string(got.UID) || task.Owner.Kind != "EtcdBackup" || job.Name != jobexec.JobName(task.ID) || task.Timeout != pipeline.SnapshotTimeout {
		t.Errorf("task %+v for status.snapshotJob %+v", task, job)
	}
	if c := backupCondition(got, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionUnknown {
		t.Errorf("BackupSucceeded while the Job runs: %+v", c)
	}

	// Another operator process finds the Job in status and waits for it.
	got, res = reconcile(operator(), got)
	if got.Status.SnapshotJob == nil || res.RequeueAfter != snapshotJobPollInterval || len(tasks.started) != 1 {
		t.Fatalf("a new operator process did not wait for the running Job: %+v, %d tasks", got.Status, len(tasks.started))
	}

	tasks.runPods(t)
	// The status that records the Job's end cannot be written: the Job
	// stays, and the next reconcile records it.
	failing := operator()
	failing.Client = statusDown{controllertest.K8s}
	if _, err := failing.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(got)}); err == nil {
		t.Fatal("a reconcile whose status write failed returned no error")
	}
	if cur := controllertest.Get(t, got); cur.Status.SnapshotJob == nil || len(tasks.removed) != 0 {
		t.Fatalf("a result that was not recorded lost its Job: status %+v, removed %v", cur.Status.SnapshotJob, tasks.removed)
	}
	got, _ = reconcile(operator(), got)
	snap := got.Status.LastSnapshot
	if c := backupCondition(got, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionTrue || snap == nil || got.Status.SnapshotJob != nil {
		t.Fatalf("the Job's snapshot was not recorded: %+v", got.Status)
	}
	if snap.Name != job.Snapshot || snap.Location != host.Address+":"+dir+"/"+snap.Name || snap.Keys < 20 {
		t.Errorf("recorded snapshot %+v, want %s on the backup host with the 20 keys put", snap, job.Snapshot)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := dc.Run(rctx, host.Name, "sha256sum "+dir+"/"+snap.Name)
	if err != nil || strings.Fields(out)[0] != snap.SHA256 {
		t.Errorf("on the backup host: %q, %v; want sha256 %s", out, err, snap.SHA256)
	}
	if len(tasks.removed) != 1 || tasks.removed[0] != task.ID {
		t.Errorf("the ended Job was not deleted: %v", tasks.removed)
	}

	// A refused host key, in the Job's pod, names the Secret to fix.
	wrong, _ := reconcile(operator(), controllertest.NewBackup(t, ns, "wrong-key", kd.Name, "", 0, dest("wrong_known_hosts")))
	tasks.runPods(t)
	wrong, _ = reconcile(operator(), wrong)
	c := backupCondition(wrong, kaov1.BackupSucceededCondition)
	if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "wrong_known_hosts") || !strings.Contains(c.Message, "host key verification failed") {
		t.Errorf("a refused host key in the Job: %+v", c)
	}
	if wrong.Status.NextScheduleTime == nil || wrong.Status.SnapshotJob != nil {
		t.Errorf("a failed one-shot snapshot in a Job is retried later: %+v", wrong.Status)
	}

	// A Job deleted by hand before it ended.
	gone, _ := reconcile(operator(), controllertest.NewBackup(t, ns, "job-gone", kd.Name, "", 0, dest("known_hosts")))
	if err := tasks.RemoveTask(ctx, runner.Owner{}, gone.Status.SnapshotJob.ID); err != nil {
		t.Fatal(err)
	}
	gone, _ = reconcile(operator(), gone)
	if c := backupCondition(gone, kaov1.BackupSucceededCondition); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "is gone before kao saw it end") {
		t.Errorf("a Job that vanished: %+v", c)
	}

	// A Local snapshot is taken in the operator's process.
	before := len(tasks.started)
	local, _ := reconcile(operator(), controllertest.NewBackup(t, ns, "local", kd.Name, "", 0, nil))
	if len(tasks.started) != before || local.Status.LastSnapshot == nil || !strings.HasPrefix(local.Status.LastSnapshot.Location, "/") {
		t.Errorf("a Local snapshot went to a Job, or was not taken: %d tasks, %+v", len(tasks.started)-before, local.Status)
	}

	evs := strings.Join(drainEvents(recorder), "\n")
	if !strings.Contains(evs, snapshotJobStartedEvent) {
		t.Errorf("no %s Event:\n%s", snapshotJobStartedEvent, evs)
	}
	keyLine := strings.Split(string(privateKey), "\n")[1]
	raw, _ := json.Marshal([]any{got.Status, wrong.Status, gone.Status})
	for what, text := range map[string]string{"status": string(raw), "Events": evs, "logs": controllertest.OperatorLog.String()} {
		if strings.Contains(text, keyLine) || strings.Contains(text, string(cluster.Bundle["etcd-healthcheck-client.key"])) {
			t.Errorf("key material leaked into %s", what)
		}
	}
}
