package karmadadeployment

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// reconcileDelete runs the uninstall playbook and then releases the object.
// An install in progress is cancelled first; a failed uninstall is retried
// with backoff until it succeeds or kaov1.SkipUninstallAnnotation is set.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (ctrl.Result, error) {
	kd := s.kd
	if !controllerutil.ContainsFinalizer(kd, kaov1.FinalizerName) {
		return ctrl.Result{}, nil
	}
	setCondition(kd, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.DeletingReason, "the control plane is being removed")
	r.clusterWatches.stop(client.ObjectKeyFromObject(kd))
	if run := r.runs.Get(kd); run != nil {
		if run.Playbook != pipeline.UninstallPlaybook {
			ctrl.LoggerFrom(ctx).Info("Cancelling the run in progress: the deployment is being deleted", "run", run.ID)
			run.Cancel()
		}
		return ctrl.Result{}, nil // the run's end reconciles again
	}
	if r.cacheIsBehind(kd) {
		return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, nil
	}
	if holder, err := r.restoreHolding(ctx, kd); err != nil {
		return ctrl.Result{}, err
	} else if holder != "" {
		// Uninstalling would stop etcd and the API servers under a restore
		// that is replacing their data. The restore's end removes the
		// annotation, which wakes this reconciler.
		msg := fmt.Sprintf("waiting for EtcdRestore %s to end before removing the control plane (annotation %s)", holder, kaov1.RestoreInProgressAnnotation)
		if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ReadyCondition); c == nil || c.Message != msg {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, "UninstallWaiting", "Delete", "%s", msg)
		}
		setCondition(kd, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.DeletingReason, msg)
		return ctrl.Result{}, r.patchStatus(ctx, s)
	}
	now := r.Clock.Now()
	if p := kd.Status.Progress; p != nil {
		// A run an earlier process left in a Job is followed, so that the
		// next reconcile cancels it (or, for an uninstall, waits for it).
		if attached, err := r.reattach(ctx, kd, p); err != nil || attached {
			return ctrl.Result{RequeueAfter: pipeline.StaleCacheRequeueAfter}, err
		}
		r.recordInterruptedRun(ctx, kd, p, now)
	}
	last := kd.Status.LastRun
	switch {
	case kd.Annotations[kaov1.SkipUninstallAnnotation] == "true":
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, "UninstallSkipped", "Delete",
			"Removed without uninstalling: the %s annotation is set; services and files stay on the hosts", kaov1.SkipUninstallAnnotation)
	case last == nil:
		// Nothing ever ran, so there is nothing to remove.
	case last.Playbook == pipeline.UninstallPlaybook && last.Result == kaov1.RunSucceeded:
	default:
		if retry := kd.Status.Retry; last.Playbook == pipeline.UninstallPlaybook && retry != nil && retry.NextRetryTime != nil {
			if wait := retry.NextRetryTime.Sub(now); wait > 0 {
				return ctrl.Result{RequeueAfter: wait}, nil
			}
		}
		ctrl.LoggerFrom(ctx).Info("Starting the uninstall run")
		return r.startRun(ctx, s, pipeline.UninstallPlaybook)
	}
	if err := r.patchStatus(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	// The run directories and fact cache go with the object: a deployment
	// created later under the same name starts with nothing of this one.
	if err := removeDeploymentState(r.StateDir, kd.UID); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing the deployment's run directories and fact cache: %w", err)
	}
	controllerutil.RemoveFinalizer(kd, kaov1.FinalizerName)
	if err := r.Client.Update(ctx, kd); err != nil {
		return ctrl.Result{}, err
	}
	r.runs.Forget(kd)
	return ctrl.Result{}, nil
}

// restoreHolding names the EtcdRestore that holds the deployment
// (kaov1.RestoreInProgressAnnotation) and still exists, unless the deployment is
// removed without uninstalling: then nothing touches the hosts and there is
// nothing to wait for. An annotation naming a restore that is gone holds
// nothing.
func (r *Reconciler) restoreHolding(ctx context.Context, kd *kaov1.KarmadaDeployment) (string, error) {
	holder := kd.Annotations[kaov1.RestoreInProgressAnnotation]
	if holder == "" || kd.Annotations[kaov1.SkipUninstallAnnotation] == "true" {
		return "", nil
	}
	er := &kaov1.EtcdRestore{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: kd.Namespace, Name: holder}, er)
	switch {
	case apierrors.IsNotFound(err):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading EtcdRestore %s, which holds the deployment: %w", holder, err)
	}
	return holder, nil
}
