package etcdrestore

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/runner"
)

// buildRun assembles the restore's run the way the KarmadaDeployment
// reconciler assembles an install: the deployment's inventory, SSH key,
// known_hosts, PKI files and bundle, plus the snapshot. Member clusters are
// left out: the restore does not touch them, so it needs none of their
// kubeconfigs.
func (r *Reconciler) buildRun(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment, snap *kaov1.Snapshot, local, runID, dir string) (runner.Spec, error) {
	g := r.inputs()
	runKD := kd.DeepCopy()
	runKD.Spec.Members = nil
	runKD.Status.Members = nil
	in, err := g.GatherInputs(ctx, runKD)
	if err != nil {
		return runner.Spec{}, err
	}
	if in.PKI, err = g.ReadPKI(ctx, runKD); err != nil {
		if apierrors.IsNotFound(err) {
			return runner.Spec{}, reason.Missing("the PKI Secret %s/%s of KarmadaDeployment %s does not exist", kd.Namespace, pipeline.PKISecretName(kd), kd.Name)
		}
		return runner.Spec{}, err
	}
	in.PKI = pipeline.WithExternalEtcd(in.PKI, in.ExternalEtcd)
	spec, err := g.AssembleRun(ctx, runKD, in, pipeline.RunParams{ID: runID, Dir: dir, Playbook: pipeline.EtcdRestorePlaybook})
	if err != nil {
		return runner.Spec{}, err
	}
	for k, v := range restoreExtraVars(er, snap, local) {
		spec.ExtraVars[k] = v
	}
	return spec, nil
}

// restoreSnapshotVar is the extra var with the snapshot's path on the
// Ansible controller's side.
const restoreSnapshotVar = "kao_restore_snapshot"

// restoreExtraVars are what the restore playbook takes beyond the
// deployment's run: the snapshot on the operator's side, its checksum, and
// the restore's identity.
func restoreExtraVars(er *kaov1.EtcdRestore, snap *kaov1.Snapshot, local string) map[string]any {
	return map[string]any{
		restoreSnapshotVar:          pipeline.UnsafeString(local),
		"kao_restore_sha256":        pipeline.UnsafeString(snap.SHA256),
		"kao_restore_id":            pipeline.UnsafeString(restoreID(er)),
		"kao_restore_cluster_token": pipeline.UnsafeString(restoreClusterToken(er)),
	}
}

// executeRun runs the restore playbook, keeps status.progress current at
// most every progressInterval, then records the result, releases the
// deployment and tells with an Event. A run cut off by the operator's
// shutdown leaves the restore Running and the deployment held: the next
// operator process runs the playbook again, or follows it in its Job
// (job.go).
func (r *Reconciler) executeRun(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment, spec runner.Spec, start time.Time) {
	log := ctrl.Log.WithName("restore").WithValues("EtcdRestore", klog.KObj(er), "run", spec.ID)

	status := r.statusWriter()
	who := metrics.Run{Namespace: er.Namespace, Deployment: er.Spec.DeploymentName, Playbook: spec.Playbook}
	spec.Owner = owner(er)
	res := pipeline.RunWithProgress(ctx, r.runnerFor(spec), r.Clock, spec, start, who, status.ReportProgress(ctx, er, spec, start, r.Clock, log))
	if res.Outcome == runner.Detached {
		// The operator stops and the run goes on in its Job: the restore
		// stays Running, and the next operator process follows the Job.
		log.Info("Leaving the restore run to its Job: the operator is stopping")
		return
	}
	log.Info("Restore run ended", "outcome", res.Outcome, "exitCode", res.ExitCode, "message", res.Message)

	// The run's context may be cancelled (shutdown): record the end regardless.
	finalCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logName := r.Logs(r.Client, r.APIReader).KeepRunLog(finalCtx, log, kd, spec.ID, res.Log)
	// The deployment goes free before status says the restore ended, so an
	// ended restore never holds it. Should the operator stop in between, the
	// next one repeats the run, which finds every member restored already.
	if res.Outcome != runner.Cancelled {
		if err := r.release(finalCtx, er, res.Outcome == runner.Succeeded); err != nil {
			log.Error(err, "Releasing the KarmadaDeployment; the next reconcile tries again")
		}
	}
	now := r.Clock.Now()
	msg := restoreResultMessage(er, kd, res)
	err := status.Update(finalCtx, er, func(cur *kaov1.EtcdRestore) {
		cur.Status.Progress = nil
		cur.Status.LastRun = pipeline.RunStatus(res, er.Generation, logName)
		switch res.Outcome {
		case runner.Succeeded:
			setRestoreEnded(cur, now, true, kaov1.RestoredReason, msg)
		case runner.Failed:
			setRestoreEnded(cur, now, false, kaov1.RestoreFailedReason, msg)
		default:
			setRestoreCondition(cur, now, kaov1.RestoreSucceededCondition, metav1.ConditionUnknown, kaov1.RunInterruptedReason, msg)
		}
	})
	if err != nil {
		log.Error(err, "Recording the restore's result")
	}
	if res.Outcome != runner.Cancelled {
		metrics.RestoreFinished(er.Namespace, er.Spec.DeploymentName, string(res.Outcome))
	}
	switch res.Outcome {
	case runner.Succeeded:
		r.Recorder.Eventf(er, kd, corev1.EventTypeNormal, restoreSucceededEvent, "Restore", "%s", pipeline.TruncateString(msg, 1000))
	case runner.Cancelled:
		r.Recorder.Eventf(er, kd, corev1.EventTypeNormal, "PlaybookCancelled", "Restore", "%s", pipeline.TruncateString(msg, 1000))
	default:
		r.Recorder.Eventf(er, kd, corev1.EventTypeWarning, restoreFailedEvent, "Restore", "%s", pipeline.TruncateString(msg, 1000))
	}
	r.runs.End(er)
}

// restoreResultMessage says how the restore's run ended and what the hosts
// are left with.
func restoreResultMessage(er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment, res *runner.Result) string {
	prev := previousDataDir(kd, er)
	switch res.Outcome {
	case runner.Succeeded:
		return fmt.Sprintf("run %s restored every etcd member of KarmadaDeployment %s and its API servers are ready; each member keeps its previous data in %s",
			res.ID, kd.Name, prev)
	case runner.Cancelled:
		return fmt.Sprintf("run %s of %s was cut off by the operator's shutdown; the next operator process runs it again", res.ID, res.Playbook)
	}
	return pipeline.TruncateString(fmt.Sprintf("run %s of %s failed: %s. The API servers may be stopped; members that were restored keep their previous data in %s, "+
		"the others their own data directory. Create a new EtcdRestore to try again", res.ID, res.Playbook, res.Message, prev), 1024)
}

// statusWriter writes restores' status.
func (r *Reconciler) statusWriter() pipeline.StatusWriter[*kaov1.EtcdRestore] {
	return pipeline.StatusWriter[*kaov1.EtcdRestore]{
		Client: r.Client, Reader: r.APIReader,
		NewObject: func() *kaov1.EtcdRestore { return &kaov1.EtcdRestore{} },
		Progress:  func(er *kaov1.EtcdRestore) **kaov1.RunProgress { return &er.Status.Progress },
	}
}
