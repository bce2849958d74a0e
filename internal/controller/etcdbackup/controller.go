package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/status"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/probe"
)

// backupDeploymentIndex indexes EtcdBackups by spec.deploymentName, so a
// change of a KarmadaDeployment wakes the backups waiting for it.
const backupDeploymentIndex = "spec.deploymentName"

// Reconciler takes etcd snapshots of KarmadaDeployments: once, or
// on a cron schedule with retention. The operator streams each snapshot from
// a healthy member with the etcd client, checks it with the bundle's
// etcdutl and stores it on its state volume or on a backup host over SSH.
//
// Snapshots outlive their EtcdBackup: deleting the object deletes no file.
// Only retention deletes snapshots, and only ones listed in status.
type Reconciler struct {
	// Client reads through the cache and writes.
	Client client.Client
	// APIReader reads Secrets without the cache (kao may not list them).
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// EtcdProber asks etcd members for their health; probe.Etcd when nil.
	EtcdProber probe.EtcdProber
	// Clock tells the time; a fake in tests moves schedules along.
	Clock clock.PassiveClock
	// Options are the operator's settings: StateDir, ArtifactsDir, workers.
	pipeline.Options
}

// +kubebuilder:rbac:groups=kao.io,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=kao.io,resources=etcdbackups/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kao.io,resources=karmadadeployments,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the EtcdBackup reconciler.
func Setup(mgr ctrl.Manager, o pipeline.Options) error {
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("kao"),
		Options:   o,
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler, and a watch that wakes the
// backups of a KarmadaDeployment when it is installed or changed.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := pipeline.IndexField(mgr, &kaov1.EtcdBackup{}, backupDeploymentIndex,
		func(eb *kaov1.EtcdBackup) string { return eb.Spec.DeploymentName }); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kaov1.EtcdBackup{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&kaov1.KarmadaDeployment{}, handler.EnqueueRequestsFromMapFunc(pipeline.ObjectsNaming(r.Client, func() client.ObjectList { return &kaov1.EtcdBackupList{} }, backupDeploymentIndex)),
			builder.WithPredicates(deploymentInstalledOrChanged())).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// deploymentInstalledOrChanged passes the KarmadaDeployment updates a
// backup cares about: a new spec, or a finished install (observedGeneration).
func deploymentInstalledOrChanged() predicate.Predicate {
	return predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*kaov1.KarmadaDeployment)
			n, okNew := e.ObjectNew.(*kaov1.KarmadaDeployment)
			return okOld && okNew && o.Status.ObservedGeneration != n.Status.ObservedGeneration
		},
	})
}

// backupScope is one reconcile's view of an EtcdBackup: the object being
// changed and the state it was read in, for a single status patch.
type backupScope struct {
	eb      *kaov1.EtcdBackup
	patcher *status.Patcher[*kaov1.EtcdBackup]
	// acted is set when this reconcile acted on the current spec without a
	// failure; only then does status.observedGeneration move.
	acted bool
	// endedJob is the ID of a snapshot Job whose end this reconcile
	// recorded: it is deleted once status holds its result, so that a
	// status write that fails finds the Job, and its result, again.
	endedJob string
}

// Reconcile takes the snapshot that is due, if any, and records the outcome.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	eb := &kaov1.EtcdBackup{}
	if err := r.Client.Get(ctx, req.NamespacedName, eb); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.ForgetBackup(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !eb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // snapshots outlive the object: nothing to clean up
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("EtcdBackup", klog.KObj(eb)))

	// No optimistic lock: only this reconciler writes the status, one
	// reconcile per backup at a time, and a spec edit during a long snapshot
	// must not lose the snapshot's record (its file would never be pruned).
	s := &backupScope{eb: eb, patcher: status.NewPatcher(r.Client, eb, func(eb *kaov1.EtcdBackup) any { return eb.Status }, false)}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil {
			reterr = errors.Join(reterr, err)
			return
		}
		if s.endedJob != "" && r.Remote != nil {
			if err := r.Remote.RemoveTask(ctx, owner(eb), s.endedJob); err != nil {
				ctrl.LoggerFrom(ctx).Info("Deleting a snapshot Job that ended failed; deleting the backup removes it", "id", s.endedJob, "error", err.Error())
			}
		}
	}()
	pipeline.SetUnknownIfMissing(&eb.Status.Conditions, eb.Generation, kaov1.WaitingForRunReason,
		"kao has not taken a snapshot for this backup yet", kaov1.ReadyCondition, kaov1.BackupSucceededCondition)
	return r.reconcileNormal(ctx, s), nil
}

