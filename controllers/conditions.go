package controllers

import (
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
