package karmadadeployment

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/status"
)

// Probing an installed control plane (observe) waits on the network: a plane
// whose hosts do not answer costs every probe's timeout, some 20 seconds. So
// probes run in a controller of their own, "karmadadeployment-health", with
// its own workers (Options.MaxConcurrentProbes), and the reconciles that
// decide and start runs never wait for one. When the KarmadaDeployment
// reconciler finds nothing to run it asks for a probe, which is queued
// (several asks for one deployment are one probe) and written to status
// when it ends, in a patch of its own. A data centre whose planes are all
// down then slows only the probes of its own planes, not the installs,
// upgrades and member joins of the others.

// probeQueueSize bounds the probe requests waiting to be queued. The
// channel's source moves them to the workqueue at once; a request that finds
// it full is dropped, and the deployment's next periodic reconcile asks again.
const probeQueueSize = 1024

// healthReconciler probes installed control planes and writes what the
// probes found: the health conditions, status.components, status.etcd,
// status.members and the admin kubeconfig. It shares the KarmadaDeployment
// reconciler's settings, probers and run tracker.
type healthReconciler struct{ *Reconciler }

// setupHealth registers the probe controller.
func (r *Reconciler) setupHealth(mgr ctrl.Manager) error {
	r.probeRequests = make(chan event.TypedGenericEvent[client.Object], probeQueueSize)
	workers := r.MaxConcurrentProbes
	if workers <= 0 {
		workers = pipeline.DefaultMaxConcurrentProbes
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("karmadadeployment-health").
		WatchesRawSource(source.Channel(r.probeRequests, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(&healthReconciler{r})
}

// requestProbe asks for a probe of kd without waiting for it.
func (r *Reconciler) requestProbe(ctx context.Context, kd *kaov1.KarmadaDeployment) {
	if r.probeRequests == nil {
		return
	}
	select {
	case r.probeRequests <- event.TypedGenericEvent[client.Object]{Object: kd}:
	default:
		ctrl.LoggerFrom(ctx).V(1).Info("Probe queue full; the next periodic reconcile asks again")
	}
}

// Reconcile probes one deployment's control plane. A deployment being
// deleted, paused (as an SRE holds kao), or with a run in progress is left
// alone: the run's end, or the end of the pause, asks for a probe again. The status patch fails on a conflict, so a probe never
// overwrites what a run or the other reconciler wrote since the read; it is
// then probed again a moment later, from the newer object.
func (h *healthReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kd := &kaov1.KarmadaDeployment{}
	if err := h.Client.Get(ctx, req.NamespacedName, kd); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !kd.DeletionTimestamp.IsZero() || kd.Spec.Paused || h.runs.Get(kd) != nil || kd.Status.Progress != nil {
		return ctrl.Result{}, nil
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("KarmadaDeployment", klog.KObj(kd)))
	patcher := status.NewPatcher(h.Client, kd, deploymentStatus, true)
	before := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ControlPlaneReadyCondition).DeepCopy()
	h.observe(ctx, kd)
	kd.Status.Phase = phaseFor(kd, false)
	if err := patcher.Patch(ctx); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
		}
		return ctrl.Result{}, err
	}
	// After the patch, so that a probe retried on a conflict tells once.
	after := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ControlPlaneReadyCondition)
	if e, ok := availabilityEvent(before, after); ok {
		h.Recorder.Eventf(kd, nil, e.kind, e.reason, "Probe", "%s", e.note)
	}
	return ctrl.Result{}, nil
}

// componentEvent is an Event about the components of a control plane.
type componentEvent struct{ kind, reason, note string }

// availabilityEvent says what Event, if any, tells an SRE that components
// lost their last instance or got one back, from ControlPlaneReady before and
// after a probe: a Warning when it turns ComponentsUnavailable or names other
// components than it did (its message says what stops meanwhile), a Normal
// Event when it leaves that reason.
func availabilityEvent(before, after *metav1.Condition) (componentEvent, bool) {
	if after == nil {
		return componentEvent{}, false
	}
	wasDown := before != nil && before.Reason == kaov1.ComponentsUnavailableReason
	switch {
	case after.Reason == kaov1.ComponentsUnavailableReason && (!wasDown || missingComponents(before.Message) != missingComponents(after.Message)):
		return componentEvent{corev1.EventTypeWarning, kaov1.ComponentsUnavailableReason, pipeline.TruncateString(after.Message, 1024)}, true
	case wasDown && after.Reason != kaov1.ComponentsUnavailableReason:
		return componentEvent{corev1.EventTypeNormal, "ComponentsAvailable",
			pipeline.TruncateString("every component has an instance that answers again: "+after.Message, 1024)}, true
	}
	return componentEvent{}, false
}

// missingComponents is the part of a ComponentsUnavailable message that
// names the components without an instance (setControlPlaneReady).
func missingComponents(msg string) string {
	names, _, _ := strings.Cut(msg, " answers on any host")
	return names
}
