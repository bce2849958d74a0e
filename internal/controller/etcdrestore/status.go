package etcdrestore

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// setRestoreCondition records a condition of an EtcdRestore at its current
// generation, with the reconciler's clock.
func setRestoreCondition(er *kaov1.EtcdRestore, now time.Time, t string, status metav1.ConditionStatus, reason, message string) {
	pipeline.SetConditionAt(&er.Status.Conditions, er.Generation, now, t, status, reason, message)
}

// setRestoreWaiting says why a restore has not started (or resumed) yet:
// Ready is False with the reason, RestoreSucceeded stays Unknown.
func setRestoreWaiting(er *kaov1.EtcdRestore, now time.Time, reason, message string) {
	setRestoreCondition(er, now, kaov1.ReadyCondition, metav1.ConditionFalse, reason, message)
	setRestoreCondition(er, now, kaov1.RestoreSucceededCondition, metav1.ConditionUnknown, reason, message)
}

// setRestoreRunning records that the restore's playbook runs.
func setRestoreRunning(er *kaov1.EtcdRestore, now time.Time, message string) {
	setRestoreCondition(er, now, kaov1.RestoreSucceededCondition, metav1.ConditionUnknown, kaov1.RunningReason, message)
	setRestoreCondition(er, now, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.RunningReason, message)
}

// setRestoreEnded records the end of a restore, for good: a restore runs once.
func setRestoreEnded(er *kaov1.EtcdRestore, now time.Time, succeeded bool, reason, message string) {
	status, phase := metav1.ConditionFalse, kaov1.RestoreFailed
	if succeeded {
		status, phase = metav1.ConditionTrue, kaov1.RestoreSucceeded
	}
	er.Status.Phase = phase
	er.Status.Progress = nil
	er.Status.CompletionTime = pipeline.TimePtr(now)
	setRestoreCondition(er, now, kaov1.RestoreSucceededCondition, status, reason, message)
	setRestoreCondition(er, now, kaov1.ReadyCondition, status, reason, message)
}