// patchStatus writes the status changes of this reconcile, if any.
func (r *Reconciler) patchStatus(ctx context.Context, s *backupScope) error {
	eb := s.eb
	if s.acted {
		eb.Status.ObservedGeneration = eb.Generation
	}
	return s.patcher.Patch(ctx)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *backupScope) ctrl.Result {
	eb := s.eb
	now := r.Clock.Now()
	if eb.Status.SnapshotJob != nil {
		// A snapshot under way in a Job is seen to its end first, whatever
		// the spec says now.
		return r.followSnapshotJob(ctx, s)
	}
	sched, err := parseSchedule(eb.Spec.Schedule)
	if err == nil && sched != nil && sched.Next(now.UTC()).IsZero() {
		err = fmt.Errorf("spec.schedule %q never fires", eb.Spec.Schedule)
	}
	if err != nil {
		r.notReady(eb, nil, now, kaov1.InvalidSpecReason, err.Error())
		return ctrl.Result{} // a spec change reconciles again
	}
	if eb.Spec.Suspend {
		eb.Status.NextScheduleTime = nil
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.PausedReason,
			"spec.suspend is true: kao takes no snapshots")
		s.acted = true
		return ctrl.Result{}
	}

	d := decideBackup(eb, sched, now)
	switch {
	case d.done:
		setReadyFromLastAttempt(eb, now, nil)
		s.acted = true
		return ctrl.Result{}
	case !d.take:
		eb.Status.NextScheduleTime = pipeline.TimePtr(d.next)
		setReadyFromLastAttempt(eb, now, &d.next)
		s.acted = sched != nil // a one-shot backup waiting to retry has not acted on its spec yet
		return requeueAt(d.next, now)
	}

	kd, src, wait, err := r.deploymentToBackUp(ctx, eb, now)
	defer src.Close()
	if wait {
		if !d.slot.IsZero() {
			eb.Status.NextScheduleTime = pipeline.TimePtr(d.slot) // still due: taken once the deployment is ready
		}
		return ctrl.Result{RequeueAfter: deploymentWaitRequeueAfter}
	}
	var res *snapshotResult
	if err == nil {
		if r.snapshotInJob(kd, eb, src) {
			if err = r.startSnapshotJob(ctx, eb, kd, src, d, now); err == nil {
				return ctrl.Result{RequeueAfter: snapshotJobPollInterval}
			}
		} else {
			res, err = r.takeSnapshot(ctx, eb, src, now)
		}
	}
	return r.finishAttempt(ctx, s, kd, sched, d, now, res, err)
}

// finishAttempt records the outcome of a snapshot attempt that started at
// start for decision d, and when the next one is due.
func (r *Reconciler) finishAttempt(ctx context.Context, s *backupScope, kd *kaov1.KarmadaDeployment, sched cron.Schedule,
	d backupDecision, start time.Time, res *snapshotResult, err error) ctrl.Result {
	eb := s.eb
	end := r.Clock.Now() // a snapshot takes a while
	next := d.next
	if sched != nil {
		eb.Status.LastScheduleTime = pipeline.TimePtr(d.slot)
	}
	if err != nil {
		r.recordFailure(ctx, eb, kd, err, end)
		if sched == nil {
			next = oneShotRetryAt(eb, end)
		}
		eb.Status.NextScheduleTime = pipeline.TimePtr(next)
		setReadyFromLastAttempt(eb, end, &next)
		return requeueAt(next, end)
	}
	metrics.SnapshotTaken(backupMetrics(eb), end.Sub(start))
	r.recordSuccess(ctx, eb, kd, res, end)
	s.acted = true
	if sched == nil {
		eb.Status.NextScheduleTime = nil
		setReadyFromLastAttempt(eb, end, nil)
		return ctrl.Result{}
	}
	eb.Status.NextScheduleTime = pipeline.TimePtr(next)
	setReadyFromLastAttempt(eb, end, &next)
	return requeueAt(next, end)
}

