package karmadadeployment

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

// countingTransport counts the requests a manager sends to the API server.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// silentPlanes is a ReadyzProber for control planes whose hosts accept
// connections and never answer: every probe takes the real prober's
// timeout. (The deployments' endpoints are ClusterIPs no route reaches.)
type silentPlanes struct{}

func (silentPlanes) Readyz(ctx context.Context, urls map[string]string, _ *tls.Config) []probe.Endpoint {
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	return unanswered(urls)
}

// scaleResult is what reconciling n deployments cost the controller.
type scaleResult struct {
	n        int
	took     time.Duration
	heap     int64
	requests int64
}

// reconcileAtScale creates n deployments at once in a new namespace, with a
// runner that succeeds at once (the controller alone, no Ansible), and
// measures the time until every one has recorded its successful install,
// the manager's requests to the API server, and the heap it added. Installed
// deployments are probed every probeEvery.
func reconcileAtScale(b *testing.B, n int, probeEvery time.Duration) scaleResult {
	ns := testenv.Namespace(b, controllertest.K8s, "kao-scale-")
	requests := &atomic.Int64{}
	cfg := rest.CopyConfig(controllertest.Env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, n: requests} })
	stub := func(_ context.Context, spec runner.Spec) (*runner.Result, error) {
		now := time.Now()
		return &runner.Result{ID: spec.ID, Playbook: spec.Playbook, Outcome: runner.Succeeded, StartTime: now, EndTime: now}, nil
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	stop := testenv.StartManagerAs(b, cfg, controllertest.Scheme, []string{ns}, func(mgr ctrl.Manager) error {
		r := &Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("kao"),
			InClusterConfig: mgr.GetConfig(), Run: stub, ReadyzProber: silentPlanes{},
			Options: pipeline.Options{StateDir: testenv.StateDir(b), PlaybookDir: controllertest.PlaybookDir(), ArtifactsDir: controllertest.CRDBundle,
				Policy: controllertest.TestPolicy, MaxConcurrentReconciles: 4, ProbeInterval: probeEvery},
		}
		return r.SetupWithManager(mgr)
	})
	defer stop()
	for i := range n {
		newDeploymentWith(b, ns, fmt.Sprintf("kd-%03d", i), func(*kaov1.KarmadaDeployment) {})
	}
	deadline := time.Now().Add(20 * time.Minute)
	for {
		list := &kaov1.KarmadaDeploymentList{}
		if err := controllertest.K8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		done := 0
		for _, kd := range list.Items {
			if l := kd.Status.LastRun; l != nil && l.Result == kaov1.RunSucceeded && kd.Status.ObservedGeneration == kd.Generation {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d deployments reconciled after 20 minutes", done, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(start)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return scaleResult{n: n, took: took, heap: int64(after.HeapInuse) - int64(before.HeapInuse), requests: requests.Load()}
}

// BenchmarkControllerAtScale reconciles 50, then 500 deployments created at
// once, with a runner that succeeds at once: the KarmadaDeployment
// controller alone, with its default client rate limits, four reconciles
// at a time and the deployments' host-cluster work (Services, claims, the
// certificates, the exported kubeconfig) against a real API server. First
// with the probes of installed deployments an hour apart (the controller
// alone), then 500 again with probes at their default interval: here no
// control plane exists, so each probe waits for its timeouts, as for a
// data centre that is down. Probes have workers of their own, so they must
// not slow the installs (before they did, 203 of 500 deployments were
// reconciled in 15 minutes). It prints, per deployment, the time to drain
// the queue, the manager's API requests and the heap it keeps, the ratio of
// 500 to 50 (1.0 is linear) and of probes on to off.
func BenchmarkControllerAtScale(b *testing.B) {
	controllertest.RequireEnv(b)
	for range b.N {
		small := reconcileAtScale(b, 50, time.Hour)
		large := reconcileAtScale(b, 500, time.Hour)
		probed := reconcileAtScale(b, 500, defaultProbeInterval)
		for _, r := range []scaleResult{small, large, probed} {
			b.Logf("%d deployments%s: all reconciled in %s (%s each), %d API requests (%.1f each), heap +%.1f MiB (%.1f KiB each)",
				r.n, map[bool]string{true: ", probed every 30 s"}[r == probed], r.took.Round(10*time.Millisecond), (r.took / time.Duration(r.n)).Round(time.Millisecond), r.requests,
				float64(r.requests)/float64(r.n), float64(r.heap)/(1<<20), float64(r.heap)/1024/float64(r.n))
		}
		per := func(v float64, n int) float64 { return v / float64(n) }
		b.Logf("ratio per deployment, 500 to 50: time %.2f, API requests %.2f, heap %.2f",
			per(float64(large.took), 500)/per(float64(small.took), 50),
			per(float64(large.requests), 500)/per(float64(small.requests), 50),
			per(float64(large.heap), 500)/per(float64(small.heap), 50))
		b.Logf("ratio of 500 probed every 30 s to 500 unprobed: time %.2f, API requests %.2f",
			float64(probed.took)/float64(large.took), float64(probed.requests)/float64(large.requests))
	}
}
