package karmadadeployment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/controller/status"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
)

// Reconciler turns KarmadaDeployments into Ansible runs and
// writes what happened back into their status.
//
// One run per deployment at a time. A spec change during a run waits for that
// run to end and then runs at once: cancelling Ansible midway can leave a host
// half-configured (a binary replaced, its service not yet restarted), while
// every kao playbook converges when run again. Deletion is the exception: it
// cancels an install in progress and runs the uninstall playbook.
type Reconciler struct {
	// Client reads through the cache and writes.
	Client client.Client
	// APIReader reads without the cache: Secrets (kao may not list them) and
	// the latest status before a write.
	APIReader client.Reader
	// Recorder emits Events.
	Recorder events.EventRecorder
	// Run runs playbooks; runner.Run when nil.
	Run pipeline.PlaybookRunner
	// EtcdProber asks etcd members for their health; probe.Etcd when nil.
	EtcdProber probe.EtcdProber
	// ReadyzProber asks API servers for /readyz; probe.Readyz when nil.
	ReadyzProber probe.ReadyzProber
	// KarmadaProber checks karmada-webhook, leader leases and APIServices; probe.Karmada when nil.
	KarmadaProber probe.KarmadaProber
	// VersionProber asks API servers for /version; probe.APIVersions when nil.
	VersionProber probe.VersionProber
	// Clock tells the time; a fake in tests moves backoff along.
	Clock clock.PassiveClock
	// InClusterConfig reaches the operator's own cluster: the host cluster of
	// Containerized deployments with spec.hostCluster.inCluster.
	InClusterConfig *rest.Config
	// Options are the operator's settings: directories, limits, intervals.
	pipeline.Options

	runs *pipeline.Tracker
	// clusterWatches follow the deployments' Karmada Clusters.
	clusterWatches *clusterWatches
	// probeRequests feed the probe controller (health.go).
	probeRequests chan event.TypedGenericEvent[client.Object]
}

