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
// to one whose lost quorum a run brings back (etcd stopped on hosts that are
// up: TestChurn's hosts, where nothing ever runs etcd, found it), not
// to a first install (its run is what starts etcd), not to Containerized
// mode. TestRestoreAfterQuorumLoss (test/e2e) holds a real run.
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
	// node2's host refuses the connection: etcd stopped there, and a run
	// starts it; node3 does not answer at all.
	startable := probe.EtcdHealth{Members: []probe.EtcdMember{member("node1", true), member("node2", false), member("node3", false)}, Healthy: 1}
	startable.Members[1].Stopped = true
	degraded := probe.EtcdHealth{Members: []probe.EtcdMember{member("node1", true), member("node2", true), member("node3", false)}, Healthy: 2, Leader: "node1"}
	unchanged := func(*kaov1.KarmadaDeployment) {}

	if why := quorumLost(withEtcd(lost, unchanged)); why == "" || !meta.IsStatusConditionFalse(withEtcd(lost, unchanged).Status.Conditions, kaov1.EtcdHealthyCondition) {
		t.Errorf("1 of 3 members: no hold (%q)", why)
	} else if want := "1/3 members healthy, quorum lost: node2: no answer within 3s; node3: no answer within 3s"; why != want {
		t.Errorf("the hold says %q, want the probe's finding %q", why, want)
	}
	for name, kd := range map[string]*kaov1.KarmadaDeployment{
		"2 of 3 members": withEtcd(degraded, unchanged),
		"1 of 3 members, 1 stopped on an up host": withEtcd(startable, unchanged),
		"a single member stopped on an up host": withEtcd(probe.EtcdHealth{
			Members: []probe.EtcdMember{{Name: "node1", Stopped: true, Message: "etcd is not running"}}}, unchanged),
		"a first install":  withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Status.LastSuccessfulRunTime = nil }),
		"Containerized":    withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Mode = kaov1.ContainerizedMode }),
		"an external etcd": withEtcd(lost, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Etcd = kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{}} }),
	} {
		if why := quorumLost(kd); why != "" {
			t.Errorf("%s: runs held (%q)", name, why)
		}
	}
	c := meta.FindStatusCondition(withEtcd(startable, unchanged).Status.Conditions, kaov1.EtcdHealthyCondition)
	if c.Status != metav1.ConditionFalse || c.Reason != kaov1.EtcdQuorumLostMembersStoppedReason {
		t.Errorf("a quorum a run can bring back: %+v", c)
	}
	// Stopped members on up hosts that are no majority with the healthy
	// ones: held.
	few := probe.EtcdHealth{Members: []probe.EtcdMember{member("node1", false), member("node2", false), member("node3", false)}}
	few.Members[0].Stopped = true
	if quorumLost(withEtcd(few, unchanged)) == "" {
		t.Error("1 of 3 members stopped, 2 silent: no hold")
	}
}
