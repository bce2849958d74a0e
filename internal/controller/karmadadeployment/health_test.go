package karmadadeployment

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestControlPlaneReadySaysWhatStopsWithoutAnInstance proves that a
// component with no instance left on any host (the only controlPlane host
// died) is ComponentsUnavailable, with what stops until a host runs it
// again, and that one instance down of two is only ComponentsUnhealthy.
func TestControlPlaneReadySaysWhatStopsWithoutAnInstance(t *testing.T) {
	ok := func(name string) kaov1.ComponentStatus {
		return kaov1.ComponentStatus{Name: name, Hosts: []string{"node1"}, Ready: true, Message: "1/1 ready"}
	}
	bad := func(name, msg string) kaov1.ComponentStatus {
		return kaov1.ComponentStatus{Name: name, Hosts: []string{"node3"}, Message: msg}
	}
	onlyHostGone := []kaov1.ComponentStatus{
		ok("karmada-apiserver"), ok("karmada-aggregated-apiserver"),
		bad("kube-controller-manager", "lease kube-system/kube-controller-manager: not renewed since 40s"),
		bad("karmada-controller-manager", "lease karmada-system/karmada-controller-manager: not renewed since 40s"),
		bad("karmada-scheduler", "lease karmada-system/karmada-scheduler: not renewed since 40s"),
		bad("karmada-webhook", "0/1 ready node3: no route to host"),
	}
	down := map[string]bool{"karmada-apiserver": false, "karmada-aggregated-apiserver": false, "kube-controller-manager": true,
		"karmada-controller-manager": true, "karmada-scheduler": true, "karmada-webhook": true}
	kd := &kaov1.KarmadaDeployment{}
	setControlPlaneReady(kd, onlyHostGone, down)
	c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ControlPlaneReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != kaov1.ComponentsUnavailableReason {
		t.Fatalf("ControlPlaneReady with no controller left: %+v", c)
	}
	for _, want := range []string{
		"no instance of kube-controller-manager, karmada-controller-manager, karmada-scheduler, karmada-webhook answers on any host",
		"nothing propagates to the members", "not scheduled", "refuses to create or change", "garbage collection",
		"node3: no route to host",
	} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("the message does not say %q: %s", want, c.Message)
		}
	}
	if strings.Contains(c.Message, "does not answer") {
		t.Errorf("the message names the API servers, which answer: %s", c.Message)
	}

	// One webhook of two down: degraded, not unavailable.
	degraded := []kaov1.ComponentStatus{ok("karmada-apiserver"), bad("karmada-webhook", "1/2 ready node3: no route to host")}
	kd = &kaov1.KarmadaDeployment{}
	setControlPlaneReady(kd, degraded, map[string]bool{"karmada-webhook": false})
	if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ControlPlaneReadyCondition); c == nil || c.Reason != kaov1.ComponentsUnhealthyReason ||
		strings.Contains(c.Message, "no instance") {
		t.Errorf("ControlPlaneReady with one webhook of two down: %+v", c)
	}
}

// TestAnEventTellsWhenComponentsLoseOrRegainTheirLastInstance proves that
// a probe tells an SRE by an Event, once, when components lose their last
// instance (and again when others do), and when they have one again; a
// degraded plane or an unchanged outage tells nothing.
func TestAnEventTellsWhenComponentsLoseOrRegainTheirLastInstance(t *testing.T) {
	cond := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: kaov1.ControlPlaneReadyCondition, Reason: reason, Message: msg}
	}
	healthy := cond(kaov1.ComponentsHealthyReason, "all 6 components pass their health checks")
	degraded := cond(kaov1.ComponentsUnhealthyReason, "1/6 components unhealthy: karmada-webhook: 1/2 ready")
	controllers := cond(kaov1.ComponentsUnavailableReason, "no instance of karmada-scheduler, karmada-webhook answers on any host: new and changed workloads are not scheduled ... 2/6 components unhealthy: karmada-scheduler: lease not renewed since 40s")
	controllersLater := cond(kaov1.ComponentsUnavailableReason, "no instance of karmada-scheduler, karmada-webhook answers on any host: new and changed workloads are not scheduled ... 2/6 components unhealthy: karmada-scheduler: lease not renewed since 70s")
	everything := cond(kaov1.ComponentsUnavailableReason, "no instance of karmada-apiserver, karmada-webhook answers on any host: Karmada's API does not answer ...")
	for _, tc := range []struct {
		name          string
		before, after *metav1.Condition
		kind, reason  string
	}{
		{"the last instances go", healthy, controllers, "Warning", kaov1.ComponentsUnavailableReason},
		{"first probe finds them gone", nil, controllers, "Warning", kaov1.ComponentsUnavailableReason},
		{"from degraded to gone", degraded, controllers, "Warning", kaov1.ComponentsUnavailableReason},
		{"more components go", controllers, everything, "Warning", kaov1.ComponentsUnavailableReason},
		{"the same outage, probed again", controllers, controllersLater, "", ""},
		{"they come back", controllers, healthy, "Normal", "ComponentsAvailable"},
		{"they come back degraded", controllers, degraded, "Normal", "ComponentsAvailable"},
		{"degraded", healthy, degraded, "", ""},
		{"healthy again", degraded, healthy, "", ""},
		{"no probe", controllers, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := availabilityEvent(tc.before, tc.after)
			if ok != (tc.kind != "") || e.kind != tc.kind || e.reason != tc.reason {
				t.Fatalf("got %+v (%v), want a %q Event %q", e, ok, tc.kind, tc.reason)
			}
			if ok && !strings.Contains(e.note, tc.after.Message) {
				t.Errorf("the Event does not carry the condition's message: %q", e.note)
			}
		})
	}
}