// +kubebuilder:rbac:groups=kao.io,resources=karmadadeployments,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kao.io,resources=karmadadeployments/status;karmadadeployments/finalizers,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler and its run tracker.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	var err error
	if r.runs, err = pipeline.StartRuns(mgr, &r.Run, &r.Clock, &r.RunTimeout, r.Sweep); err != nil {
		return err
	}
	r.runs.SetLimits(r.RunLimits)
	r.clusterWatches = newClusterWatches(r.recordClusters)
	if err := mgr.Add(r.clusterWatches); err != nil {
		return err
	}
	if err := r.setupHealth(mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&kaov1.KarmadaDeployment{}, builder.WithPredicates(pipeline.SpecOrLifecycleChanged())).
		WatchesRawSource(source.Channel(r.runs.Finished, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// Reconcile moves a KarmadaDeployment towards its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, reterr error) {
	kd := &kaov1.KarmadaDeployment{}
	if err := r.Client.Get(ctx, req.NamespacedName, kd); err != nil {
		if apierrors.IsNotFound(err) {
			r.runs.ObjectGone(req.NamespacedName)
			r.clusterWatches.stop(req.NamespacedName)
			metrics.ForgetDeployment(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("KarmadaDeployment", klog.KObj(kd)))

	if kd.DeletionTimestamp.IsZero() && controllerutil.AddFinalizer(kd, kaov1.FinalizerName) {
		return ctrl.Result{}, r.Client.Update(ctx, kd)
	}

	s := &scope{kd: kd, patcher: status.NewPatcher(r.Client, kd, deploymentStatus, true), failedBefore: lastFailure(kd)}
	defer func() {
		err := r.patchStatus(ctx, s)
		switch {
		case err == nil:
		case apierrors.IsConflict(err) && reterr == nil:
			// A probe or a run wrote status since the read: decide again on
			// the newer object.
			res = ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}
		default:
			reterr = errors.Join(reterr, err)
		}
	}()
	pipeline.SetUnknownIfMissing(&kd.Status.Conditions, kd.Generation, kaov1.WaitingForRunReason,
		"kao has not finished a run for this deployment yet", deploymentConditions...)
	setPausedCondition(kd)

	if !kd.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	if kd.Spec.Paused {
		return ctrl.Result{}, nil
	}
	return r.reconcileNormal(ctx, s)
}

// scope is one reconcile's view of a deployment: the object being changed,
// and its patcher, which writes the status changes once at the end (with the
// optimistic lock: a finished run's record is never overwritten).
type scope struct {
	kd      *kaov1.KarmadaDeployment
	patcher *status.Patcher[*kaov1.KarmadaDeployment]
	// upgrade is what the run starting now moves, when it is an upgrade.
	upgrade *upgradePlan
	// failedBefore is status.retry.lastFailureTime as the reconcile found it.
	failedBefore time.Time
	// check makes the run starting now a drift check (check mode).
	check bool
	// plan makes the run starting now a plan of the generation (check mode).
	plan bool
	// repair is set when the run starting now repairs the drift status.drift lists.
	repair bool
}

// lastFailure is when the deployment's last failed attempt was recorded.
func lastFailure(kd *kaov1.KarmadaDeployment) time.Time {
	if r := kd.Status.Retry; r != nil && r.LastFailureTime != nil {
		return r.LastFailureTime.Time
	}
	return time.Time{}
}

// inputs reads what this reconciler's runs need.
func (r *Reconciler) inputs() *pipeline.Gatherer {
	return &pipeline.Gatherer{Client: r.Client, APIReader: r.APIReader, InClusterConfig: r.InClusterConfig, Options: r.Options}
}

// patchStatus writes the status changes of this reconcile, if any.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope) error {
	kd := s.kd
	kd.Status.Phase = phaseFor(kd, r.runs.Get(kd) != nil || kd.Status.Progress != nil)
	if last := kd.Status.LastRun; last != nil && last.Result == kaov1.RunSucceeded && last.Generation == kd.Generation {
		kd.Status.ObservedGeneration = kd.Generation
	}
	if err := s.patcher.Patch(ctx); err != nil {
		return err
	}
	// A run that could not start is counted once its retry is recorded: a
	// patch refused for a conflict is reconciled, and decided, again.
	if failed := lastFailure(kd); !failed.IsZero() && !failed.Equal(s.failedBefore) {
		metrics.RetryScheduled(kd.Namespace, kd.Name)
	}
	return nil
}

func deploymentStatus(kd *kaov1.KarmadaDeployment) any { return kd.Status }

func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (ctrl.Result, error) {
	kd := s.kd
	if r.runs.Get(kd) != nil {
		// The run's end reconciles again; a spec change waits for it (see the type's doc).
		return ctrl.Result{}, nil
	}
	if r.cacheIsBehind(kd) {
		return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
	}
	now := r.Clock.Now()
	if p := kd.Status.Progress; p != nil {
		if attached, err := r.reattach(ctx, kd, p); err != nil || attached {
			return ctrl.Result{}, err
		}
		r.recordInterruptedRun(ctx, kd, p, now)
	}

	decision := decideRun(kd, now, r.currentUserRolesDigest(ctx, kd))
	if !decision.run {
		if decision.wait > 0 {
			ctrl.LoggerFrom(ctx).V(1).Info("Waiting before the next run", "reason", decision.reason, "wait", decision.wait)
			return ctrl.Result{RequeueAfter: decision.wait}, nil
		}
		setCertificatesCondition(kd, now)
		setProbeConditions(kd)
		var requeue time.Duration
		if kd.Status.ObservedGeneration != 0 {
			// The probe runs on the probe controller's workers (health.go);
			// this reconcile comes back for the next one.
			r.requestProbe(ctx, kd)
			requeue = r.probeInterval()
		}
		if decision.recheck > 0 && (requeue == 0 || decision.recheck < requeue) {
			// Wake up when the first certificate enters its renewal window.
			requeue = decision.recheck
		}
		if len(kd.Spec.Addons.UserRoles) > 0 && (requeue == 0 || userRolesRecheck < requeue) {
			// Look at the user roles' files again (no watch on ConfigMaps).
			requeue = userRolesRecheck
		}
		return ctrl.Result{RequeueAfter: requeue}, nil
	}
	if lost := quorumLost(kd); lost != "" {
		return r.recordHeldForQuorum(ctx, kd, lost), nil
	}
	if decision.check {
		// A drift check follows a successful run of this generation with
		// nothing else due: install.yml in check mode compares every host
		// with what that run left.
		s.check = true
		ctrl.LoggerFrom(ctx).Info("Starting a drift check", "reason", decision.reason)
		return r.startRun(ctx, s, pipeline.InstallPlaybook)
	}
	playbook, plan, err := r.decidePlaybook(ctx, kd)
	if err != nil {
		return r.recordNotStarted(ctx, kd, err, now)
	}
	s.upgrade = plan
	if plan == nil {
		playbook = choosePlaybook(kd, now)
	}
	if decision.plan {
		// The playbook the run would be, in check mode (plan.go).
		s.plan = true
		ctrl.LoggerFrom(ctx).Info("Starting a plan", "playbook", playbook, "reason", decision.reason)
		return r.startRun(ctx, s, playbook)
	}
	ctrl.LoggerFrom(ctx).Info("Starting a run", "playbook", playbook, "reason", decision.reason)
	if restorePending(kd, now) {
		// Whatever else asked for this run (restoredTrigger, or a spec
		// change made while the restore held the deployment).
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "ReapplyingAfterRestore", "Run",
			"etcd was restored (%s=%s): this run is the %s, so that Karmada's objects kao keeps (CRDs, webhook and APIService CA bundles and endpoints, RBAC, members) are as the spec and this deployment's certificates say, not as the snapshot had them",
			kaov1.RestoredAtAnnotation, kd.Annotations[kaov1.RestoredAtAnnotation], playbook)
	}
	switch decision.trigger {
	case renewalTrigger:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "CertificatesRenewing", "Renew",
			"Renewing certificates: %s; the install run re-issues what is due and restarts what uses it, one host at a time", decision.reason)
	case userRolesTrigger:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "UserRolesChanged", "Run",
			"The files of spec.addons.userRoles changed: running the install with them")
	case driftRepairTrigger:
		s.repair = true
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "DriftRepairing", "Run",
			"Repairing drift: %s", decision.reason)
	}
	return r.startRun(ctx, s, playbook)
}

