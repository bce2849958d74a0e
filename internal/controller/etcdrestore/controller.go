package etcdrestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/controller/status"
	"github.com/kao-io/kao/internal/runner"
)

// Field indexes of EtcdRestores, so a change of a KarmadaDeployment or an
// EtcdBackup wakes the restores waiting for it.
const (
	restoreDeploymentIndex = "spec.deploymentName"

	restoreBackupIndex = "spec.source.backupName"
)

// Reconciler restores the managed etcd of a Binary
// KarmadaDeployment from a snapshot, once per EtcdRestore:
//
//  1. it finds the snapshot (an EtcdBackup's, or a file with its sha256),
//     fetches it from the backup host if needed, and checks its sha256 and
//     etcdutl's reading of it; a mismatch ends the restore as Failed before
//     anything on the hosts is touched;
//  2. it waits until the deployment has no run in progress, then marks it
//     with kaov1.RestoreInProgressAnnotation, which keeps the deployment's
//     reconciler from starting runs;
//  3. it runs playbooks/etcd-restore.yml with the deployment's inventory,
//     SSH and PKI, and records the run in status;
//  4. it removes the annotation, succeeded or failed.
//
// A restore interrupted by an operator restart (status.phase Running with no
// run in this process) runs its playbook again: every step of it can repeat.
type Reconciler struct {
	// Client reads through the cache and writes.
	Client client.Client
	// APIReader reads Secrets and the deployment without the cache.
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Run runs playbooks; runner.Run when nil.
	Run pipeline.PlaybookRunner
	// Clock tells the time.
	Clock clock.PassiveClock
	// Options are the operator's settings.
	pipeline.Options

	runs *pipeline.Tracker
}

// +kubebuilder:rbac:groups=kao.io,resources=etcdrestores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kao.io,resources=etcdrestores/status;etcdrestores/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups=kao.io,resources=etcdbackups,verbs=get;list;watch
// +kubebuilder:rbac:groups=kao.io,resources=karmadadeployments,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the EtcdRestore reconciler.
func Setup(mgr ctrl.Manager, o pipeline.Options) error {
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("kao"),
		Options:   o,
	}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers the reconciler, its run tracker, and watches
// that wake a restore when its deployment's run ends or its backup gets a
// snapshot.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.runs, err = pipeline.StartRuns(mgr, &r.Run, &r.Clock, &r.RunTimeout, r.Sweep); err != nil {
		return err
	}
	if err := pipeline.IndexField(mgr, &kaov1.EtcdRestore{}, restoreDeploymentIndex,
		func(er *kaov1.EtcdRestore) string { return er.Spec.DeploymentName }); err != nil {
		return err
	}
	if err := pipeline.IndexField(mgr, &kaov1.EtcdRestore{}, restoreBackupIndex,
		func(er *kaov1.EtcdRestore) string { return er.Spec.Source.BackupName }); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kaov1.EtcdRestore{}, builder.WithPredicates(pipeline.SpecOrLifecycleChanged())).
		Watches(&kaov1.KarmadaDeployment{}, handler.EnqueueRequestsFromMapFunc(pipeline.ObjectsNaming(r.Client, newRestoreList, restoreDeploymentIndex)),
			builder.WithPredicates(deploymentRunOrLockChanged())).
		Watches(&kaov1.EtcdBackup{}, handler.EnqueueRequestsFromMapFunc(pipeline.ObjectsNaming(r.Client, newRestoreList, restoreBackupIndex)),
			builder.WithPredicates(backupSnapshotChanged())).
		WatchesRawSource(source.Channel(r.runs.Finished, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

func newRestoreList() client.ObjectList { return &kaov1.EtcdRestoreList{} }

// deploymentRunOrLockChanged passes the KarmadaDeployment updates a waiting
// restore cares about: a run started or ended, an install finished, the
// annotation came or went, deletion began.
func deploymentRunOrLockChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*kaov1.KarmadaDeployment)
			n, okNew := e.ObjectNew.(*kaov1.KarmadaDeployment)
			return okOld && okNew && ((o.Status.Progress == nil) != (n.Status.Progress == nil) ||
				o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
				o.Annotations[kaov1.RestoreInProgressAnnotation] != n.Annotations[kaov1.RestoreInProgressAnnotation] ||
				!equality.Semantic.DeepEqual(o.DeletionTimestamp, n.DeletionTimestamp))
		},
	}
}