// requeueAt reconciles again at a time; a time that passed while a long
// snapshot ran is due at once (after minRequeueAfter).
func requeueAt(at, now time.Time) ctrl.Result {
	return ctrl.Result{RequeueAfter: max(at.Sub(now), minRequeueAfter)}
}

// deploymentToBackUp reads the KarmadaDeployment and how to reach its etcd.
// wait is true while the deployment is missing or not installed yet: no
// snapshot is taken of an etcd that is being installed, and Ready says so.
// An error (a bad etcd client Secret, an unusable host cluster kubeconfig)
// fails this attempt. Close the source when done.
func (r *Reconciler) deploymentToBackUp(ctx context.Context, eb *kaov1.EtcdBackup, now time.Time) (kd *kaov1.KarmadaDeployment, src *pipeline.EtcdSource, wait bool, err error) {
	kd = &kaov1.KarmadaDeployment{}
	key := types.NamespacedName{Namespace: eb.Namespace, Name: eb.Spec.DeploymentName}
	if err := r.Client.Get(ctx, key, kd); err != nil {
		msg := fmt.Sprintf("reading KarmadaDeployment %s named in spec.deploymentName: %v", key, err)
		if apierrors.IsNotFound(err) {
			msg = fmt.Sprintf("KarmadaDeployment %s named in spec.deploymentName does not exist", key)
		}
		r.notReady(eb, nil, now, kaov1.PrerequisitesMissingReason, msg)
		return nil, nil, true, nil
	}
	if !kd.DeletionTimestamp.IsZero() {
		r.notReady(eb, kd, now, kaov1.PrerequisitesMissingReason,
			fmt.Sprintf("KarmadaDeployment %s is being deleted: kao takes no snapshots of it", key))
		return nil, nil, true, nil
	}
	if kd.Status.ObservedGeneration == 0 {
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.WaitingForRunReason,
			fmt.Sprintf("waiting for KarmadaDeployment %s to finish its first install (status.observedGeneration is 0): kao takes no snapshot of an etcd being installed", key))
		return nil, nil, true, nil
	}
	src, err = r.inputs().EtcdSourceOf(ctx, kd)
	if err != nil && kd.Spec.Etcd.Managed != nil && apierrors.IsNotFound(err) {
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.WaitingForRunReason,
			fmt.Sprintf("waiting for KarmadaDeployment %s to have its PKI Secret %s: kao takes no snapshot of an etcd being installed", key, pipeline.PKISecretName(kd)))
		return nil, nil, true, nil
	}
	return kd, src, false, err
}

// notReady sets Ready to False for a problem the user must fix (a bad
// schedule, a missing deployment) and says so in a Warning Event, once: not
// again while Ready already says the same at this generation, though the
// backup is reconciled again while it waits.
func (r *Reconciler) notReady(eb *kaov1.EtcdBackup, kd *kaov1.KarmadaDeployment, now time.Time, reason, msg string) {
	var prev *metav1.Condition
	if c := meta.FindStatusCondition(eb.Status.Conditions, kaov1.ReadyCondition); c != nil {
		before := *c // SetStatusCondition changes the entry in place
		prev = &before
	}
	setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	cur := meta.FindStatusCondition(eb.Status.Conditions, kaov1.ReadyCondition)
	if prev != nil && prev.Status == cur.Status && prev.Reason == cur.Reason && prev.Message == cur.Message &&
		prev.ObservedGeneration == cur.ObservedGeneration {
		return
	}
	r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeWarning, reason, "Check", "%s", cur.Message)
}