// cacheIsBehind tells whether the cached object predates the status the last
// run of this process wrote, so an ended run is not mistaken for an
// interrupted one, nor run twice.
func (r *Reconciler) cacheIsBehind(kd *kaov1.KarmadaDeployment) bool {
	id := r.runs.LastEnded(kd)
	if id == "" {
		return false
	}
	if kd.Status.Progress != nil && kd.Status.Progress.RunID == id {
		return true
	}
	// A run's end is in status.lastRun, a drift check's in status.drift, a
	// plan's in status.plan.
	recorded := kd.Status.LastRun != nil && kd.Status.LastRun.ID >= id ||
		kd.Status.Drift != nil && kd.Status.Drift.RunID >= id ||
		kd.Status.Plan != nil && kd.Status.Plan.RunID >= id
	return !recorded
}

// recordInterruptedRun closes a run that a previous operator process started
// and never finished: it is recorded as cancelled and runs again at once. An
// interrupted drift check changed nothing: it is recorded as a check that
// did not finish, and the next one comes an interval later.
func (r *Reconciler) recordInterruptedRun(ctx context.Context, kd *kaov1.KarmadaDeployment, p *kaov1.RunProgress, now time.Time) {
	if p.Plan {
		// A plan changed nothing either; with nothing recorded, the
		// generation is planned again.
		ctrl.LoggerFrom(ctx).Info("Dropping an interrupted plan: it starts again", "run", p.RunID)
		kd.Status.Progress = nil
		return
	}
	if p.Check {
		ctrl.LoggerFrom(ctx).Info("Recording an interrupted drift check", "run", p.RunID)
		kd.Status.Progress = nil
		recordDrift(kd, driftOf(kd, &runner.Result{ID: p.RunID, Outcome: runner.Cancelled,
			Message: "the operator stopped during the check"}, now))
		return
	}
	msg := fmt.Sprintf("the operator stopped during run %s of %s (%d/%d tasks); kao runs it again",
		p.RunID, p.Playbook, p.TasksDone, p.TasksTotal)
	ctrl.LoggerFrom(ctx).Info("Recording an interrupted run", "run", p.RunID)
	kd.Status.LastRun = &kaov1.RunStatus{
		ID: p.RunID, Playbook: p.Playbook, Generation: kd.Generation, Result: kaov1.RunCancelled,
		Message: msg, StartTime: p.StartTime, EndTime: *pipeline.TimePtr(now),
	}
	kd.Status.Progress = nil
	setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, kaov1.RunInterruptedReason, msg)
	r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, "PlaybookInterrupted", "Run", msg)
}

// preparedRun is a run ready to start: its spec and what it records when it
// succeeds.
type preparedRun struct {
	spec   runner.Spec
	extras runExtras
}

