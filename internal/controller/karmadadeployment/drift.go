package karmadadeployment

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/drift"
	"github.com/kao-io/kao/internal/runner"
)

// driftOf is what a drift check of ran (the deployment as the check ran it)
// found, as status.drift shows it.
func driftOf(ran *kaov1.KarmadaDeployment, res *runner.Result, now time.Time) *kaov1.DriftStatus {
	d := &kaov1.DriftStatus{RunID: res.ID, Generation: ran.Generation, CheckTime: metav1.NewTime(now)}
	switch res.Outcome {
	case runner.Succeeded:
		d.Items, d.ItemsDropped = drift.Items(res.Changes, res.ChangesDropped)
		if len(d.Items) == 0 && d.ItemsDropped == 0 {
			d.Result = kaov1.DriftInSync
			d.Message = fmt.Sprintf("check %s: a run would change nothing on any host", res.ID)
			break
		}
		d.Result = kaov1.DriftDrifted
		d.Message = fmt.Sprintf("check %s found %s on %s: %s", res.ID, driftCount(d), driftHosts(d.Items), driftSummary(d.Items))
	default:
		d.Result = kaov1.DriftCheckFailed
		d.Message = fmt.Sprintf("check %s did not finish, so drift is unknown: %s", res.ID, res.Message)
	}
	d.Message = pipeline.TruncateString(d.Message, 1024)
	return d
}

// recordDrift writes a check's result into cur's status: status.drift and
// the InSync condition.
func recordDrift(cur *kaov1.KarmadaDeployment, d *kaov1.DriftStatus) {
	switch d.Result {
	case kaov1.DriftInSync:
		setCondition(cur, kaov1.InSyncCondition, metav1.ConditionTrue, kaov1.NoDriftReason, d.Message)
	case kaov1.DriftDrifted:
		setCondition(cur, kaov1.InSyncCondition, metav1.ConditionFalse, kaov1.DriftDetectedReason, d.Message)
	default:
		setCondition(cur, kaov1.InSyncCondition, metav1.ConditionUnknown, kaov1.DriftCheckFailedReason, d.Message)
	}
	cur.Status.Drift = d
}

// driftEvent tells people what a drift check found, when it found drift or
// could not finish.
func (r *Reconciler) driftEvent(kd *kaov1.KarmadaDeployment, d *kaov1.DriftStatus) {
	switch d.Result {
	case kaov1.DriftDrifted:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.DriftDetectedReason, "CheckDrift", "%s", d.Message)
	case kaov1.DriftCheckFailed:
		r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.DriftCheckFailedReason, "CheckDrift", "%s", d.Message)
	}
}

// driftHosts names the hosts that drifted.
func driftHosts(items []kaov1.DriftItem) string {
	var hosts []string
	seen := map[string]bool{}
	for _, it := range items {
		if !seen[it.Host] {
			seen[it.Host] = true
			hosts = append(hosts, it.Host)
		}
	}
	return strings.Join(hosts, ", ")
}

// driftSummary lists the first items in words.
func driftSummary(items []kaov1.DriftItem) string {
	const shown = 5
	var parts []string
	for i, it := range items {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more", len(items)-shown))
			break
		}
		what := it.Item
		if what == "" {
			what = it.Task
		}
		parts = append(parts, fmt.Sprintf("%s %s on %s", strings.ToLower(string(it.Kind)), what, it.Host))
	}
	return strings.Join(parts, "; ")
}

// recordConverged notes, after a successful run that applied the whole
// spec, that the hosts are as the spec asks: InSync is True until the next
// check says otherwise. Only deployments with drift checks carry InSync.
func recordConverged(cur *kaov1.KarmadaDeployment, runID string) {
	if cur.Spec.DriftCheck == nil {
		meta.RemoveStatusCondition(&cur.Status.Conditions, kaov1.InSyncCondition)
		return
	}
	setCondition(cur, kaov1.InSyncCondition, metav1.ConditionTrue, kaov1.ConvergedReason,
		fmt.Sprintf("run %s put every host in the state the spec asks for", runID))
}
