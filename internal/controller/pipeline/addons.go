package pipeline

import (
	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// EstimatorComponentPfx names the scheduler estimators: one per member,
// karmada-scheduler-estimator-<member>, in status and in the host cluster.
const EstimatorComponentPfx = "karmada-scheduler-estimator"

// AddonEnabled reports whether spec.addons enables a.
func AddonEnabled(a *kaov1.AddonSpec) bool { return a != nil && a.Enabled }