// backupSnapshotChanged passes EtcdBackup updates with a new snapshot.
func backupSnapshotChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*kaov1.EtcdBackup)
			n, okNew := e.ObjectNew.(*kaov1.EtcdBackup)
			return okOld && okNew && !equality.Semantic.DeepEqual(o.Status.LastSnapshot, n.Status.LastSnapshot)
		},
	}
}

// restoreScope is one reconcile's view of an EtcdRestore, for a single
// status patch at the end.
type restoreScope struct {
	er      *kaov1.EtcdRestore
	patcher *status.Patcher[*kaov1.EtcdRestore]
}

// Reconcile moves an EtcdRestore along: Pending → Running → Succeeded or Failed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, reterr error) {
	er := &kaov1.EtcdRestore{}
	if err := r.Client.Get(ctx, req.NamespacedName, er); err != nil {
		if apierrors.IsNotFound(err) {
			r.runs.ObjectGone(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("EtcdRestore", klog.KObj(er)))

	// The finalizer makes sure the deployment's annotation goes with the restore.
	if er.DeletionTimestamp.IsZero() && controllerutil.AddFinalizer(er, kaov1.FinalizerName) {
		return ctrl.Result{}, r.Client.Update(ctx, er)
	}

	s := &restoreScope{er: er, patcher: status.NewPatcher(r.Client, er, func(er *kaov1.EtcdRestore) any { return er.Status }, true)}
	defer func() {
		if err := r.patchStatus(ctx, s); err != nil {
			reterr = errors.Join(reterr, err)
		}
	}()
	pipeline.SetUnknownIfMissing(&er.Status.Conditions, er.Generation, kaov1.WaitingForRunReason,
		"kao has not started this restore yet", kaov1.ReadyCondition, kaov1.RestoreSucceededCondition)
	if er.Status.Phase == "" {
		er.Status.Phase = kaov1.RestorePending
	}

	if !er.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// patchStatus writes the status changes of this reconcile, if any. The
// restore's run writes the status too, and a reconcile may have read the
// restore from a cache that has not seen the run's start yet: the optimistic
// lock makes such a stale write fail (and the reconcile run again) instead
// of putting the restore back to Pending under its running playbook.
func (r *Reconciler) patchStatus(ctx context.Context, s *restoreScope) error {
	er := s.er
	er.Status.ObservedGeneration = er.Generation // the spec is immutable: every reconcile acts on it
	return s.patcher.Patch(ctx)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, s *restoreScope) (ctrl.Result, error) {
	er := s.er
	if r.runs.Get(er) != nil {
		return ctrl.Result{}, nil // the run's end reconciles again
	}
	if r.runs.Stopping() {
		return ctrl.Result{}, nil // the next operator process resumes the restore
	}
	now := r.Clock.Now()
	switch er.Status.Phase {
	case kaov1.RestoreSucceeded, kaov1.RestoreFailed:
		// A restore runs once. Whatever an ending left undone is finished here.
		return ctrl.Result{}, r.release(ctx, er, er.Status.Phase == kaov1.RestoreSucceeded)
	}
	if p := er.Status.Progress; p != nil {
		if attached, err := r.reattach(ctx, er, p); err != nil || attached {
			return ctrl.Result{}, err
		}
		r.recordInterruptedRun(ctx, er, p, now)
	}

	kd, wait := r.deploymentToRestore(ctx, er, now)
	if kd == nil {
		return wait, nil
	}
	snap, local, err := r.verifiedSnapshot(ctx, er, kd)
	if err != nil {
		return r.notStarted(ctx, er, kd, err, now)
	}
	if busy := deploymentBusy(kd, er); busy != "" {
		setRestoreWaiting(er, now, kaov1.WaitingForRunReason, busy)
		return ctrl.Result{RequeueAfter: restoreBusyRequeueAfter}, nil
	}

	runID := pipeline.NewRunID(now)
	dir := filepath.Join(pipeline.RunsDir(r.StateDir, kd.UID), runID)
	spec, err := r.buildRun(ctx, er, kd, snap, local, runID, dir)
	if err == nil && r.inJob(kd, snap) {
		spec.Fetch, err = r.snapshotFetch(ctx, er, snap)
	}
	if err == nil {
		err = r.lockDeployment(ctx, er, kd)
	}
	if err != nil {
		return r.notStarted(ctx, er, kd, err, now)
	}

	resumed := er.Status.Phase == kaov1.RestoreRunning
	er.Status.Phase = kaov1.RestoreRunning
	if er.Status.StartTime == nil {
		er.Status.StartTime = pipeline.TimePtr(now)
	}
	er.Status.Snapshot = snap
	er.Status.PreviousDataDir = previousDataDir(kd, er)
	total, _ := runner.EstimateResults(spec.Playbook, spec.RolesPath, spec.Groups, nil)
	er.Status.Progress = pipeline.ProgressStatus(runID, pipeline.EtcdRestorePlaybook, now, runner.Progress{TasksTotal: total}, now)
	msg := fmt.Sprintf("run %s of %s restores snapshot %s (revision %d) into KarmadaDeployment %s; its API servers are stopped until it ends",
		runID, pipeline.EtcdRestorePlaybook, snap.Name, snap.Revision, kd.Name)
	setRestoreRunning(er, now, msg)
	// The run's own status writes start only after this one landed.
	if err := r.patchStatus(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	snapshot := er.DeepCopy()
	kdSnapshot := kd.DeepCopy()
	run := &pipeline.ActiveRun{ID: runID, Playbook: pipeline.EtcdRestorePlaybook, Generation: er.Generation}
	if err := r.runs.Begin(er, run, func(runCtx context.Context) {
		r.executeRun(runCtx, snapshot, kdSnapshot, spec, now)
	}); err != nil {
		return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
	}
	if resumed {
		r.Recorder.Eventf(er, kd, corev1.EventTypeNormal, restoreResumedEvent, "Restore",
			"Running the restore again after an interruption: %s", msg)
	} else {
		r.Recorder.Eventf(er, kd, corev1.EventTypeNormal, restoreStartedEvent, "Restore", "Started %s", msg)
	}
	ctrl.LoggerFrom(ctx).Info("Starting an etcd restore", "run", runID, "snapshot", snap.Name, "KarmadaDeployment", klog.KObj(kd))
	return ctrl.Result{}, nil
}

// notStarted records why the restore did not start (or resume): a refusal
// ends it; missing inputs and a busy deployment are waited for; anything else
// is retried by the controller.
func (r *Reconciler) notStarted(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment, err error, now time.Time) (ctrl.Result, error) {
	e, ok := reason.From(err)
	if !ok {
		return ctrl.Result{}, err
	}
	switch e.Kind {
	case reason.Refuse:
		r.end(ctx, er, kd, false, e.Reason, e.Message, now)
		return ctrl.Result{}, nil
	case reason.Wait:
		setRestoreWaiting(er, now, e.Reason, e.Message)
		return ctrl.Result{RequeueAfter: e.After}, nil
	default:
		setRestoreWaiting(er, now, e.Reason, e.Message)
		return ctrl.Result{RequeueAfter: restoreWaitRequeueAfter}, nil
	}
}

// end finishes a restore that will not run (again): status, an Event, and
// the deployment released. A restore that never ran touched nothing.
func (r *Reconciler) end(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment, succeeded bool, reason, msg string, now time.Time) {
	if er.Status.StartTime == nil {
		er.Status.StartTime = pipeline.TimePtr(now)
	}
	setRestoreEnded(er, now, succeeded, reason, msg)
	event := restoreFailedEvent
	if reason == kaov1.ChecksumMismatchReason {
		event = checksumMismatchEvent
	}
	var related runtime.Object
	if kd != nil {
		related = kd
	}
	r.Recorder.Eventf(er, related, corev1.EventTypeWarning, event, "Restore", "%s", pipeline.TruncateString(msg, 1000))
	ctrl.LoggerFrom(ctx).Info("Ending an etcd restore without a run", "reason", reason, "message", msg)
	if err := r.release(ctx, er, false); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Releasing the KarmadaDeployment after a refused restore")
	}
}

// deploymentToRestore reads the deployment to restore into. A nil
// deployment means: not now, with the result to return (a restore that
// cannot ever run is ended here).
func (r *Reconciler) deploymentToRestore(ctx context.Context, er *kaov1.EtcdRestore, now time.Time) (*kaov1.KarmadaDeployment, ctrl.Result) {
	kd := &kaov1.KarmadaDeployment{}
	key := types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.DeploymentName}
	if err := r.Client.Get(ctx, key, kd); err != nil {
		msg := fmt.Sprintf("reading KarmadaDeployment %s named in spec.deploymentName: %v", key, err)
		if apierrors.IsNotFound(err) {
			msg = fmt.Sprintf("KarmadaDeployment %s named in spec.deploymentName does not exist", key)
		}
		setRestoreWaiting(er, now, kaov1.PrerequisitesMissingReason, msg)
		return nil, ctrl.Result{RequeueAfter: restoreWaitRequeueAfter}
	}
	switch {
	case !kd.DeletionTimestamp.IsZero():
		r.end(ctx, er, kd, false, kaov1.RestoreFailedReason, fmt.Sprintf("KarmadaDeployment %s is being deleted: kao does not restore it", key), now)
		return nil, ctrl.Result{}
	case kd.Spec.Mode != kaov1.BinaryMode || kd.Spec.Etcd.Managed == nil:
		r.end(ctx, er, kd, false, kaov1.InvalidSpecReason, fmt.Sprintf(
			"KarmadaDeployment %s runs %s etcd in %s mode: kao restores the managed etcd of Binary deployments only",
			key, etcdKind(kd), kd.Spec.Mode), now)
		return nil, ctrl.Result{}
	case kd.Status.ObservedGeneration == 0:
		setRestoreWaiting(er, now, kaov1.WaitingForRunReason, fmt.Sprintf(
			"waiting for KarmadaDeployment %s to finish its first install (status.observedGeneration is 0)", key))
		return nil, ctrl.Result{RequeueAfter: restoreWaitRequeueAfter}
	}
	return kd, ctrl.Result{}
}

func etcdKind(kd *kaov1.KarmadaDeployment) string {
	if kd.Spec.Etcd.Managed != nil {
		return "managed"
	}
	return "external"
}

// deploymentBusy says why the deployment cannot be restored now: another
// restore holds it, or a run is in progress. "" means free, or held by this
// restore already (a resumed restore).
func deploymentBusy(kd *kaov1.KarmadaDeployment, er *kaov1.EtcdRestore) string {
	switch holder := kd.Annotations[kaov1.RestoreInProgressAnnotation]; {
	case holder == er.Name:
		return ""
	case holder != "":
		return fmt.Sprintf("waiting for EtcdRestore %s, which is restoring KarmadaDeployment %s (annotation %s)",
			holder, kd.Name, kaov1.RestoreInProgressAnnotation)
	case kd.Status.Progress != nil:
		return fmt.Sprintf("waiting for run %s of %s of KarmadaDeployment %s to end",
			kd.Status.Progress.RunID, kd.Status.Progress.Playbook, kd.Name)
	}
	return ""
}

// lockDeployment sets kaov1.RestoreInProgressAnnotation on the deployment, read
// anew, only while it has no run in progress. The patch carries the
// resourceVersion it was decided on, and the deployment's reconciler starts
// a run with a status patch that does the same: of a restore and a run
// deciding at once, one write fails, so they never both start.
func (r *Reconciler) lockDeployment(ctx context.Context, er *kaov1.EtcdRestore, kd *kaov1.KarmadaDeployment) error {
	// A restore read from a cache that has not seen its run's end yet looks
	// Running: it must not mark the deployment again after the run let it go.
	fresh := &kaov1.EtcdRestore{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(er), fresh); err != nil {
		return fmt.Errorf("reading EtcdRestore %s: %w", er.Name, err)
	}
	if fresh.ResourceVersion != er.ResourceVersion {
		return reason.Pending(kaov1.WaitingForRunReason, pipeline.StaleCacheRequeueAfter, "EtcdRestore %s changed while kao read it: looking again", er.Name)
	}
	cur := &kaov1.KarmadaDeployment{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
		return fmt.Errorf("reading KarmadaDeployment %s: %w", kd.Name, err)
	}
	if busy := deploymentBusy(cur, er); busy != "" {
		return reason.Pending(kaov1.WaitingForRunReason, restoreBusyRequeueAfter, "%s", busy)
	}
	if cur.Annotations[kaov1.RestoreInProgressAnnotation] == er.Name {
		return nil
	}
	base := cur.DeepCopy()
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[kaov1.RestoreInProgressAnnotation] = er.Name
	if err := r.Client.Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return reason.Pending(kaov1.WaitingForRunReason, pipeline.StaleCacheRequeueAfter, "KarmadaDeployment %s changed while kao marked it for the restore: looking again", kd.Name)
		}
		return fmt.Errorf("marking KarmadaDeployment %s with %s: %w", kd.Name, kaov1.RestoreInProgressAnnotation, err)
	}
	return nil
}