// prepareRun reads and checks everything the run needs, in an order that
// matters: the Secrets; then the host cluster (an install needs
// karmada-apiserver's address, which it records in status.endpoint, before it
// can issue the certificate that names it; it also checks etcd's volume
// claims); the user roles before the certificates (a role that cannot be used
// changes nothing); then the certificates, the inventory, the bundle and the
// spec.
func (r *Reconciler) prepareRun(ctx context.Context, s *scope, playbook, runID, dir string, now time.Time) (*preparedRun, error) {
	kd := s.kd
	in, err := r.inputs().GatherInputs(ctx, kd)
	if err != nil {
		return nil, err
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		if in.Host, err = r.inputs().HostCluster(ctx, kd); err != nil {
			return nil, err
		}
		if playbook == pipeline.InstallPlaybook || playbook == pipeline.UpgradePlaybook {
			endpoint, err := exposeAPIServer(ctx, kd, in.Host)
			if err != nil {
				return nil, err
			}
			kd.Status.Endpoint = endpoint
			if err := claimEtcdVolumes(ctx, kd, in.Host); err != nil {
				return nil, err
			}
		}
	}
	in.UpgradeGroups = s.upgrade.inventoryGroups()
	var roles []userRole
	if playbook == pipeline.InstallPlaybook {
		if roles, err = r.loadUserRoles(ctx, kd); err != nil {
			return nil, err
		}
	}
	p := &preparedRun{}
	switch {
	case s.check:
		// A check issues nothing: it runs with the certificates the last run
		// deployed (nothing is due, or a renewal run would come first).
		in.PKI, err = r.inputs().ReadPKI(ctx, kd)
	case s.plan:
		// A plan runs with what the run would deploy, kept in memory.
		p.extras.plan = &planExtras{}
		in.PKI, p.extras.plan.Certificates, err = r.planPKI(ctx, kd, now)
	case playbook == pipeline.InstallPlaybook || playbook == pipeline.MembersPlaybook || playbook == pipeline.UpgradePlaybook:
		// A members run needs the certificates of new Pull members' agents;
		// choosePlaybook runs install.yml whenever another one is due.
		in.PKI, err = r.ensurePKI(ctx, kd, now)
	case kd.Status.Certificates != nil:
		in.PKI, err = r.inputs().ReadPKI(ctx, kd) // uninstall needs no new certificates
	}
	if err != nil {
		return nil, err
	}
	in.PKI = pipeline.WithExternalEtcd(in.PKI, in.ExternalEtcd)
	if p.spec, err = r.inputs().AssembleRun(ctx, kd, in, pipeline.RunParams{ID: runID, Dir: dir, Playbook: playbook}); err != nil {
		return nil, err
	}
	if len(roles) > 0 {
		if p.extras.userRolesDigest, err = withUserRoles(&p.spec, roles, filepath.Join(r.PlaybookDir, playbook)); err != nil {
			return nil, err
		}
	}
	if playbook == pipeline.InstallPlaybook || playbook == pipeline.MembersPlaybook {
		p.extras.agents = agentsDelivered(kd, in.PKI)
	}
	return p, nil
}

// startRun prepares the run, records it in status and starts it. Bad input
// (a missing Secret, a host the inventory rejects) is recorded as a failed
// attempt with a condition and an Event, and retried with backoff.
func (r *Reconciler) startRun(ctx context.Context, s *scope, playbook string) (ctrl.Result, error) {
	kd := s.kd
	now := r.Clock.Now()
	if why := r.runs.Queue(kd); why != "" {
		return r.recordQueued(ctx, kd, playbook, why), nil
	}
	runID := pipeline.NewRunID(now)
	dir := filepath.Join(pipeline.RunsDir(r.StateDir, kd.UID), runID)
	p, err := r.prepareRun(ctx, s, playbook, runID, dir, now)
	if err != nil {
		return r.recordNotStarted(ctx, kd, err, now)
	}
	spec, extras := p.spec, p.extras
	spec.Check, spec.Diff = s.check || s.plan, s.check || s.plan
	switch {
	case s.plan && playbook == pipeline.UpgradePlaybook:
		spec.Tags = []string{pipeline.UpgradeHostsTag}
	case s.check || s.plan:
		// The hosts' plays alone: see pipeline.HostsTag.
		spec.Tags = []string{pipeline.HostsTag}
	}
	extras.check = s.check
	if s.plan {
		extras.plan.describe(kd, spec.Groups, s.upgrade)
	}
	// A generated playbook is written when the run starts: estimate with
	// kao's own until then.
	total, _ := runner.EstimateResults(filepath.Join(r.PlaybookDir, playbook), spec.RolesPath, spec.Groups, spec.Tags)
	kd.Status.Progress = pipeline.ProgressStatus(runID, playbook, now, runner.Progress{TasksTotal: total}, now)
	kd.Status.Progress.Check, kd.Status.Progress.Plan = s.check, s.plan
	switch {
	case s.plan:
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.PlanningReason,
			fmt.Sprintf("plan %s of generation %d under way: %s in check mode, which changes nothing", runID, kd.Generation, playbook))
	case !s.check:
		// PlaybookSucceeded is about runs that change hosts; a check is in
		// status.progress and, once it ends, in status.drift.
		setRunningCondition(kd, runID, playbook)
	}
	if s.upgrade != nil && !s.plan {
		kd.Status.Upgrade = s.upgrade.status(runID, kd.Generation, now)
	}
	if s.repair && kd.Status.Drift != nil {
		kd.Status.Drift.RepairRunID = runID
	}
	// The run's own status writes start only after this one landed.
	if err := r.patchStatus(ctx, s); err != nil {
		if apierrors.IsConflict(err) {
			// A probe wrote status since the read: decide again on the newer object.
			return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
		}
		return ctrl.Result{}, err
	}
	run := &pipeline.ActiveRun{ID: runID, Playbook: playbook, Generation: kd.Generation}
	snapshot := kd.DeepCopy()
	if err := r.runs.Begin(kd, run, func(runCtx context.Context) {
		r.executeRun(runCtx, snapshot, spec, now, extras)
	}); err != nil {
		return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
	}
	if s.check {
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "DriftCheckStarted", "CheckDrift",
			"Started drift check %s: %s in check mode, which changes nothing", runID, playbook)
		return ctrl.Result{}, nil
	}
	if s.plan {
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "PlanStarted", "Plan",
			"Started plan %s of generation %d: %s in check mode, which changes nothing", runID, kd.Generation, playbook)
		return ctrl.Result{}, nil
	}
	r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "PlaybookStarted", "Run",
		"Started run %s of %s for generation %d", runID, playbook, kd.Generation)
	return ctrl.Result{}, nil
}

