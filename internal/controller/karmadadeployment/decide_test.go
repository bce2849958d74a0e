package karmadadeployment

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// TestChoosePlaybookRunsMembersOnlyForMemberChanges proves that a change of
// spec.members alone runs members.yml, and that everything else, including
// a re-run asked for with an unchanged spec and a certificate due for
// renewal, runs the full install.
func TestChoosePlaybookRunsMembersOnlyForMemberChanges(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	base := kaov1.KarmadaDeploymentSpec{
		Mode: kaov1.BinaryMode, Version: "v1.18.1",
		Hosts:   []kaov1.Host{{Name: "node1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.APIServerRole}}},
		Members: []kaov1.MemberSpec{{Name: "a", SyncMode: kaov1.PushSyncMode}},
	}
	applied := &kaov1.AppliedSpec{ControlPlane: controlPlaneDigest(&base), Members: membersDigest(&base)}
	fresh := []kaov1.CertificateStatus{{Name: "apiserver", NotAfter: metav1.NewTime(now.Add(365 * 24 * time.Hour))}}
	expiring := []kaov1.CertificateStatus{{Name: "apiserver", NotAfter: metav1.NewTime(now.Add(24 * time.Hour))}}
	tests := []struct {
		name string
		// change edits a copy of base into the deployment's spec.
		change func(*kaov1.KarmadaDeploymentSpec)
		// applied is status.applied; certs is status.certificates.
		applied *kaov1.AppliedSpec
		certs   []kaov1.CertificateStatus
		// restored sets kao.io/restored-at after the last run's start.
		restored bool
		want     string
	}{
		{name: "nothing applied yet", change: addMember, want: pipeline.InstallPlaybook},
		{name: "a member added", change: addMember, applied: applied, certs: fresh, want: pipeline.MembersPlaybook},
		{name: "a member removed", change: func(s *kaov1.KarmadaDeploymentSpec) { s.Members = nil }, applied: applied, certs: fresh, want: pipeline.MembersPlaybook},
		{name: "a member's region changed", change: func(s *kaov1.KarmadaDeploymentSpec) { s.Members[0].Region = "eu" }, applied: applied, certs: fresh, want: pipeline.MembersPlaybook},
		{name: "the same spec again: a re-run", change: func(*kaov1.KarmadaDeploymentSpec) {}, applied: applied, certs: fresh, want: pipeline.InstallPlaybook},
		{name: "the version changed", change: func(s *kaov1.KarmadaDeploymentSpec) { s.Version = "v1.18.2" }, applied: applied, certs: fresh, want: pipeline.InstallPlaybook},
		{name: "members and a host changed", change: func(s *kaov1.KarmadaDeploymentSpec) {
			addMember(s)
			s.Hosts[0].Address = "10.0.0.2"
		}, applied: applied, certs: fresh, want: pipeline.InstallPlaybook},
		{name: "a member added while a certificate is due", change: addMember, applied: applied, certs: expiring, want: pipeline.InstallPlaybook},
		{name: "the install never recorded the control plane", change: addMember, applied: &kaov1.AppliedSpec{Members: applied.Members}, certs: fresh, want: pipeline.InstallPlaybook},
		{name: "a member added while a restore held the deployment", change: addMember, applied: applied, certs: fresh, restored: true, want: pipeline.InstallPlaybook},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{Spec: *base.DeepCopy()}
			tc.change(&kd.Spec)
			kd.Status.Applied, kd.Status.Certificates = tc.applied, tc.certs
			kd.Status.LastRun = &kaov1.RunStatus{Result: kaov1.RunSucceeded, StartTime: metav1.NewTime(now.Add(-time.Hour))}
			if tc.restored {
				kd.Annotations = map[string]string{kaov1.RestoredAtAnnotation: now.Add(-time.Minute).Format(time.RFC3339)}
			}
			if got := choosePlaybook(kd, now); got != tc.want {
				t.Errorf("choosePlaybook = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestRecordAppliedFollowsThePlaybook proves what each successful run
// records: an install both digests, a members run only the members', and
// an uninstall nothing.
func TestRecordAppliedFollowsThePlaybook(t *testing.T) {
	spec := &kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Version: "v1.18.1"}
	st := &kaov1.KarmadaDeploymentStatus{}
	recordApplied(st, spec, pipeline.MembersPlaybook)
	if st.Applied != nil {
		t.Fatalf("a members run before any install recorded %+v", st.Applied)
	}
	recordApplied(st, spec, pipeline.InstallPlaybook)
	if st.Applied == nil || st.Applied.ControlPlane != controlPlaneDigest(spec) || st.Applied.Members != membersDigest(spec) {
		t.Fatalf("the install recorded %+v", st.Applied)
	}
	cp := st.Applied.ControlPlane
	withMember := spec.DeepCopy()
	addMember(withMember)
	withMember.Version = "v9.9.9" // a members run applies no control-plane change, whatever the spec says
	recordApplied(st, withMember, pipeline.MembersPlaybook)
	if st.Applied.ControlPlane != cp || st.Applied.Members != membersDigest(withMember) {
		t.Errorf("the members run recorded %+v", st.Applied)
	}
	before := *st.Applied
	recordApplied(st, spec, pipeline.UninstallPlaybook)
	if *st.Applied != before {
		t.Errorf("the uninstall changed status.applied to %+v", st.Applied)
	}
}

func addMember(s *kaov1.KarmadaDeploymentSpec) {
	s.Members = append(s.Members, kaov1.MemberSpec{Name: "b", SyncMode: kaov1.PushSyncMode})
}

// TestDriftChecksComeAnIntervalAfterTheLastCheckOrRun: decideRun starts a
// drift check once spec.driftCheck.interval has passed since the later of
// the last successful run and the last check, never while anything else is
// due or for Containerized mode; autoRepair runs the install once per check
// that found drift.
func TestDriftChecksComeAnIntervalAfterTheLastCheckOrRun(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	at := func(d time.Duration) *metav1.Time { t := ago(d); return &t }
	deployment := func(change func(*kaov1.KarmadaDeployment)) *kaov1.KarmadaDeployment {
		kd := &kaov1.KarmadaDeployment{
			ObjectMeta: metav1.ObjectMeta{Generation: 3},
			Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Version: "v1.18.1",
				DriftCheck: &kaov1.DriftCheckSpec{Interval: metav1.Duration{Duration: 30 * time.Minute}}},
			Status: kaov1.KarmadaDeploymentStatus{
				LastRun:               &kaov1.RunStatus{ID: "r1", Generation: 3, Result: kaov1.RunSucceeded},
				LastSuccessfulRunTime: at(40 * time.Minute),
			},
		}
		change(kd)
		return kd
	}
	drifted := func(checked time.Duration) *kaov1.DriftStatus {
		return &kaov1.DriftStatus{RunID: "c1", Generation: 3, CheckTime: ago(checked), Result: kaov1.DriftDrifted,
			Items: []kaov1.DriftItem{{Host: "node1", Kind: kaov1.DriftService, Task: "start", Item: "karmada-scheduler.service"}}}
	}
	for _, tc := range []struct {
		name          string
		change        func(*kaov1.KarmadaDeployment)
		run, check    bool
		trigger       runTrigger
		recheckAtMost time.Duration
	}{
		{name: "off", change: func(kd *kaov1.KarmadaDeployment) { kd.Spec.DriftCheck = nil }},
		{name: "an interval after the last run", change: func(*kaov1.KarmadaDeployment) {}, run: true, check: true, trigger: driftCheckTrigger},
		{name: "not yet: the run was 10m ago", change: func(kd *kaov1.KarmadaDeployment) { kd.Status.LastSuccessfulRunTime = at(10 * time.Minute) },
			recheckAtMost: 20 * time.Minute},
		{name: "not yet: the last check was 5m ago", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = &kaov1.DriftStatus{RunID: "c1", Generation: 3, CheckTime: ago(5 * time.Minute), Result: kaov1.DriftInSync}
		}, recheckAtMost: 25 * time.Minute},
		{name: "a failed check waits an interval too", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = &kaov1.DriftStatus{RunID: "c1", Generation: 3, CheckTime: ago(time.Minute), Result: kaov1.DriftCheckFailed}
		}, recheckAtMost: 29 * time.Minute},
		{name: "drift found, no autoRepair: the next check an interval later", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = drifted(time.Minute)
		}, recheckAtMost: 29 * time.Minute},
		{name: "drift found with autoRepair: a repair run", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = drifted(time.Minute)
			kd.Spec.DriftCheck.AutoRepair = true
		}, run: true, trigger: driftRepairTrigger},
		{name: "the repair started already", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = drifted(time.Minute)
			kd.Status.Drift.RepairRunID = "r2"
			kd.Spec.DriftCheck.AutoRepair = true
		}, recheckAtMost: 29 * time.Minute},
		{name: "a run succeeded after the check: nothing to repair", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Drift = drifted(10 * time.Minute)
			kd.Status.LastSuccessfulRunTime = at(2 * time.Minute)
			kd.Spec.DriftCheck.AutoRepair = true
		}, recheckAtMost: 28 * time.Minute},
		{name: "a certificate due first", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.CertificateRenewal = &kaov1.CertificateRenewalStatus{NextRenewalTime: at(time.Second)}
		}, run: true, trigger: renewalTrigger},
		{name: "the spec changed: a run, not a check", change: func(kd *kaov1.KarmadaDeployment) { kd.Generation = 4 }, run: true},
		{name: "the last run failed: its retry, not a check", change: func(kd *kaov1.KarmadaDeployment) {
			kd.Status.LastRun.Result = kaov1.RunFailed
			kd.Status.Retry = &kaov1.RetryStatus{Failures: 1, Generation: 3, NextRetryTime: at(-time.Minute)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kd := deployment(tc.change)
			d := decideRun(kd, now, "")
			if d.run != tc.run || d.check != tc.check || d.trigger != tc.trigger {
				t.Fatalf("decideRun = %+v, want run %v, check %v, trigger %v", d, tc.run, tc.check, tc.trigger)
			}
			if tc.recheckAtMost > 0 && (d.recheck <= 0 || d.recheck > tc.recheckAtMost) {
				t.Errorf("recheck in %s, want within %s", d.recheck, tc.recheckAtMost)
			}
		})
	}
}

