package controllers

import (
	"fmt"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// Entry playbooks, relative to the playbook directory.
const (
	installPlaybook   = "install.yml"
	uninstallPlaybook = "uninstall.yml"
)

// runDecision says whether a deployment without a run in progress needs one.
type runDecision struct {
	// run starts a run now.
	run bool
	// wait is how long until a failed run may be retried; zero when run is set
	// or nothing is due.
	wait time.Duration
	// reason says why, for logs.
	reason string
}

// decideRun decides from spec and status whether to run the install playbook.
// Nothing runs while RestoreInProgressAnnotation is set (the deployment is
// still probed). A new generation runs at once whatever happened before; a
// failed run of the current generation is retried after an exponential
// backoff kept in status, so it survives operator restarts; an interrupted
// run is repeated at once.
func decideRun(kd *kaov1.KarmadaDeployment, now time.Time) runDecision {
	if holder := kd.Annotations[RestoreInProgressAnnotation]; holder != "" {
		// No run while an EtcdRestore stops and replaces etcd; its end wakes the deployment.
		return runDecision{reason: fmt.Sprintf("EtcdRestore %s is restoring etcd (annotation %s)", holder, RestoreInProgressAnnotation)}
	}
	last := kd.Status.LastRun
	if last != nil && last.Generation == kd.Generation && last.Result == kaov1.RunSucceeded {
		return runDecision{reason: "the last run of this generation succeeded"}
	}
	if retry := kd.Status.Retry; retry != nil && retry.Generation == kd.Generation && retry.NextRetryTime != nil {
		if wait := retry.NextRetryTime.Sub(now); wait > 0 {
			return runDecision{wait: wait, reason: fmt.Sprintf("backing off after %d failed attempts", retry.Failures)}
		}
		return runDecision{run: true, reason: fmt.Sprintf("retrying after %d failed attempts", retry.Failures)}
	}
	switch {
	case last == nil:
		return runDecision{run: true, reason: "nothing has run yet"}
	case last.Generation != kd.Generation:
		return runDecision{run: true, reason: fmt.Sprintf("spec changed (generation %d, last run applied %d)", kd.Generation, last.Generation)}
	}
	return runDecision{run: true, reason: "the last run did not finish"}
}

// backoffDelay is the wait after the given number of consecutive failures:
// retryBase doubled for each failure after the first, at most retryCap.
func backoffDelay(failures int32) time.Duration {
	d := retryBase
	for i := int32(1); i < failures && d < retryCap; i++ {
		d *= 2
	}
	if d > retryCap {
		d = retryCap
	}
	return d
}

// nextRetry records a failed run of the given generation in the retry status.
func nextRetry(prev *kaov1.RetryStatus, generation int64, now time.Time) *kaov1.RetryStatus {
	failures := int32(1)
	if prev != nil && prev.Generation == generation {
		failures = prev.Failures + 1
	}
	return &kaov1.RetryStatus{
		Failures:        failures,
		Generation:      generation,
		LastFailureTime: timePtr(now),
		NextRetryTime:   timePtr(now.Add(backoffDelay(failures))),
	}
}

// phaseFor summarises a deployment in one word for people.
func phaseFor(kd *kaov1.KarmadaDeployment, running bool) kaov1.Phase {
	switch {
	case !kd.DeletionTimestamp.IsZero():
		return kaov1.DeletingPhase
	case kd.Spec.Paused:
		return kaov1.PausedPhase
	case running && (kd.Status.Progress != nil && kd.Status.Progress.Playbook == upgradePlaybook ||
		kd.Status.Version != "" && kd.Status.Version != kd.Spec.Version):
		return kaov1.UpgradingPhase
	case running:
		return kaov1.InstallingPhase
	}
	last := kd.Status.LastRun
	switch {
	case last == nil:
		return kaov1.PendingPhase
	case last.Result != kaov1.RunSucceeded:
		return kaov1.FailedPhase
	case conditionIsFalse(kd.Status.Conditions, kaov1.ReadyCondition):
		return kaov1.DegradedPhase
	}
	return kaov1.RunningPhase
}
