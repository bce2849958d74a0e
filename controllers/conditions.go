package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// setUnknownIfMissing records a condition as Unknown on an object's first
// visit, so every condition kao owns is present from the start. Conditions
// that already exist are left as they are.
func setUnknownIfMissing(conds *[]metav1.Condition, generation int64, reason, message string, types ...string) {
	for _, t := range types {
		if meta.FindStatusCondition(*conds, t) != nil {
			continue
		}
		meta.SetStatusCondition(conds, metav1.Condition{
			Type:               t,
			Status:             metav1.ConditionUnknown,
			ObservedGeneration: generation,
			Reason:             reason,
			Message:            message,
		})
	}
}

// setConditionAt records a condition at the object's generation with the
// reconciler's clock; the transition time is kept when the status does not
// change. The message is cut to 1024 bytes.
func setConditionAt(conds *[]metav1.Condition, generation int64, now time.Time, t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               t,
		Status:             status,
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
		Reason:             reason,
		Message:            truncateString(message, 1024),
	})
}
