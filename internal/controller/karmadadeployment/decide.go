package karmadadeployment

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// runTrigger is what asked for a run of an installed deployment whose spec
// has not changed, for Events.
type runTrigger int

// The zero runTrigger means the run follows from spec and status alone.
const (
	// renewalTrigger: a certificate entered its renewal window.
	renewalTrigger runTrigger = iota + 1

	// rotationTrigger: kaov1.RotateCertificatesAnnotation has a new value.
	rotationTrigger

	// userRolesTrigger: the files of spec.addons.userRoles changed.
	userRolesTrigger

	// driftCheckTrigger: spec.driftCheck's interval has passed; the run is
	// a check that changes nothing.
	driftCheckTrigger

	// driftRepairTrigger: the last drift check found drift and
	// spec.driftCheck.autoRepair is set.
	driftRepairTrigger

	// restoredTrigger: an EtcdRestore restored etcd after the last run
	// started (kaov1.RestoredAtAnnotation).
	restoredTrigger
)

// runDecision says whether a deployment without a run in progress needs one.
type runDecision struct {
	// run starts a run now.
	run bool
	// wait is how long until a failed run may be retried; zero when run is set
	// or nothing is due.
	wait time.Duration
	// recheck is how long until a certificate renewal or a drift check is
	// due, when nothing else is; zero when none is scheduled.
	recheck time.Duration
	// check makes the run a drift check: check mode, nothing changes.
	check bool
	// plan makes the run a plan of the generation (kaov1.PlanAnnotation):
	// check mode, nothing changes.
	plan bool
	// trigger says what asked for a run of an unchanged spec.
	trigger runTrigger
	// reason says why, for logs.
	reason string
}

