package etcdbackup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/jobexec"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
)

// With the Job executor (--executor=job), a snapshot stored on a backup
// host is taken by a Job in the backup's namespace, as the deployment's
// runs are: the Job's pod (`kao-manager snapshot`) streams it from a
// healthy member, checks it with the image's etcdutl, copies it to the
// backup host with the host key pinned, and writes what it stored as its
// termination message. The operator records that when it sees the Job end,
// whichever operator process that is: status.snapshotJob names the Job
// meanwhile. A snapshot kept on the operator's state volume (Local) is
// taken in the operator's process, which alone has that volume; so is one
// of an etcd the operator reaches through a port-forward of its own (a
// Containerized etcd on a remote host cluster), and one of a deployment
// whose runs stay in the operator's process (pipeline.Options.InProcessReason).

// SnapshotCommand is the kao-manager command a snapshot Job's pod runs.
const SnapshotCommand = "snapshot"

// SnapshotRequest is what a snapshot Job's pod is given, in its Job's
// Secret.
type SnapshotRequest struct {
	// Etcd is how the pod reaches the members, with kao's client certificate.
	Etcd pipeline.EtcdClient `json:"etcd"`
	// Target is the backup host, with its key and pinned host key.
	Target etcdsnapshot.SSHTarget `json:"target"`
	// Name is the snapshot's file name.
	Name string `json:"name"`
	// Time is the snapshot's time, as status shows it.
	Time metav1.Time `json:"time"`
	// MaxBytes is the largest snapshot to take (the operator's --max-snapshot-bytes).
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// ArtifactsDir is the operator's bundle in the image, with etcdutl.
	ArtifactsDir string `json:"artifactsDir"`
}

// SnapshotOutcome is what a snapshot Job's pod writes as its termination
// message: the snapshot it stored, or why it stored none. No secret
// material ever reaches it.
type SnapshotOutcome struct {
	// Snapshot is the stored snapshot.
	Snapshot *kaov1.Snapshot `json:"snapshot,omitempty"`
	// Error says why there is none.
	Error string `json:"error,omitempty"`
	// Cause is "host-key" or "auth" when the backup host's key did not
	// match, or it refused the private key: the operator then names the
	// backup's Secret to fix.
	Cause string `json:"cause,omitempty"`
}

// The causes of a failed copy a SnapshotOutcome names.
const (
	causeHostKey = "host-key"
	causeAuth    = "auth"
)

// snapshotInJob tells whether the snapshot of src for eb is taken in a Job.
func (r *Reconciler) snapshotInJob(kd *kaov1.KarmadaDeployment, eb *kaov1.EtcdBackup, src *pipeline.EtcdSource) bool {
	return r.Remote != nil && eb.Spec.Destination.Type == kaov1.SSHDestination && r.InProcessReason(kd) == "" && src.Client() != nil
}

// startSnapshotJob starts the Job of a snapshot due now for decision d and
// notes it in status.snapshotJob. What the operator can check itself (the
// backup host's Secrets, etcdutl in the image's bundle) it checks first.
func (r *Reconciler) startSnapshotJob(ctx context.Context, eb *kaov1.EtcdBackup, kd *kaov1.KarmadaDeployment, src *pipeline.EtcdSource,
	d backupDecision, now time.Time) error {
	if _, err := r.inputs().EtcdutlFor(src.Version); err != nil {
		return err
	}
	t, err := r.inputs().SSHTarget(ctx, eb, "")
	if err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("spec.destination.ssh: %w", err)
	}
	name := snapshotFileName(eb, now)
	req := SnapshotRequest{Etcd: *src.Client(), Target: *t, Name: name, Time: metav1.NewTime(now), MaxBytes: r.MaxSnapshotBytes,
		ArtifactsDir: r.ArtifactsDir}
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the snapshot Job's request: %w", err)
	}
	id := snapshotTaskID(eb, now)
	if err := r.Remote.StartTask(ctx, jobexec.Task{ID: id, Owner: owner(eb), Command: SnapshotCommand, Request: data,
		Timeout: pipeline.SnapshotTimeout}); err != nil {
		return err
	}
	job := &kaov1.SnapshotJob{Name: jobexec.JobName(id), ID: id, Snapshot: name, StartTime: metav1.NewTime(now)}
	if !d.slot.IsZero() {
		job.ScheduleTime = pipeline.TimePtr(d.slot)
	}
	eb.Status.SnapshotJob = job
	r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeNormal, snapshotJobStartedEvent, "Snapshot",
		"Taking snapshot %s in Job %s", name, job.Name)
	ctrl.LoggerFrom(ctx).Info("Started a Job to take an etcd snapshot", "job", job.Name, "snapshot", name)
	return nil
}

