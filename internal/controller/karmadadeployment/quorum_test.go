package karmadadeployment

import (
	"context"
	"crypto/tls"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

// quorumSwitch is an EtcdProber whose members all answer, or, while lost
// is set, only the first of them (no quorum, no leader).
type quorumSwitch struct{ lost atomic.Bool }

func (q *quorumSwitch) Etcd(_ context.Context, members map[string]string, _ *tls.Config, _ probe.Dialer) probe.EtcdHealth {
	h := probe.EtcdHealth{}
	first := true
	for name, url := range members {
		up := !q.lost.Load() || first
		m := probe.EtcdMember{Name: name, Endpoint: url, Healthy: up}
		if !up {
			m.Message = "no answer within 3s"
		}
		if up && !q.lost.Load() && first {
			m.Leader, h.Leader = true, name
		}
		if up {
			h.Healthy++
		}
		first = false
		h.Members = append(h.Members, m)
	}
	return h
}

// TestRunsWaitForEtcdsQuorum installs a deployment whose etcd then loses its
// quorum: a spec change starts no run; PlaybookSucceeded says the run is
// held and what to do, with a Warning Event. Once the members answer again
// the held run starts by itself and succeeds.
func TestRunsWaitForEtcdsQuorum(t *testing.T) {
	controllertest.RequireEnv(t)
	ns := controllertest.NewNamespace(t)
	etcd := &quorumSwitch{}
	var runs atomic.Int32
	succeed := func(_ context.Context, spec runner.Spec) (*runner.Result, error) {
		runs.Add(1)
		now := time.Now()
		return &runner.Result{ID: spec.ID, Playbook: spec.Playbook, Outcome: runner.Succeeded, StartTime: now, EndTime: now}, nil
	}
	controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error {
		r := &Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kao"),
			InClusterConfig: mgr.GetConfig(), Run: succeed, EtcdProber: etcd,
			Options: pipeline.Options{StateDir: testenv.StateDir(t), PlaybookDir: controllertest.PlaybookDir(), ArtifactsDir: controllertest.CRDBundle,
				Policy: controllertest.TestPolicy, ProbeInterval: time.Second},
		}
		return r.SetupWithManager(mgr)
	})
	kd := newDeploymentWith(t, ns, "quorum", func(*kaov1.KarmadaDeployment) {})
	succeeded := func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.LastRun != nil && kd.Status.LastRun.Result == kaov1.RunSucceeded && kd.Status.LastRun.Generation == kd.Generation
	}
	controllertest.WaitFor(t, kd, time.Minute, "the install", succeeded)

	etcd.lost.Store(true)
	controllertest.WaitFor(t, kd, 30*time.Second, "EtcdHealthy to report the quorum lost", func(kd *kaov1.KarmadaDeployment) bool {
		c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.EtcdHealthyCondition)
		return c != nil && c.Reason == kaov1.EtcdQuorumLostReason
	})
	before := runs.Load()
	update(t, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Spec.APIServer.ExtraArgs = append(cur.Spec.APIServer.ExtraArgs, kaov1.Arg{Name: "v", Value: "2"})
	})
	held := controllertest.WaitFor(t, kd, 30*time.Second, "the run held", func(kd *kaov1.KarmadaDeployment) bool {
		c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition)
		return c != nil && c.Reason == kaov1.RunHeldQuorumLostReason
	})
	c := meta.FindStatusCondition(held.Status.Conditions, kaov1.PlaybookSucceededCondition)
	for _, want := range []string{"quorum lost", "spec.lostHosts", "EtcdRestore", "docs/disaster-recovery.md"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the held run's condition does not say %q: %q", want, c.Message)
		}
	}
	ev := waitForEvent(t, kd, kaov1.RunHeldQuorumLostReason)
	if ev.Type != "Warning" {
		t.Errorf("the held run's Event is %s, want Warning", ev.Type)
	}
	time.Sleep(3 * time.Second) // three probe intervals: nothing may start meanwhile
	if n := runs.Load(); n != before {
		t.Fatalf("%d runs started while etcd had no quorum", n-before)
	}

	etcd.lost.Store(false)
	controllertest.WaitFor(t, kd, 30*time.Second, "the held run, once etcd answers", succeeded)
}