// release removes kaov1.RestoreInProgressAnnotation from the deployment if this
// restore set it, and the snapshot the restore fetched. After a restore that
// succeeded (restored) it sets kaov1.RestoredAtAnnotation in the same write,
// so the deployment's reconciler, woken by it, runs the install once more.
func (r *Reconciler) release(ctx context.Context, er *kaov1.EtcdRestore, restored bool) error {
	if err := r.removeRestoreDir(er); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Removing the fetched snapshot")
	}
	key := types.NamespacedName{Namespace: er.Namespace, Name: er.Spec.DeploymentName}
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := &kaov1.KarmadaDeployment{}
		if err := r.APIReader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cur.Annotations[kaov1.RestoreInProgressAnnotation] != er.Name {
			return nil
		}
		base := cur.DeepCopy()
		delete(cur.Annotations, kaov1.RestoreInProgressAnnotation)
		if restored {
			// The deployment's reconciler runs the install once more, which
			// applies Karmada's objects as its spec says (kaov1.RestoredAtAnnotation).
			cur.Annotations[kaov1.RestoredAtAnnotation] = r.Clock.Now().UTC().Format(time.RFC3339)
		}
		err := r.Client.Patch(ctx, cur, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		return client.IgnoreNotFound(err)
	})
}

// reconcileDelete lets a restore go once its run ended and the deployment
// is released. A run in progress is never cancelled: stopping it midway
// would leave etcd and the API servers stopped.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *restoreScope) error {
	er := s.er
	if !controllerutil.ContainsFinalizer(er, kaov1.FinalizerName) {
		return nil
	}
	if r.runs.Get(er) != nil {
		return nil // the run's end reconciles again
	}
	if p := er.Status.Progress; p != nil {
		// A run an earlier operator process left in its Job still works on
		// the hosts: the deployment is released only after it.
		if attached, err := r.reattach(ctx, er, p); err != nil || attached {
			return err
		}
	}
	if er.Status.Phase == kaov1.RestoreRunning {
		ctrl.LoggerFrom(ctx).Info("Deleting a restore that did not finish: the KarmadaDeployment runs again as its spec says",
			"KarmadaDeployment", er.Spec.DeploymentName)
	}
	if err := r.release(ctx, er, er.Status.Phase == kaov1.RestoreSucceeded); err != nil {
		return err
	}
	if err := r.patchStatus(ctx, s); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(er, kaov1.FinalizerName)
	if err := r.Client.Update(ctx, er); client.IgnoreNotFound(err) != nil {
		return err
	}
	r.runs.Forget(er)
	return nil
}