// TestARestoreRunsTheInstallOnce proves that a restore's kao.io/restored-at
// later than the last run's start runs the install once, with its own
// trigger, and that once a run started after it (or while the restore still
// holds the deployment, or with a value that is not a time) nothing runs.
func TestARestoreRunsTheInstallOnce(t *testing.T) {
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	started := metav1.NewTime(now.Add(-time.Hour))
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		run         bool
		trigger     runTrigger
	}{
		{name: "no restore"},
		{name: "restored after the last run started",
			annotations: map[string]string{kaov1.RestoredAtAnnotation: now.Add(-time.Minute).Format(time.RFC3339)},
			run:         true, trigger: restoredTrigger},
		{name: "the run after the restore started already",
			annotations: map[string]string{kaov1.RestoredAtAnnotation: now.Add(-2 * time.Hour).Format(time.RFC3339)}},
		{name: "restored in the second the last run started",
			annotations: map[string]string{kaov1.RestoredAtAnnotation: started.Format(time.RFC3339)}},
		{name: "a restore holds the deployment again",
			annotations: map[string]string{kaov1.RestoredAtAnnotation: now.Add(-time.Minute).Format(time.RFC3339),
				kaov1.RestoreInProgressAnnotation: "again"}},
		{name: "not a time", annotations: map[string]string{kaov1.RestoredAtAnnotation: "yesterday"}},
		// A time to come would have every run start before it, again and again.
		{name: "later than now", annotations: map[string]string{kaov1.RestoredAtAnnotation: now.Add(time.Hour).Format(time.RFC3339)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{
				ObjectMeta: metav1.ObjectMeta{Generation: 3, Annotations: tc.annotations},
				Spec:       kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Version: "v1.18.1"},
				Status: kaov1.KarmadaDeploymentStatus{
					LastRun: &kaov1.RunStatus{ID: "r1", Generation: 3, Result: kaov1.RunSucceeded, StartTime: started},
				},
			}
			d := decideRun(kd, now, "")
			if d.run != tc.run || d.trigger != tc.trigger || d.check {
				t.Fatalf("decideRun = %+v, want run %v, trigger %v", d, tc.run, tc.trigger)
			}
		})
	}
}

