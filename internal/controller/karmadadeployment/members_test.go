package karmadadeployment

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
)

func memberDeployment(members ...kaov1.MemberSpec) *kaov1.KarmadaDeployment {
	return &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Members: members}}
}

func member(name string, mode kaov1.SyncMode) kaov1.MemberSpec {
	return kaov1.MemberSpec{Name: name, SyncMode: mode, KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "members", Key: name}}
}

func TestObserveMembersFollowsKarmadasClusters(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC))
	kd := memberDeployment(member("a", kaov1.PushSyncMode), member("b", kaov1.PushSyncMode), member("p", kaov1.PullSyncMode))
	kd.Status.Members = []kaov1.MemberStatus{{Name: "gone", Joined: true}, {Name: "leaving", Joined: true}}
	observeMembers(kd, []probe.ClusterState{
		{Name: "a", SyncMode: "Push", Ready: true},
		{Name: "b", SyncMode: "Push", Message: "ClusterNotReachable: cluster is not reachable"},
		{Name: "leaving", SyncMode: "Push", Ready: true},
	}, nil, now)

	got := map[string]kaov1.MemberStatus{}
	for _, m := range kd.Status.Members {
		got[m.Name] = m
	}
	if a := got["a"]; !a.Joined || !a.Ready || a.Message != "" || a.KubeconfigSecretRef == nil || a.KubeconfigSecretRef.Key != "a" {
		t.Errorf("a is joined and Ready: %+v", a)
	}
	if b := got["b"]; !b.Joined || b.Ready || !strings.Contains(b.Message, "not reachable") {
		t.Errorf("b is joined, not Ready, and says why: %+v", b)
	}
	if p := got["p"]; p.Joined || p.Ready || !strings.Contains(p.Message, "karmada-agent") {
		t.Errorf("p waits for its agent: %+v", p)
	}
	if l, ok := got["leaving"]; !ok || !l.Joined || !strings.Contains(l.Message, "unjoin") {
		t.Errorf("a member left the spec but Karmada still has it: it must stay listed for the unjoin: %+v", l)
	}
	if _, ok := got["gone"]; ok {
		t.Error("a member neither in the spec nor in Karmada must leave status")
	}
	if kd.Status.ReadyMembers != "1/3" {
		t.Errorf("readyMembers %q, want 1/3", kd.Status.ReadyMembers)
	}
	c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.MembersReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "b: ClusterNotReachable") {
		t.Errorf("MembersReady: %+v", c)
	}

	// A failed list keeps what status said and says why.
	before := kd.Status.Members
	observeMembers(kd, nil, errors.New("no karmada-apiserver is ready"), now)
	if len(kd.Status.Members) != len(before) {
		t.Errorf("a failed list must not drop members: %+v", kd.Status.Members)
	}
	if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.MembersReadyCondition); c.Status != metav1.ConditionUnknown {
		t.Errorf("MembersReady after a failed list: %+v", c)
	}

	all := memberDeployment(member("a", kaov1.PushSyncMode))
	observeMembers(all, []probe.ClusterState{{Name: "a", Ready: true}}, nil, now)
	if c := meta.FindStatusCondition(all.Status.Conditions, kaov1.MembersReadyCondition); c.Status != metav1.ConditionTrue || c.Reason != kaov1.AllMembersReadyReason {
		t.Errorf("MembersReady with every member Ready: %+v", c)
	}
}

func TestRecordMemberFailuresTouchesOnlyTheFailedMember(t *testing.T) {
	kd := memberDeployment(member("a", kaov1.PushSyncMode), member("b", kaov1.PushSyncMode))
	kd.Status.Members = []kaov1.MemberStatus{{Name: "a", Joined: true, Ready: true}}
	recordMemberFailures(kd, &runner.Result{ID: "r1", FailedTasks: []runner.FailedTask{
		{Host: "member_b", Task: "Karmada members | Read the member's kube-system namespace", Message: "certificate signed by unknown authority"},
		{Host: "h1", Task: "Etcd | Start", Message: "boom"},
	}})
	if len(kd.Status.Members) != 2 {
		t.Fatalf("want a and b, got %+v", kd.Status.Members)
	}
	if a := kd.Status.Members[0]; a.Message != "" || !a.Ready {
		t.Errorf("a did not fail: %+v", a)
	}
	if b := kd.Status.Members[1]; b.Name != "b" || b.Joined || !strings.Contains(b.Message, "unknown authority") || !strings.HasPrefix(b.Message, "run r1: ") {
		t.Errorf("b must say why its join failed: %+v", b)
	}
}