// followSnapshotJob looks at the Job of status.snapshotJob: while it runs,
// it comes back later; once it ended, it records the snapshot or the
// failure as a snapshot taken in the operator's process is recorded, and
// schedules the next snapshot. The Job and its Secret are deleted once the
// status that records them is written (Reconcile).
func (r *Reconciler) followSnapshotJob(ctx context.Context, s *backupScope) ctrl.Result {
	eb := s.eb
	j := eb.Status.SnapshotJob
	var res *snapshotResult
	var failure error
	if r.Remote == nil {
		failure = fmt.Errorf("snapshot %s was being taken in Job %s, and the operator now runs without --executor=job: "+
			"it cannot tell what the Job did (delete the Job by hand if it is still there)", j.Snapshot, j.Name)
	} else {
		st, found, err := r.Remote.TaskState(ctx, owner(eb), j.ID)
		switch {
		case err != nil:
			ctrl.LoggerFrom(ctx).Info("Looking at a snapshot Job failed; looking again later", "job", j.Name, "error", err.Error())
			return ctrl.Result{RequeueAfter: snapshotJobPollInterval}
		case found && !st.Done:
			return ctrl.Result{RequeueAfter: snapshotJobPollInterval}
		case !found:
			failure = fmt.Errorf("the Job %s of snapshot %s is gone before kao saw it end", j.Name, j.Snapshot)
		default:
			res, failure = outcomeOf(eb, j, st)
			s.endedJob = j.ID // deleted once status holds the result
		}
	}
	eb.Status.SnapshotJob = nil

	kd := &kaov1.KarmadaDeployment{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.DeploymentName}, kd); err != nil {
		kd = nil
	}
	sched, err := parseSchedule(eb.Spec.Schedule)
	d := backupDecision{}
	if err != nil || j.ScheduleTime == nil {
		sched = nil // recorded as a one-shot snapshot; the spec is looked at again next
	} else if sched != nil {
		d.slot, d.next = j.ScheduleTime.Time, sched.Next(j.StartTime.UTC())
	}
	return r.finishAttempt(ctx, s, kd, sched, d, j.StartTime.Time, res, failure)
}

// outcomeOf reads the result a snapshot Job's pod wrote.
func outcomeOf(eb *kaov1.EtcdBackup, j *kaov1.SnapshotJob, st jobexec.TaskState) (*snapshotResult, error) {
	out := SnapshotOutcome{}
	if st.Result != "" {
		if err := json.Unmarshal([]byte(st.Result), &out); err != nil {
			return nil, fmt.Errorf("the snapshot Job %s ended with a result kao cannot read: %w", j.Name, err)
		}
	}
	switch {
	case st.Succeeded && out.Snapshot != nil:
		if out.Snapshot.Name != j.Snapshot {
			return nil, fmt.Errorf("the snapshot Job %s reports snapshot %s, not the %s it was asked for", j.Name, out.Snapshot.Name, j.Snapshot)
		}
		return &snapshotResult{snapshot: *out.Snapshot, keys: int(out.Snapshot.Keys)}, nil
	case out.Error != "":
		err := errors.New(out.Error)
		switch out.Cause {
		case causeHostKey:
			err = fmt.Errorf("%s: %w", out.Error, etcdsnapshot.ErrHostKey)
		case causeAuth:
			err = fmt.Errorf("%s: %w", out.Error, etcdsnapshot.ErrAuth)
		}
		return nil, pipeline.DescribeSSHError(eb, err)
	case st.Problem != "":
		return nil, errors.New(st.Problem)
	}
	return nil, fmt.Errorf("the snapshot Job %s ended without saying what it stored", j.Name)
}