// recordQueued records that a run is due but waits for a slot: the
// condition says why, an Event tells once, and the end of another run wakes
// the deployment (a requeue is the fallback).
func (r *Reconciler) recordQueued(ctx context.Context, kd *kaov1.KarmadaDeployment, playbook, why string) ctrl.Result {
	msg := fmt.Sprintf("a run of %s is due and waits for a free slot: %s", playbook, why)
	if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.RunQueuedReason {
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, kaov1.RunQueuedReason, "Run", "%s", msg)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Run queued", "playbook", playbook, "reason", why)
	setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.RunQueuedReason, msg)
	return ctrl.Result{RequeueAfter: r.RunLimits.RecheckAfter()}
}

// quorumLost says why a Binary deployment's managed etcd has no quorum, by
// its last probe (the EtcdHealthy condition), or "" when it has one, was
// not probed, or was never installed (a first install that failed half-way
// is retried: its run is what starts etcd).
func quorumLost(kd *kaov1.KarmadaDeployment) string {
	if kd.Spec.Mode != kaov1.BinaryMode || kd.Spec.Etcd.Managed == nil || kd.Status.LastSuccessfulRunTime == nil {
		return ""
	}
	c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.EtcdHealthyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kaov1.EtcdQuorumLostReason {
		return ""
	}
	return c.Message
}

// recordHeldForQuorum holds a due run while etcd has lost its quorum: the
// condition says why and what to do, a Warning Event tells once, and the
// deployment is probed on, so the run starts once a quorum answers again.
func (r *Reconciler) recordHeldForQuorum(ctx context.Context, kd *kaov1.KarmadaDeployment, why string) ctrl.Result {
	// The way out comes first: a long finding is what gets cut.
	msg := pipeline.TruncateString("a run is due but held: etcd has lost its quorum, so a run would fail at etcd "+
		"and could make things worse. It starts once a quorum answers again: start the members whose hosts are up "+
		"(systemctl start karmada-etcd). If the members are gone for good: keep one surviving etcd host in spec.hosts, "+
		"name the others in spec.lostHosts, restore the latest snapshot onto it with an EtcdRestore, then give the "+
		"etcd role to three hosts again (docs/disaster-recovery.md). etcd: "+why, 1024)
	if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.RunHeldQuorumLostReason {
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.RunHeldQuorumLostReason, "Run", "%s", msg)
	}
	ctrl.LoggerFrom(ctx).Info("Run held: etcd has lost its quorum", "etcd", why)
	setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.RunHeldQuorumLostReason, msg)
	setProbeConditions(kd)
	r.requestProbe(ctx, kd)
	return ctrl.Result{RequeueAfter: r.probeInterval()}
}

// runExtras is what an install run records in status when it succeeds.
type runExtras struct {
	// userRolesDigest is the digest of the user roles the run ran.
	userRolesDigest string
	// agents are the Pull members the run delivered a karmada-agent
	// certificate to, with that certificate's expiry.
	agents map[string]metav1.Time
	// check marks a drift check, which records status.drift instead.
	check bool
	// plan marks a plan, which records status.plan instead.
	plan *planExtras
}

// Keys of a run's meta data, which a run elsewhere keeps for the operator
// process that follows it after a restart.
const (
	metaUserRolesDigest = "userRolesDigest"
	metaAgents          = "agents"
	metaGeneration      = "generation"
	metaSpec            = "spec"
	metaCheck           = "check"
	metaPlan            = "plan"
)

