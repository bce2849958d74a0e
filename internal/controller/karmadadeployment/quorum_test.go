package karmadadeployment

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/probe"
)

// TestRunsWaitOnlyForALostQuorumOfAnInstalledBinaryEtcd: the hold applies to
// a Binary deployment with managed etcd, installed once, whose last probe
// found the quorum lost; not to one whose members are merely unhealthy, not
// to one where etcd runs on none of the hosts, all up (a run starts it, and
// nothing running is restarted meanwhile: TestChurn's stand-in hosts, where
// nothing ever runs etcd, found it), not to a first install (its run is
// what starts etcd), not to Containerized mode. test/e2e TestEtcdScale's step "Restore after a quorum loss" holds a real run.
func TestRunsWaitOnlyForALostQuorumOfAnInstalledBinaryEtcd(t *testing.T) {
	withEtcd := func(h probe.EtcdHealth, change func(*kaov1.KarmadaDeployment)) *kaov1.KarmadaDeployment {
		kd := upgradeFixture()
		kd.Status.LastSuccessfulRunTime = &metav1.Time{}
		recordEtcdHealth(kd, h)
		change(kd)
		return kd
	}
	member := func(name string, healthy bool) probe.EtcdMember {
		m := probe.EtcdMember{Name: name, Healthy: healthy}
		if !healthy {
			m.Message = "no answer within 3s"
		}
		return m
	}
	lost := probe.EtcdHealth{Members: []probe.EtcdMember{member("node1", true), member("node2", false), member("node3", false)}, Healthy: 1}
	stopped := func(name string) probe.EtcdMember {
		return probe.EtcdMember{Name: name, Stopped: true, Message: "etcd is not running"}
	}
	allStopped := probe.EtcdHealth{Members: []probe.EtcdMember{stopped("node1"), stopped("node2"), stopped("node3")}}
	degraded := probe.EtcdHealth{Members: []probe.EtcdMember{member("node1", true), member("node2", true), member("node3", false)}, Healthy: 2, Leader: "node1"}
	unchanged := func(*kaov1.KarmadaDeployment) {}

	if why := quorumLost(withEtcd(lost, unchanged)); why == "" || !meta.IsStatusConditionFalse(withEtcd(lost, unchanged).Status.Conditions, kaov1.EtcdHealthyCondition) {
		t.Errorf("1 of 3 members: no hold (%q)", why)
	} else if want := "1/3 members healthy, quorum lost: node2: no answer within 3s; node3: no answer within 3s"; why != want {
		t.Errorf("the hold says %q, want the probe's finding %q", why, want)
	}
	for name, kd := range map[string]*kaov1.KarmadaDeployment{
		"2 of 3 members":                     withEtcd(degraded, unchanged),
		"every member stopped on an up host": withEtcd(allStopped, unchanged),
		"a single member stopped on an up host": withEtcd(probe.EtcdHealth{
			Members: []probe.EtcdMember{stopped("node1")}}, unchanged),
		"a first install":  withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Status.LastSuccessfulRunTime = nil }),
		"Containerized":    withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Mode = kaov1.ContainerizedMode }),
		"an external etcd": withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Etcd = kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{}} }),
	} {
		if why := quorumLost(kd); why != "" {
			t.Errorf("%s: runs held (%q)", name, why)
		}
	}
	c := meta.FindStatusCondition(withEtcd(allStopped, unchanged).Status.Conditions, kaov1.EtcdHealthyCondition)
	if c.Status != metav1.ConditionFalse || c.Reason != kaov1.EtcdAllMembersStoppedReason {
		t.Errorf("etcd stopped on every host: %+v", c)
	}
	// Held: a member still runs (without a leader: a run would restart it, or
	// change the membership through it), or a member's host is silent (dead,
	// perhaps: whether to name it lost and restore is the SRE's call).
	for name, h := range map[string]probe.EtcdHealth{
		"one answering without a leader, two stopped": {Members: []probe.EtcdMember{
			{Name: "node1", Message: "etcdserver: no leader"}, stopped("node2"), stopped("node3")}},
		"two stopped, one silent": {Members: []probe.EtcdMember{stopped("node1"), stopped("node2"), member("node3", false)}},
	} {
		if quorumLost(withEtcd(h, unchanged)) == "" {
			t.Errorf("%s: no hold", name)
		}
	}
}