// TakeRequestedSnapshot is what a snapshot Job's pod does: it takes the
// snapshot a request describes into tmp, checks it and copies it to the
// backup host.
func TakeRequestedSnapshot(ctx context.Context, data []byte, tmp string) SnapshotOutcome {
	req := SnapshotRequest{}
	if err := json.Unmarshal(data, &req); err != nil {
		return SnapshotOutcome{Error: "decoding the snapshot's request: " + err.Error()}
	}
	redact := runner.NewRedactor(req.Etcd.Key, req.Target.PrivateKey)
	fail := func(err error) SnapshotOutcome {
		out := SnapshotOutcome{Error: redact.Clean(err.Error(), 1000)}
		switch {
		case errors.Is(err, etcdsnapshot.ErrHostKey):
			out.Cause = causeHostKey
		case errors.Is(err, etcdsnapshot.ErrAuth):
			out.Cause = causeAuth
		}
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, pipeline.SnapshotTimeout)
	defer cancel()
	if !etcdsnapshot.FileName.MatchString(req.Name) {
		return fail(fmt.Errorf("%q is not a snapshot file name", req.Name))
	}
	src, err := req.Etcd.Source()
	if err != nil {
		return fail(fmt.Errorf("kao's etcd client certificate in the request is unusable: %w", err))
	}
	etcdutl, err := (&pipeline.Gatherer{Options: pipeline.Options{ArtifactsDir: req.ArtifactsDir}}).EtcdutlFor(req.Etcd.Version)
	if err != nil {
		return fail(err)
	}
	target := &req.Target
	target.TempDir = tmp
	if err := target.Validate(); err != nil {
		return fail(err)
	}
	res, err := streamAndCheck(ctx, probe.Etcd{}, src, etcdutl, filepath.Join(tmp, req.Name+".partial"), req.Name,
		etcdsnapshot.Limits{MaxBytes: req.MaxBytes}, req.Time.Time)
	if err != nil {
		return fail(err)
	}
	if err := target.Upload(ctx, filepath.Join(tmp, req.Name+".partial"), req.Name, res.snapshot.SHA256); err != nil {
		return fail(err)
	}
	res.snapshot.Location = target.Location(req.Name)
	return SnapshotOutcome{Snapshot: &res.snapshot}
}

// snapshotTaskID names a backup's snapshot Job: the backup's UID and the
// time, so that every attempt has a Job of its own.
func snapshotTaskID(eb *kaov1.EtcdBackup, now time.Time) string {
	uid := strings.ReplaceAll(string(eb.UID), "-", "")
	if len(uid) > 12 {
		uid = uid[:12]
	}
	return "snap-" + uid + "-" + now.UTC().Format("20060102t150405")
}

// relatedOf is the deployment as an Event's related object: none when it
// could not be read.
func relatedOf(kd *kaov1.KarmadaDeployment) runtime.Object {
	if kd == nil {
		return nil
	}
	return kd
}

// owner is the backup as its Jobs' labels name it.
func owner(eb *kaov1.EtcdBackup) runner.Owner {
	return runner.Owner{APIVersion: kaov1.GroupVersion.String(), Kind: "EtcdBackup", Namespace: eb.Namespace, Name: eb.Name, UID: string(eb.UID)}
}