// TestAPlannedGenerationWaitsForTheAnnotationToGo proves the decisions
// kaov1.PlanAnnotation makes: a generation no run applied is planned once
// per value of the annotation instead of run, also after a failed run
// (once its backoff is over), and then nothing runs until the annotation
// is removed; a generation already applied is decided as without it.
func TestAPlannedGenerationWaitsForTheAnnotationToGo(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	succeeded := func(gen int64) *kaov1.RunStatus {
		return &kaov1.RunStatus{Generation: gen, Result: kaov1.RunSucceeded, StartTime: metav1.NewTime(now.Add(-time.Hour))}
	}
	planned := func(gen int64, req string) *kaov1.PlanStatus {
		return &kaov1.PlanStatus{Generation: gen, Request: req, Result: kaov1.PlanPlanned}
	}
	tests := []struct {
		name       string
		annotation *string
		last       *kaov1.RunStatus
		plan       *kaov1.PlanStatus
		retry      *kaov1.RetryStatus
		run, plans bool
		waits      bool
	}{
		{name: "no annotation: a new generation runs", last: succeeded(1), run: true},
		{name: "a new generation is planned", annotation: ptr.To("true"), last: succeeded(1), run: true, plans: true},
		{name: "the first install is planned", annotation: ptr.To("true"), run: true, plans: true},
		{name: "a planned generation waits", annotation: ptr.To("true"), last: succeeded(1), plan: planned(2, "true")},
		{name: "an empty value works as any", annotation: ptr.To(""), last: succeeded(1), plan: planned(2, "")},
		{name: "a new value plans again", annotation: ptr.To("again"), last: succeeded(1), plan: planned(2, "true"), run: true, plans: true},
		{name: "the plan of an older generation", annotation: ptr.To("true"), last: succeeded(1), plan: planned(1, "true"), run: true, plans: true},
		{name: "a failed plan waits too, until a new value", annotation: ptr.To("true"), last: succeeded(1),
			plan: &kaov1.PlanStatus{Generation: 2, Request: "true", Result: kaov1.PlanFailed}},
		{name: "a failed run backs off", annotation: ptr.To("true"), last: &kaov1.RunStatus{Generation: 2, Result: kaov1.RunFailed},
			retry: &kaov1.RetryStatus{Generation: 2, Failures: 1, NextRetryTime: pipeline.TimePtr(now.Add(time.Minute))}, waits: true},
		{name: "then its retry is a plan", annotation: ptr.To("true"), last: &kaov1.RunStatus{Generation: 2, Result: kaov1.RunFailed},
			retry: &kaov1.RetryStatus{Generation: 2, Failures: 1, NextRetryTime: pipeline.TimePtr(now.Add(-time.Minute))}, run: true, plans: true},
		{name: "an applied generation is decided as without it", annotation: ptr.To("true"), last: succeeded(2), plan: planned(2, "true")},
		{name: "the annotation removed: the planned generation runs", last: succeeded(1), plan: planned(2, "true"), run: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{}
			kd.Generation = 2
			if tc.annotation != nil {
				kd.Annotations = map[string]string{kaov1.PlanAnnotation: *tc.annotation}
			}
			kd.Status.LastRun, kd.Status.Plan, kd.Status.Retry = tc.last, tc.plan, tc.retry
			d := decideRun(kd, now, "")
			if d.run != tc.run || d.plan != tc.plans || (d.wait > 0) != tc.waits {
				t.Errorf("run %v, plan %v, wait %s (%s); want run %v, plan %v, waits %v", d.run, d.plan, d.wait, d.reason, tc.run, tc.plans, tc.waits)
			}
		})
	}
}