// recordSuccess puts a new snapshot in status, applies retention and tells.
func (r *Reconciler) recordSuccess(ctx context.Context, eb *kaov1.EtcdBackup, kd *kaov1.KarmadaDeployment, res *snapshotResult, now time.Time) {
	snap := res.snapshot
	kept, dropped, held := splitRetained(snap, eb.Status.Snapshots, backupRetention(eb))
	deleted, failed, problems := r.pruneSnapshots(ctx, eb, dropped)
	eb.Status.Snapshots = append(kept, failed...)
	eb.Status.LastSnapshot = snap.DeepCopy()
	msg := fmt.Sprintf("snapshot %s of member %s stored at %s: revision %d, %d keys, %s, sha256 %s",
		snap.Name, snap.Member, snap.Location, snap.Revision, res.keys, snap.Size.String(), snap.SHA256)
	setBackupCondition(eb, now, kaov1.BackupSucceededCondition, metav1.ConditionTrue, kaov1.SnapshotSavedReason, msg)
	r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeNormal, backupSucceededEvent, "Snapshot", "%s", pipeline.TruncateString(msg, 1000))
	ctrl.LoggerFrom(ctx).Info("Took an etcd snapshot", "snapshot", snap.Name, "member", snap.Member,
		"location", snap.Location, "revision", snap.Revision, "bytes", snap.Size.Value())
	if deleted > 0 {
		metrics.SnapshotsPruned(backupMetrics(eb), deleted)
		r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeNormal, snapshotPrunedEvent, "Prune",
			"Deleted %d snapshots beyond spec.retention", deleted)
	}
	if held != nil {
		r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeWarning, snapshotHeldEvent, "Prune",
			"Kept snapshot %s (revision %d, %d keys) beyond spec.retention: every snapshot since holds an older revision or under half its keys, "+
				"as if etcd lost its data. It stays until newer snapshots hold as much again, or until it is removed from the backup's destination by hand",
			held.Name, held.Revision, held.Keys)
	}
	if len(problems) > 0 {
		note := pipeline.TruncateString(strings.Join(problems, "; "), 1000)
		r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeWarning, pruneFailedEvent, "Prune", "%s", note)
		ctrl.LoggerFrom(ctx).Info("Pruning old snapshots left some behind", "problems", note)
	}
}

// recordFailure records a failed attempt in BackupSucceeded and an Event.
func (r *Reconciler) recordFailure(ctx context.Context, eb *kaov1.EtcdBackup, kd *kaov1.KarmadaDeployment, err error, now time.Time) {
	msg := pipeline.TruncateString("taking a snapshot of KarmadaDeployment "+eb.Spec.DeploymentName+" failed: "+err.Error(), 1000)
	setBackupCondition(eb, now, kaov1.BackupSucceededCondition, metav1.ConditionFalse, kaov1.SnapshotFailedReason, msg)
	metrics.SnapshotFailed(backupMetrics(eb))
	r.Recorder.Eventf(eb, relatedOf(kd), corev1.EventTypeWarning, backupFailedEvent, "Snapshot", "%s", msg)
	ctrl.LoggerFrom(ctx).Info("Taking an etcd snapshot failed", "reason", msg)
}

func (r *Reconciler) etcdProber() probe.EtcdProber {
	if r.EtcdProber != nil {
		return r.EtcdProber
	}
	return probe.Etcd{}
}

// inputs reads a deployment's Secrets (its PKI, the external etcd's
// certificates) and the bundle, as every kind does.
func (r *Reconciler) inputs() *pipeline.Gatherer {
	return &pipeline.Gatherer{Client: r.Client, APIReader: r.APIReader, Options: r.Options}
}

// nextAttemptText says when the next snapshot is due, for messages.
func nextAttemptText(next *time.Time) string {
	if next == nil {
		return ""
	}
	return "; next snapshot at " + next.UTC().Format(time.RFC3339)
}

// backupMetrics labels a backup's metrics.
func backupMetrics(eb *kaov1.EtcdBackup) metrics.Backup {
	return metrics.Backup{Namespace: eb.Namespace, Name: eb.Name, Deployment: eb.Spec.DeploymentName}
}
