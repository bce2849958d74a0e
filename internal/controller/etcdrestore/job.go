package etcdrestore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/runner"
)

// With the Job executor (--executor=job), a restore's run goes to a Job as
// the deployment's runs do, when the deployment's runs may leave the
// operator's process (pipeline.Options.InProcessReason) and the snapshot is
// on a backup host: the Job's pod fetches it there itself, checks its
// sha256 and only then starts ansible-playbook. The operator has fetched and
// checked it already, before it stopped the API servers. A snapshot on the
// operator's state volume is restored from the operator's process: no Job's
// pod can read that volume.
//
// Such a run outlives the operator as the deployment's runs do: the
// operator that stops leaves the Job running and the restore Running; the
// next one follows the Job from its start and records the run.

// inJob tells whether the restore of snap into kd runs in a Job.
func (r *Reconciler) inJob(kd *kaov1.KarmadaDeployment, snap *kaov1.Snapshot) bool {
	return r.Remote != nil && r.InProcessReason(kd) == "" && !strings.HasPrefix(snap.Location, "/")
}

// runnerFor is where a restore's run takes place.
func (r *Reconciler) runnerFor(spec runner.Spec) pipeline.PlaybookRunner {
	if spec.Fetch != nil || spec.Attach {
		return r.Remote.Run
	}
	return r.Run
}

// snapshotFetch says where a Job's pod fetches the snapshot: the backup
// host of the EtcdBackup the restore names, with its key and pinned host
// key.
func (r *Reconciler) snapshotFetch(ctx context.Context, er *kaov1.EtcdRestore, snap *kaov1.Snapshot) (*runner.Fetch, error) {
	eb := &kaov1.EtcdBackup{}
	key := types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.Source.BackupName}
	if err := r.Client.Get(ctx, key, eb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, reason.Missing("EtcdBackup %s named in spec.source.backupName does not exist", key)
		}
		return nil, fmt.Errorf("reading EtcdBackup %s: %w", key, err)
	}
	if eb.Spec.Destination.Type != kaov1.SSHDestination {
		return nil, reason.Missing("EtcdBackup %s no longer copies to a backup host", key)
	}
	t, err := r.inputs().SSHTarget(ctx, eb, "")
	if err != nil {
		return nil, err
	}
	if t.Location(snap.Name) != snap.Location {
		return nil, reason.Refused(kaov1.RestoreFailedReason,
			"the snapshot is stored at %s, a former destination of EtcdBackup %s: kao cannot fetch it", snap.Location, eb.Name)
	}
	return &runner.Fetch{Var: restoreSnapshotVar, Name: snap.Name, SHA256: snap.SHA256,
		Address: t.Address, Port: t.Port, User: t.User, Directory: t.Directory,
		PrivateKey: t.PrivateKey, KnownHosts: t.KnownHosts}, nil
}

// owner is the restore as its Job's labels name it.
func owner(er *kaov1.EtcdRestore) runner.Owner {
	return runner.Owner{APIVersion: kaov1.GroupVersion.String(), Kind: "EtcdRestore", Namespace: er.Namespace, Name: er.Name, UID: string(er.UID)}
}

// reattach follows the restore's run that an earlier operator process
// started in a Job, if that Job is still there: it becomes this process's
// run, recorded as any other when it ends. It returns false when there is
// none, and the run counts as interrupted.
func (r *Reconciler) reattach(ctx context.Context, er *kaov1.EtcdRestore, p *kaov1.RunProgress) (bool, error) {
	if r.Remote == nil {
		return false, nil
	}
	if _, found, err := r.Remote.Find(ctx, owner(er), p.RunID); err != nil || !found {
		return false, err
	}
	kd := &kaov1.KarmadaDeployment{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.DeploymentName}, kd); err != nil {
		return false, fmt.Errorf("reading KarmadaDeployment %s, whose restore runs in a Job: %w", er.Spec.DeploymentName, err)
	}
	spec := runner.Spec{ID: p.RunID, Dir: filepath.Join(pipeline.RunsDir(r.StateDir, kd.UID), p.RunID),
		Playbook: filepath.Join(r.PlaybookDir, p.Playbook), Attach: true}
	run := &pipeline.ActiveRun{ID: p.RunID, Playbook: p.Playbook, Generation: er.Generation, Attached: true}
	snapshot, kdSnapshot := er.DeepCopy(), kd.DeepCopy()
	if err := r.runs.Begin(er, run, func(runCtx context.Context) {
		r.executeRun(runCtx, snapshot, kdSnapshot, spec, p.StartTime.Time)
	}); err != nil {
		return false, nil
	}
	ctrl.LoggerFrom(ctx).Info("Following the restore run an earlier operator process started in a Job", "run", p.RunID)
	r.Recorder.Eventf(er, kd, corev1.EventTypeNormal, "PlaybookReattached", "Restore",
		"Following run %s of %s in its Job, started by an earlier operator process", p.RunID, p.Playbook)
	return true, nil
}