// meta is what a run elsewhere keeps of the extras.
func (e runExtras) meta() map[string]string {
	m := map[string]string{}
	if e.userRolesDigest != "" {
		m[metaUserRolesDigest] = e.userRolesDigest
	}
	if len(e.agents) > 0 {
		if b, err := json.Marshal(e.agents); err == nil {
			m[metaAgents] = string(b)
		}
	}
	if e.check {
		m[metaCheck] = "true"
	}
	if e.plan != nil {
		if b, err := json.Marshal(e.plan); err == nil {
			m[metaPlan] = string(b)
		}
	}
	return m
}

// runMeta keeps with a run the generation and spec it runs, so that an
// operator process that follows it after a restart records it as what it
// was, even if the spec changed since.
func runMeta(m map[string]string, kd *kaov1.KarmadaDeployment) error {
	b, err := json.Marshal(kd.Spec)
	if err != nil {
		return err
	}
	m[metaGeneration] = strconv.FormatInt(kd.Generation, 10)
	m[metaSpec] = string(b)
	return nil
}

// ranFromMeta is the deployment as a run's meta data says it ran: kd with
// the run's generation and spec.
func ranFromMeta(kd *kaov1.KarmadaDeployment, m map[string]string) (*kaov1.KarmadaDeployment, error) {
	ran := kd.DeepCopy()
	gen, err := strconv.ParseInt(m[metaGeneration], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("the run's generation %q: %w", m[metaGeneration], err)
	}
	ran.Generation = gen
	ran.Spec = kaov1.KarmadaDeploymentSpec{}
	if err := json.Unmarshal([]byte(m[metaSpec]), &ran.Spec); err != nil {
		return nil, fmt.Errorf("the run's spec: %w", err)
	}
	return ran, nil
}

// extrasFromMeta reads the extras back from a run's meta data.
func extrasFromMeta(m map[string]string) (runExtras, error) {
	e := runExtras{userRolesDigest: m[metaUserRolesDigest], check: m[metaCheck] == "true"}
	if raw := m[metaAgents]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &e.agents); err != nil {
			return e, fmt.Errorf("reading the run's Pull agents: %w", err)
		}
	}
	if raw := m[metaPlan]; raw != "" {
		e.plan = &planExtras{}
		if err := json.Unmarshal([]byte(raw), e.plan); err != nil {
			return e, fmt.Errorf("reading the plan's findings: %w", err)
		}
	}
	return e, nil
}

// runnerFor is where kd's runs take place: the remote executor, unless there
// is none or the run needs what only the operator's pod has.
func (r *Reconciler) runnerFor(kd *kaov1.KarmadaDeployment, spec runner.Spec) pipeline.PlaybookRunner {
	if r.Remote == nil || !spec.Attach && r.InProcessReason(kd) != "" {
		return r.Run
	}
	return r.Remote.Run
}

// reattach follows a run that an earlier operator process started in a Job
// and that still goes on (or ended unseen): it becomes this process's run,
// recorded as any other when it ends. It returns false when there is no
// such run, which then counts as interrupted.
func (r *Reconciler) reattach(ctx context.Context, kd *kaov1.KarmadaDeployment, p *kaov1.RunProgress) (bool, error) {
	if r.Remote == nil {
		return false, nil
	}
	owner := runner.Owner{APIVersion: kaov1.GroupVersion.String(), Kind: "KarmadaDeployment", Namespace: kd.Namespace, Name: kd.Name, UID: string(kd.UID)}
	meta, found, err := r.Remote.Find(ctx, owner, p.RunID)
	if err != nil || !found {
		return false, err
	}
	extras, err := extrasFromMeta(meta)
	if err != nil {
		return false, err
	}
	ran, err := ranFromMeta(kd, meta)
	if err != nil {
		return false, err
	}
	spec := runner.Spec{ID: p.RunID, Dir: filepath.Join(pipeline.RunsDir(r.StateDir, kd.UID), p.RunID),
		Playbook: filepath.Join(r.PlaybookDir, p.Playbook), Attach: true, Check: extras.checkMode(), Diff: extras.checkMode()}
	run := &pipeline.ActiveRun{ID: p.RunID, Playbook: p.Playbook, Generation: ran.Generation, Attached: true}
	snapshot := ran
	if err := r.runs.Begin(kd, run, func(runCtx context.Context) {
		r.executeRun(runCtx, snapshot, spec, p.StartTime.Time, extras)
	}); err != nil {
		return false, nil
	}
	ctrl.LoggerFrom(ctx).Info("Following the run an earlier operator process started in a Job", "run", p.RunID)
	r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "PlaybookReattached", "Run",
		"Following run %s of %s in its Job, started by an earlier operator process", p.RunID, p.Playbook)
	return true, nil
}

