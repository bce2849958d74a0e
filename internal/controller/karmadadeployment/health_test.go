package karmadadeployment

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync"
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

// stuckReadyz is a ReadyzProber whose answers never come until released,
// as from API servers whose hosts accept connections and never answer. It
// counts the probes waiting.
type stuckReadyz struct {
	waiting  atomic.Int32
	probed   atomic.Int32
	released chan struct{}
	once     sync.Once
}

func (s *stuckReadyz) Readyz(ctx context.Context, urls map[string]string, _ *tls.Config) []probe.Endpoint {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	s.probed.Add(1)
	select {
	case <-s.released:
	case <-ctx.Done():
	}
	return unanswered(urls)
}

// unanswered is what the readyz prober finds of servers that never answer.
func unanswered(urls map[string]string) []probe.Endpoint {
	out := []probe.Endpoint{}
	for host, url := range urls {
		out = append(out, probe.Endpoint{Host: host, URL: url, Message: "Get " + url + ": context deadline exceeded"})
	}
	return out
}

func (s *stuckReadyz) release() { s.once.Do(func() { close(s.released) }) }

// TestProbesThatHangDoNotDelayInstalls installs three deployments whose
// control planes then never answer a probe, with one reconcile worker and
// two probe workers: both probe workers hang. A fourth deployment created
// then is still installed, while those probes hang: probes never hold the
// workers that start runs. Once the planes answer (time out), their probes'
// findings reach status.
func TestProbesThatHangDoNotDelayInstalls(t *testing.T) {
	controllertest.RequireEnv(t)
	ns := controllertest.NewNamespace(t)
	stuck := &stuckReadyz{released: make(chan struct{})}
	t.Cleanup(stuck.release) // before the manager stops (cleanups run last first)
	succeed := func(_ context.Context, spec runner.Spec) (*runner.Result, error) {
		now := time.Now()
		return &runner.Result{ID: spec.ID, Playbook: spec.Playbook, Outcome: runner.Succeeded, StartTime: now, EndTime: now}, nil
	}
	controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error {
		r := &Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kao"),
			InClusterConfig: mgr.GetConfig(), Run: succeed, ReadyzProber: stuck,
			Options: pipeline.Options{StateDir: testenv.StateDir(t), PlaybookDir: controllertest.PlaybookDir(), ArtifactsDir: controllertest.CRDBundle,
				Policy: controllertest.TestPolicy, MaxConcurrentReconciles: 1, MaxConcurrentProbes: 2, ProbeInterval: 2 * time.Second},
		}
		return r.SetupWithManager(mgr)
	})
	installed := func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.LastRun != nil && kd.Status.LastRun.Result == kaov1.RunSucceeded && kd.Status.ObservedGeneration == kd.Generation
	}
	var down []*kaov1.KarmadaDeployment
	for i := range 3 {
		kd := newDeploymentWith(t, ns, fmt.Sprintf("down-%d", i), func(*kaov1.KarmadaDeployment) {})
		controllertest.WaitFor(t, kd, time.Minute, "the install", installed)
		down = append(down, kd)
	}
	deadline := time.Now().Add(time.Minute)
	for stuck.waiting.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes hang after a minute; want both probe workers", stuck.waiting.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}

	late := newDeploymentWith(t, ns, "late", func(*kaov1.KarmadaDeployment) {})
	controllertest.WaitFor(t, late, time.Minute, "the install of a deployment created while every probe worker hangs", installed)
	if n := stuck.waiting.Load(); n != 2 {
		t.Fatalf("%d probes hang at the late install's end; the test needs both probe workers held throughout", n)
	}
	if n := stuck.probed.Load(); n != 2 {
		t.Errorf("%d probes started while two workers hang; want 2 (a third worker probed)", n)
	}

	stuck.release()
	for _, kd := range append(down, late) {
		controllertest.WaitFor(t, kd, time.Minute, "the probe's finding in status", func(kd *kaov1.KarmadaDeployment) bool {
			c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ControlPlaneReadyCondition)
			return c != nil && c.Status == "False" && kd.Status.Phase == kaov1.DegradedPhase
		})
	}
}
