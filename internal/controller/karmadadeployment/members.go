package karmadadeployment

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
)

// memberHostPrefix is how the inventory names a member's host.
const memberHostPrefix = "member_"

// recordMemberFailures writes, after a run, why a member's join or unjoin
// failed into its status entry; the other members are not touched. Whether
// a member is joined is not decided here: observe reads it from Karmada.
func recordMemberFailures(kd *kaov1.KarmadaDeployment, res *runner.Result) {
	failed := map[string]string{}
	for _, f := range res.FailedTasks {
		name, ok := strings.CutPrefix(f.Host, memberHostPrefix)
		if !ok {
			continue
		}
		if _, seen := failed[name]; !seen {
			failed[name] = pipeline.TruncateString(fmt.Sprintf("run %s: %s: %s", res.ID, f.Task, f.Message), 512)
		}
	}
	// A member this run handled without failure loses an older run's message.
	for i, m := range kd.Status.Members {
		if st, ran := res.Hosts[memberHostPrefix+m.Name]; ran && st.Failures == 0 && st.Unreachable == 0 {
			if _, f := failed[m.Name]; !f && strings.HasPrefix(m.Message, "run ") {
				kd.Status.Members[i].Message = ""
			}
		}
	}
	inSpec := map[string]kaov1.MemberSpec{}
	for _, m := range kd.Spec.Members {
		inSpec[m.Name] = m
	}
	for name, msg := range failed {
		i := memberIndex(kd.Status.Members, name)
		if i < 0 {
			m, ok := inSpec[name]
			if !ok {
				continue
			}
			kd.Status.Members = append(kd.Status.Members, kaov1.MemberStatus{Name: name, SyncMode: m.SyncMode})
			i = len(kd.Status.Members) - 1
		}
		kd.Status.Members[i].Message = msg
	}
}

func memberIndex(members []kaov1.MemberStatus, name string) int {
	for i, m := range members {
		if m.Name == name {
			return i
		}
	}
	return -1
}

// observeMembers sets status.members, status.readyMembers and MembersReady
// from Karmada's Cluster objects: a member is joined when Karmada has its
// Cluster and ready when that Cluster is Ready. Members removed from the spec
// stay listed (joined) until their Cluster is gone, which is what the
// inventory's members_unjoin group is made from. With listErr the entries
// keep what they said, and MembersReady says the clusters could not be read.
func observeMembers(kd *kaov1.KarmadaDeployment, clusters []probe.ClusterState, listErr error, now metav1.Time) {
	byName := map[string]probe.ClusterState{}
	for _, c := range clusters {
		byName[c.Name] = c
	}
	old := map[string]kaov1.MemberStatus{}
	for _, m := range kd.Status.Members {
		old[m.Name] = m
	}
	out := []kaov1.MemberStatus{}
	ready := 0
	notReady := []string{}
	for _, m := range kd.Spec.Members {
		e, had := old[m.Name]
		delete(old, m.Name)
		if !had {
			e = kaov1.MemberStatus{Name: m.Name}
		}
		e.SyncMode = m.SyncMode
		ref := m.KubeconfigSecretRef
		e.KubeconfigSecretRef = &ref
		if listErr == nil {
			c, joined := byName[m.Name]
			wasReady := e.Ready
			e.Joined = joined
			e.Ready = joined && c.Ready
			switch {
			case e.Ready:
				e.Message = ""
			case joined:
				e.Message = c.Message
			case e.Message == "" && m.SyncMode == kaov1.PullSyncMode:
				e.Message = "waiting for karmada-agent in the member to register the cluster"
			case e.Message == "":
				e.Message = "not joined yet"
			}
			if e.Ready != wasReady || e.LastTransitionTime == nil {
				e.LastTransitionTime = &now
			}
		}
		if e.Ready {
			ready++
		} else {
			notReady = append(notReady, m.Name+": "+e.Message)
		}
		out = append(out, e)
	}
	// Members that left the spec: listed until Karmada no longer has them.
	for _, m := range kd.Status.Members {
		e, leaving := old[m.Name]
		if !leaving {
			continue
		}
		if listErr == nil {
			if _, still := byName[m.Name]; !still {
				continue
			}
			e.Joined, e.Ready = true, false
			if e.Message == "" || !strings.HasPrefix(e.Message, "run ") {
				e.Message = "removed from spec.members: waiting for the unjoin"
			}
		}
		out = append(out, e)
	}
	kd.Status.Members = out
	kd.Status.ReadyMembers = ""
	if len(kd.Spec.Members) > 0 {
		kd.Status.ReadyMembers = fmt.Sprintf("%d/%d", ready, len(kd.Spec.Members))
	}
	switch {
	case len(kd.Spec.Members) == 0:
		setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.NoMembersReason, "spec.members is empty")
	case listErr != nil:
		setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionUnknown, kaov1.ProbeFailedReason,
			pipeline.TruncateString("cannot read Karmada's clusters: "+listErr.Error(), 1024))
	case len(notReady) == 0:
		setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.AllMembersReadyReason,
			fmt.Sprintf("%d/%d members joined and Ready", ready, len(kd.Spec.Members)))
	default:
		setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionFalse, kaov1.MembersNotReadyReason,
			pipeline.TruncateString(fmt.Sprintf("%d/%d members Ready; %s", ready, len(kd.Spec.Members), strings.Join(notReady, "; ")), 1024))
	}
}

// agentsDelivered lists the Pull members of the spec with the expiry of the
// karmada-agent certificate in bundle: what an install run that succeeds has
// delivered to them (it joins again every Pull member whose delivered
// certificate is not this one; see the inventory's members_join).
func agentsDelivered(kd *kaov1.KarmadaDeployment, bundle pki.Bundle) map[string]metav1.Time {
	out := map[string]metav1.Time{}
	for _, m := range kd.Spec.Members {
		if m.SyncMode != kaov1.PullSyncMode {
			continue
		}
		if at, ok := bundle.NotAfter(pki.AgentClient(m.Name)); ok {
			out[m.Name] = metav1.NewTime(at)
		}
	}
	return out
}

// recordAgentsDelivered records, after a successful install run, the
// karmada-agent certificate each Pull member now has.
func recordAgentsDelivered(kd *kaov1.KarmadaDeployment, agents map[string]metav1.Time) {
	for _, name := range pipeline.SortedKeys(agents) {
		at := agents[name]
		i := memberIndex(kd.Status.Members, name)
		if i < 0 {
			kd.Status.Members = append(kd.Status.Members, kaov1.MemberStatus{Name: name, SyncMode: kaov1.PullSyncMode})
			i = len(kd.Status.Members) - 1
		}
		kd.Status.Members[i].AgentCertificateNotAfter = &at
	}
}
