package karmadadeployment

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		want    string
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{Spec: *base.DeepCopy()}
			tc.change(&kd.Spec)
			kd.Status.Applied, kd.Status.Certificates = tc.applied, tc.certs
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