// decideRun decides from spec and status whether to run the install playbook.
// Nothing runs while kaov1.RestoreInProgressAnnotation is set (the deployment is
// still probed). A new generation runs at once whatever happened before; a
// failed run of the current generation is retried after an exponential
// backoff kept in status, so it survives operator restarts; an interrupted
// run is repeated at once. After a successful run, the deployment runs again
// for a new value of kaov1.RotateCertificatesAnnotation, when a certificate enters
// its renewal window (status.certificateRenewal.nextRenewalTime), and when
// userRolesDigest, the digest of spec.addons.userRoles' files now, differs
// from the one the last successful run recorded, and once after an
// EtcdRestore (kaov1.RestoredAtAnnotation later than the last run's start).
// With kaov1.PlanAnnotation, a generation not applied yet is planned
// instead (decidePlan).
func decideRun(kd *kaov1.KarmadaDeployment, now time.Time, userRolesDigest string) runDecision {
	if holder := kd.Annotations[kaov1.RestoreInProgressAnnotation]; holder != "" {
		// No run while an EtcdRestore stops and replaces etcd; its end wakes the deployment.
		return runDecision{reason: fmt.Sprintf("EtcdRestore %s is restoring etcd (annotation %s)", holder, kaov1.RestoreInProgressAnnotation)}
	}
	last := kd.Status.LastRun
	if last != nil && last.Generation == kd.Generation && last.Result == kaov1.RunSucceeded {
		// A run these asked for that could not start (a Secret gone, a user
		// role's ConfigMap missing) backs off like a failed run, and is tried
		// again until one succeeds.
		if retry := kd.Status.Retry; retry != nil && retry.Generation == kd.Generation && retry.NextRetryTime != nil {
			if wait := retry.NextRetryTime.Sub(now); wait > 0 {
				return runDecision{wait: wait, reason: fmt.Sprintf("backing off after %d failed attempts", retry.Failures)}
			}
			return runDecision{run: true, reason: fmt.Sprintf("retrying after %d failed attempts", retry.Failures)}
		}
		if restorePending(kd, now) {
			at, _ := restoredAt(kd, now)
			return runDecision{run: true, trigger: restoredTrigger,
				reason: fmt.Sprintf("an EtcdRestore restored etcd at %s, after the last run started (annotation %s)",
					at.Format(time.RFC3339), kaov1.RestoredAtAnnotation)}
		}
		if req := pendingRotation(kd); req != "" {
			return runDecision{run: true, trigger: rotationTrigger,
				reason: fmt.Sprintf("annotation %s asks for a certificate rotation (%q)", kaov1.RotateCertificatesAnnotation, req)}
		}
		due, at := renewalDue(kd, now)
		if due {
			return runDecision{run: true, trigger: renewalTrigger,
				reason: fmt.Sprintf("%s entered its renewal window at %s", firstDue(kd), at.UTC().Format(time.RFC3339))}
		}
		if len(kd.Spec.Addons.UserRoles) > 0 && userRolesDigest != kd.Status.UserRolesDigest {
			return runDecision{run: true, trigger: userRolesTrigger, reason: "the files of spec.addons.userRoles changed"}
		}
		drift := decideDrift(kd, now)
		if drift.run {
			return drift
		}
		d := runDecision{reason: "the last run of this generation succeeded", recheck: drift.recheck}
		if !at.IsZero() {
			if wait := renewalWait(at, now); d.recheck == 0 || wait < d.recheck {
				d.recheck = wait
			}
		}
		return d
	}
	retry := kd.Status.Retry
	retrying := retry != nil && retry.Generation == kd.Generation && retry.NextRetryTime != nil
	if retrying {
		if wait := retry.NextRetryTime.Sub(now); wait > 0 {
			return runDecision{wait: wait, reason: fmt.Sprintf("backing off after %d failed attempts", retry.Failures)}
		}
	}
	if d, ok := decidePlan(kd); ok {
		return d
	}
	if retrying {
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

// decidePlan decides for a deployment with kaov1.PlanAnnotation whose
// generation no run applied yet (a new spec, or one whose run failed; the
// caller checks): the generation is planned once per value of the
// annotation, and then waits, applied only once the annotation is gone. ok
// is false without the annotation: then decideRun decides as usual.
func decidePlan(kd *kaov1.KarmadaDeployment) (runDecision, bool) {
	req, asked := planRequest(kd)
	if !asked {
		return runDecision{}, false
	}
	if p := kd.Status.Plan; p != nil && p.Generation == kd.Generation && p.Request == req {
		return runDecision{reason: fmt.Sprintf("generation %d is planned (status.plan); remove annotation %s to apply it",
			kd.Generation, kaov1.PlanAnnotation)}, true
	}
	return runDecision{run: true, plan: true, reason: fmt.Sprintf("annotation %s asks for a plan of generation %d instead of its run",
		kaov1.PlanAnnotation, kd.Generation)}, true
}

// decideDrift decides, for a deployment whose last run of its generation
// succeeded and that nothing else asks to run, whether a drift check or the
// repair of drift found is due (spec.driftCheck; Binary mode). A check is
// due an interval after the later of the last check and the last successful
// run; a repair once per check that found drift, and only when no
// successful run came after that check.
func decideDrift(kd *kaov1.KarmadaDeployment, now time.Time) runDecision {
	dc := kd.Spec.DriftCheck
	if dc == nil || kd.Spec.Mode != kaov1.BinaryMode {
		return runDecision{}
	}
	var lastRun time.Time
	if t := kd.Status.LastSuccessfulRunTime; t != nil {
		lastRun = t.Time
	}
	drift := kd.Status.Drift
	if drift != nil && drift.Result == kaov1.DriftDrifted && dc.AutoRepair && drift.RepairRunID == "" &&
		drift.Generation == kd.Generation && drift.CheckTime.After(lastRun) {
		return runDecision{run: true, trigger: driftRepairTrigger,
			reason: fmt.Sprintf("drift check %s found %s; spec.driftCheck.autoRepair is set", drift.RunID, driftCount(drift))}
	}
	since := lastRun
	if drift != nil && drift.CheckTime.After(since) {
		since = drift.CheckTime.Time
	}
	if wait := since.Add(dc.Interval.Duration).Sub(now); wait > 0 {
		return runDecision{recheck: wait}
	}
	return runDecision{run: true, check: true, trigger: driftCheckTrigger,
		reason: fmt.Sprintf("spec.driftCheck.interval (%s) has passed since %s", dc.Interval.Duration, since.UTC().Format(time.RFC3339))}
}

// driftCount says how many items a check found, for messages.
func driftCount(d *kaov1.DriftStatus) string {
	n := len(d.Items) + int(d.ItemsDropped)
	if n == 1 {
		return "1 drifted item"
	}
	return fmt.Sprintf("%d drifted items", n)
}

// choosePlaybook picks the playbook of a run decideRun asked for. When the
// only change since the last successful runs is in spec.members, it is
// members.yml: joining a member must not wait for the whole control plane to
// converge again (tens of seconds even when nothing changes). Everything
// else, including a new generation that changes nothing (the way to ask for
// a re-run), any certificate due for renewal and a rotation asked for, runs
// install.yml, which ends with the members too.
func choosePlaybook(kd *kaov1.KarmadaDeployment, now time.Time) string {
	applied := kd.Status.Applied
	if applied == nil || applied.ControlPlane == "" || applied.ControlPlane != controlPlaneDigest(&kd.Spec) ||
		applied.Members == membersDigest(&kd.Spec) || certificatesDue(kd, now) || pendingRotation(kd) != "" ||
		restorePending(kd, now) {
		return pipeline.InstallPlaybook
	}
	return pipeline.MembersPlaybook
}

// recordApplied notes in status what a successful run of playbook applied
// from spec.
func recordApplied(status *kaov1.KarmadaDeploymentStatus, spec *kaov1.KarmadaDeploymentSpec, playbook string) {
	switch playbook {
	case pipeline.InstallPlaybook:
		status.Applied = &kaov1.AppliedSpec{ControlPlane: controlPlaneDigest(spec), Members: membersDigest(spec)}
	case pipeline.MembersPlaybook:
		if status.Applied != nil {
			status.Applied.Members = membersDigest(spec)
		}
	}
}

// controlPlaneDigest is the SHA-256 of the spec without its members.
func controlPlaneDigest(spec *kaov1.KarmadaDeploymentSpec) string {
	s := spec.DeepCopy()
	s.Members = nil
	return digestOf(s)
}

// membersDigest is the SHA-256 of spec.members.
func membersDigest(spec *kaov1.KarmadaDeploymentSpec) string { return digestOf(spec.Members) }

func digestOf(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		// The API types always encode; a failure means "unknown", which
		// matches no recorded digest and so runs the full install.
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// certificatesDue tells whether a certificate in status is inside its
// renewal window: the next run must be an install, which renews and deploys it.
func certificatesDue(kd *kaov1.KarmadaDeployment, now time.Time) bool {
	renewBefore := renewBeforeOf(kd)
	for _, c := range kd.Status.Certificates {
		if now.Add(renewBefore).After(c.NotAfter.Time) {
			return true
		}
	}
	return false
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
		LastFailureTime: pipeline.TimePtr(now),
		NextRetryTime:   pipeline.TimePtr(now.Add(backoffDelay(failures))),
	}
}

// phaseFor summarises a deployment in one word for people.
func phaseFor(kd *kaov1.KarmadaDeployment, running bool) kaov1.Phase {
	if p := kd.Status.Progress; p != nil && (p.Check || p.Plan) {
		running = false // a drift check or a plan changes nothing: the phase is the last run's
	}
	switch {
	case !kd.DeletionTimestamp.IsZero():
		return kaov1.DeletingPhase
	case kd.Spec.Paused:
		return kaov1.PausedPhase
	case running && (kd.Status.Progress != nil && kd.Status.Progress.Playbook == pipeline.UpgradePlaybook ||
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

// restoredAt reads kaov1.RestoredAtAnnotation; ok is false when it is unset,
// not an RFC 3339 time, or later than now (a typo or another clock: taken
// as it is, it would have every run start before it, and run again).
// Those ask for nothing.
func restoredAt(kd *kaov1.KarmadaDeployment, now time.Time) (time.Time, bool) {
	v := kd.Annotations[kaov1.RestoredAtAnnotation]
	if v == "" {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil || at.After(now) {
		return time.Time{}, false
	}
	return at, true
}

// restorePending tells whether an EtcdRestore restored etcd after the last
// run started: the next run must then be the install, whatever else asks
// for it (a members-only change made while the restore held the deployment
// would otherwise run members.yml and count as the run after the restore).
func restorePending(kd *kaov1.KarmadaDeployment, now time.Time) bool {
	at, ok := restoredAt(kd, now)
	last := kd.Status.LastRun
	return ok && last != nil && at.After(last.StartTime.Time)
}