// recordNotStarted records why a run could not start, from its
// *reason.Error:
//   - Wait (a karmada-apiserver Service still waiting for its address) is no
//     failure: the condition is Unknown, an Event tells once, and kao looks
//     again after e.After;
//   - Retry (a missing Secret, a host the inventory rejects, a user role that
//     cannot be used, an unreachable host cluster, a downgrade) is a failed
//     attempt with a condition and a Warning Event, retried with backoff;
//   - Refuse is the same condition and Event with no retry: only a change of
//     the spec runs again.
//
// Other errors go back to controller-runtime.
func (r *Reconciler) recordNotStarted(ctx context.Context, kd *kaov1.KarmadaDeployment, err error, now time.Time) (ctrl.Result, error) {
	e, ok := reason.From(err)
	if !ok {
		return ctrl.Result{}, err
	}
	switch e.Kind {
	case reason.Wait:
		if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Message != e.Message {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, e.Reason, "Run", "%s", e.Message)
		}
		ctrl.LoggerFrom(ctx).V(1).Info("Waiting before the run", "reason", e.Reason, "message", e.Message)
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, e.Reason, e.Message)
		return ctrl.Result{RequeueAfter: e.After}, nil
	case reason.Refuse:
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, e.Reason, e.Message)
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, e.Reason, "Run", "%s", e.Message)
		return ctrl.Result{}, nil
	default:
		kd.Status.Retry = nextRetry(kd.Status.Retry, kd.Generation, now)
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, e.Reason, e.Message)
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, e.Reason, "Run", "%s", e.Message)
		return ctrl.Result{RequeueAfter: kd.Status.Retry.NextRetryTime.Sub(now)}, nil
	}
}

// executeRun runs the playbook, keeps status.progress current at most every
// progressInterval, then records the result, its log and an Event.
func (r *Reconciler) executeRun(ctx context.Context, kd *kaov1.KarmadaDeployment, spec runner.Spec, start time.Time, extras runExtras) {
	log := ctrl.Log.WithName("run").WithValues("KarmadaDeployment", klog.KObj(kd), "run", spec.ID)
	playbook := filepath.Base(spec.Playbook)

	status := r.statusWriter()
	base := r.runnerFor(kd, spec)
	spec.Owner = runner.Owner{APIVersion: kaov1.GroupVersion.String(), Kind: "KarmadaDeployment",
		Namespace: kd.Namespace, Name: kd.Name, UID: string(kd.UID)}
	spec.Meta = extras.meta()
	if err := runMeta(spec.Meta, kd); err != nil {
		log.Error(err, "Keeping the run's spec with it")
	}
	run, backupFailed := base, false
	if playbook == pipeline.UpgradePlaybook && !spec.Attach && extras.plan == nil {
		run = r.withUpgradeBackup(kd, base, &backupFailed)
	}
	who := metrics.Run{Namespace: kd.Namespace, Deployment: kd.Name, Playbook: metrics.PlaybookLabel(playbook, extras.check, extras.plan != nil)}
	res := pipeline.RunWithProgress(ctx, run, r.Clock, spec, start, who, status.ReportProgress(ctx, kd, spec, start, r.Clock, log))
	if res.Outcome == runner.Detached {
		// The operator stops and the run goes on in its Job: status keeps
		// showing it in progress, and the next operator process follows it.
		log.Info("Leaving the run to its Job: the operator is stopping")
		return
	}
	log.Info("Run ended", "outcome", res.Outcome, "exitCode", res.ExitCode, "message", res.Message)

	// The run's context may be cancelled (shutdown, deletion): record the end regardless.
	finalCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case extras.check:
		r.endDriftCheck(finalCtx, log, kd, spec, res)
		return
	case extras.plan != nil:
		r.endPlan(finalCtx, log, kd, spec, res, extras.plan)
		return
	}
	logName := r.Logs(r.Client, r.APIReader).KeepRunLog(finalCtx, log, kd, spec.ID, res.Log)
	// A successful run may have renewed or rotated the admin certificate:
	// the exported kubeconfig follows at once, not at the next probe (a
	// paused deployment is not probed).
	var kubeconfigRef *kaov1.SecretKeyReference
	if res.Outcome == runner.Succeeded && playbook != pipeline.UninstallPlaybook {
		exported := kd.DeepCopy()
		bundle, err := r.inputs().ReadPKI(finalCtx, exported)
		if err == nil {
			err = r.exportKubeconfig(finalCtx, exported, bundle)
		}
		if err != nil {
			log.Error(err, "Exporting the admin kubeconfig")
		}
		kubeconfigRef = exported.Status.KubeconfigSecretRef
	}
	// The claims etcd's StatefulSet made in this run get the namespace that
	// may take them over recorded (claimEtcdVolumes checks it before runs).
	if res.Outcome == runner.Succeeded && kd.Spec.Mode == kaov1.ContainerizedMode && playbook != pipeline.UninstallPlaybook {
		hc, err := r.inputs().HostCluster(finalCtx, kd)
		if err == nil {
			err = recordEtcdClaimsNamespace(finalCtx, kd, hc)
		}
		if err != nil {
			log.Error(err, "Recording the namespace of the etcd claims")
		}
	}
	now := r.Clock.Now()
	err := status.Update(finalCtx, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Status.Progress = nil
		cur.Status.LastRun = pipeline.RunStatus(res, kd.Generation, logName)
		setRunResultCondition(cur, res)
		sumUpReady(cur)
		recordMemberFailures(cur, res)
		r.recordRunVersions(cur, kd, res, backupFailed)
		switch res.Outcome {
		case runner.Succeeded:
			cur.Status.Retry = nil
			cur.Status.LastSuccessfulRunTime = pipeline.TimePtr(res.EndTime)
			if playbook == pipeline.InstallPlaybook || playbook == pipeline.UpgradePlaybook {
				cur.Status.Version = kd.Spec.Version
				cur.Status.UserRolesDigest = extras.userRolesDigest
				recordConverged(cur, spec.ID)
			}
			recordAgentsDelivered(cur, extras.agents)
			recordApplied(&cur.Status, &kd.Spec, playbook)
			if kubeconfigRef != nil {
				cur.Status.KubeconfigSecretRef = kubeconfigRef
			}
			if cur.Generation == kd.Generation {
				cur.Status.ObservedGeneration = kd.Generation
			}
		case runner.Failed:
			cur.Status.Retry = nextRetry(cur.Status.Retry, kd.Generation, now)
		}
		cur.Status.Phase = phaseFor(cur, false)
	})
	if err != nil {
		log.Error(err, "Recording the run's result")
	}
	switch res.Outcome {
	case runner.Succeeded:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "PlaybookSucceeded", "Run", "Run %s of %s succeeded", spec.ID, playbook)
	case runner.Cancelled:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "PlaybookCancelled", "Run", "Run %s of %s was cancelled", spec.ID, playbook)
	default:
		metrics.RetryScheduled(kd.Namespace, kd.Name)
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, "PlaybookFailed", "Run", "Run %s of %s failed: %s", spec.ID, playbook, res.Message)
	}
	r.runs.End(kd)
	r.forgetIfGone(finalCtx, kd, res)
}