// recordInterruptedRun closes a run that a previous operator process started
// and never finished; the restore then runs its playbook again.
func (r *Reconciler) recordInterruptedRun(ctx context.Context, er *kaov1.EtcdRestore, p *kaov1.RunProgress, now time.Time) {
	msg := fmt.Sprintf("the operator stopped during run %s of %s (%d/%d tasks); kao runs it again",
		p.RunID, p.Playbook, p.TasksDone, p.TasksTotal)
	ctrl.LoggerFrom(ctx).Info("Recording an interrupted restore run", "run", p.RunID)
	er.Status.LastRun = &kaov1.RunStatus{
		ID: p.RunID, Playbook: p.Playbook, Generation: er.Generation, Result: kaov1.RunCancelled,
		Message: msg, StartTime: p.StartTime, EndTime: *pipeline.TimePtr(now),
	}
	er.Status.Progress = nil
	setRestoreCondition(er, now, kaov1.RestoreSucceededCondition, metav1.ConditionUnknown, kaov1.RunInterruptedReason, msg)
}

// previousDataDir is where the members keep their data from before this
// restore, as roles/etcd_restore names it.
func previousDataDir(kd *kaov1.KarmadaDeployment, er *kaov1.EtcdRestore) string {
	dir := defaultEtcdDataDir
	if m := kd.Spec.Etcd.Managed; m != nil && m.DataDir != "" {
		dir = m.DataDir
	}
	return dir + previousDataSuffix + restoreID(er)
}

// restoreID names a restore in the paths it leaves on the hosts: the start
// of its name and of its UID, so that it is readable and unique.
func restoreID(er *kaov1.EtcdRestore) string {
	uid := string(er.UID)
	if i := strings.IndexByte(uid, '-'); i > 0 {
		uid = uid[:i]
	}
	return strings.TrimRight(pipeline.TruncateString(er.Name, restoreIDNameBytes), ".-") + "-" + strings.ToLower(uid)
}

// restoreClusterToken is the restored cluster's --initial-cluster-token: new
// for every restore.
func restoreClusterToken(er *kaov1.EtcdRestore) string {
	return "karmada-etcd-restore-" + strings.ToLower(string(er.UID))
}

// inputs reads what a restore's run needs and assembles it as every kind
// does: the same inputs, inventory, PKI files and run directories.
func (r *Reconciler) inputs() *pipeline.Gatherer {
	return &pipeline.Gatherer{Client: r.Client, APIReader: r.APIReader, Options: r.Options}
}
