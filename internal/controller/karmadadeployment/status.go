package karmadadeployment

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

// deploymentConditions are the conditions kao owns on a KarmadaDeployment.
var deploymentConditions = []string{
	kaov1.ReadyCondition, kaov1.ControlPlaneReadyCondition, kaov1.EtcdHealthyCondition,
	kaov1.MembersReadyCondition, kaov1.PlaybookSucceededCondition, kaov1.CertificatesValidCondition,
	kaov1.PausedCondition,
}

func conditionIsFalse(conds []metav1.Condition, t string) bool {
	c := meta.FindStatusCondition(conds, t)
	return c != nil && c.Status == metav1.ConditionFalse
}

// conditionIsUnknown is true for a condition that is Unknown or missing.
func conditionIsUnknown(conds []metav1.Condition, t string) bool {
	c := meta.FindStatusCondition(conds, t)
	return c == nil || c.Status == metav1.ConditionUnknown
}

// setCondition records a condition at the object's current generation.
func setCondition(kd *kaov1.KarmadaDeployment, t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&kd.Status.Conditions, metav1.Condition{
		Type:               t,
		Status:             status,
		ObservedGeneration: kd.Generation,
		Reason:             reason,
		Message:            message,
	})
}

// setPausedCondition mirrors spec.paused.
func setPausedCondition(kd *kaov1.KarmadaDeployment) {
	if kd.Spec.Paused {
		setCondition(kd, kaov1.PausedCondition, metav1.ConditionTrue, kaov1.PausedReason,
			"spec.paused is true: kao starts no runs; a run in progress finishes")
		return
	}
	setCondition(kd, kaov1.PausedCondition, metav1.ConditionFalse, kaov1.NotPausedReason, "")
}

// setRunningCondition records that a run has started.
func setRunningCondition(kd *kaov1.KarmadaDeployment, runID, playbook string) {
	setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.RunningReason,
		fmt.Sprintf("run %s of %s is in progress", runID, playbook))
}

// setRunResultCondition records how the last run ended.
func setRunResultCondition(kd *kaov1.KarmadaDeployment, res *runner.Result) {
	switch res.Outcome {
	case runner.Succeeded:
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionTrue, kaov1.RunSucceededReason,
			fmt.Sprintf("run %s of %s succeeded", res.ID, res.Playbook))
	case runner.Cancelled:
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, kaov1.RunInterruptedReason,
			fmt.Sprintf("run %s of %s was cancelled", res.ID, res.Playbook))
	default:
		reason := kaov1.RunFailedReason
		for _, s := range res.Hosts {
			if s.Unreachable > 0 {
				reason = kaov1.HostUnreachableReason
			}
		}
		setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, reason,
			fmt.Sprintf("run %s of %s failed: %s", res.ID, res.Playbook, res.Message))
	}
}

// sumUpReady sums Ready up again from the other conditions as they are
// now, unless no probe could judge the control plane yet (Ready missing or
// Unknown: the next probe decides). It tells whether it did. Ready is left
// as it was during a run; where a run ends, and where a Cluster watch
// changes MembersReady outside runs, Ready must follow at once: otherwise
// status said Ready with a member not Ready until the next probe.
func sumUpReady(kd *kaov1.KarmadaDeployment) bool {
	if conditionIsUnknown(kd.Status.Conditions, kaov1.ReadyCondition) {
		return false
	}
	setReadyCondition(kd)
	return true
}

// setProbeConditions sets the conditions no probe decides: MembersReady
// holds while spec.members is empty. observe then sets those its probes
// decide.
func setProbeConditions(kd *kaov1.KarmadaDeployment) {
	if len(kd.Spec.Members) == 0 {
		setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.NoMembersReason, "spec.members is empty")
	}
}