// forgetIfGone drops the series of a deployment whose run was cancelled
// because the deployment went: the run counted its end after they were
// dropped.
func (r *Reconciler) forgetIfGone(ctx context.Context, kd *kaov1.KarmadaDeployment, res *runner.Result) {
	if res.Outcome != runner.Cancelled {
		return
	}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{}); apierrors.IsNotFound(err) {
		metrics.ForgetDeployment(kd.Namespace, kd.Name)
	}
}

// endDriftCheck records a drift check's end: status.drift, InSync and an
// Event; nothing about runs (status.lastRun, the retry, what was applied).
func (r *Reconciler) endDriftCheck(ctx context.Context, log logr.Logger, kd *kaov1.KarmadaDeployment, spec runner.Spec, res *runner.Result) {
	d := driftOf(kd, res, r.Clock.Now())
	if d.Result == kaov1.DriftInSync {
		// Nothing to look at: the check leaves neither a log nor its directory.
		if err := os.RemoveAll(spec.Dir); err != nil {
			log.Error(err, "Removing the drift check's directory")
		}
	} else {
		d.LogConfigMapName = r.Logs(r.Client, r.APIReader).KeepRunLog(ctx, log, kd, spec.ID, res.Log)
	}
	recorded := false
	err := r.statusWriter().Update(ctx, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Status.Progress = nil
		recordDrift(cur, d.DeepCopy())
		cur.Status.Phase = phaseFor(cur, false)
		recorded = true
	})
	if err != nil {
		log.Error(err, "Recording the drift check's result")
	}
	if recorded && res.Outcome != runner.Cancelled {
		// A check cancelled (the deployment deleted, the operator stopping)
		// says nothing worth a Warning.
		r.driftEvent(kd, d)
	}
	r.runs.End(kd)
	r.forgetIfGone(ctx, kd, res)
}

// statusWriter writes deployments' status.
func (r *Reconciler) statusWriter() pipeline.StatusWriter[*kaov1.KarmadaDeployment] {
	return pipeline.StatusWriter[*kaov1.KarmadaDeployment]{
		Client: r.Client, Reader: r.APIReader,
		NewObject: func() *kaov1.KarmadaDeployment { return &kaov1.KarmadaDeployment{} },
		Progress:  func(kd *kaov1.KarmadaDeployment) **kaov1.RunProgress { return &kd.Status.Progress },
	}
}
