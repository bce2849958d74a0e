package karmadadeployment

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/probe"
)

// fakeClusterWatch stands in for probe.WatchClusters: each call is one
// watch, handed to the test to deliver from.
type fakeClusterWatch struct {
	mu      sync.Mutex
	started []fakeWatchCall
}

type fakeWatchCall struct {
	ctx     context.Context
	api     probe.API
	changed func([]probe.ClusterState, error)
}

func (f *fakeClusterWatch) watch(ctx context.Context, api probe.API, changed func([]probe.ClusterState, error)) {
	f.mu.Lock()
	f.started = append(f.started, fakeWatchCall{ctx, api, changed})
	f.mu.Unlock()
	<-ctx.Done()
}

func (f *fakeClusterWatch) call(t *testing.T, i int) fakeWatchCall {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		if len(f.started) > i {
			c := f.started[i]
			f.mu.Unlock()
			return c
		}
		f.mu.Unlock()
	}
	t.Fatalf("watch %d was not started", i)
	return fakeWatchCall{}
}

func (f *fakeClusterWatch) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

// TestClusterWatches checks the lifecycle of the deployments' Cluster
// watches: one per deployment, the probe reads from it once it listed, a
// new endpoint or client certificate starts a new one, every delivery is
// recorded for the right object, and stop and the manager's end cancel it.
func TestClusterWatches(t *testing.T) {
	fake := &fakeClusterWatch{}
	type recorded struct {
		uid      types.UID
		clusters []probe.ClusterState
	}
	records := make(chan recorded, 8)
	w := newClusterWatches(func(_ context.Context, kd *kaov1.KarmadaDeployment, cs []probe.ClusterState) {
		records <- recorded{kd.UID, cs}
	})
	w.watch = fake.watch
	kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dc1", Name: "k", UID: "u1"}}
	api := probe.API{URL: "https://10.0.0.1:5443", TLS: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{[]byte("cert-1")}}}}}

	if _, ok := w.clusters(kd, api); ok || fake.count() != 0 {
		t.Fatal("a watch started before the manager did")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Start(ctx); close(done) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		w.mu.Lock()
		started := w.ctx != nil
		w.mu.Unlock()
		if started || time.Now().After(deadline) {
			break
		}
	}

	if _, ok := w.clusters(kd, api); ok {
		t.Error("clusters are known before the first list")
	}
	first := fake.call(t, 0)
	ready := []probe.ClusterState{{Name: "m1", Ready: true}}
	first.changed(ready, nil)
	if r := <-records; r.uid != "u1" || len(r.clusters) != 1 {
		t.Errorf("recorded %+v", r)
	}
	if cs, ok := w.clusters(kd, api); !ok || len(cs) != 1 || !cs[0].Ready {
		t.Errorf("after the list: %+v %v", cs, ok)
	}
	if fake.count() != 1 {
		t.Errorf("%d watches for one deployment and one endpoint", fake.count())
	}

	// A failed list: the probe reads the clusters itself; nothing is recorded.
	first.changed(nil, context.DeadlineExceeded)
	if _, ok := w.clusters(kd, api); ok {
		t.Error("clusters still known after a failed list")
	}
	select {
	case r := <-records:
		t.Errorf("a failed list was recorded: %+v", r)
	default:
	}

	// A renewed client certificate: a new watch, the old one cancelled.
	renewed := probe.API{URL: api.URL, TLS: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{[]byte("cert-2")}}}}}
	w.clusters(kd, renewed)
	second := fake.call(t, 1)
	if first.ctx.Err() == nil {
		t.Error("the watch with the old certificate still runs")
	}
	w.stop(types.NamespacedName{Namespace: "dc1", Name: "k"})
	if second.ctx.Err() == nil {
		t.Error("stop left the watch running")
	}

	// The manager's end stops every watch.
	other := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: "dc2", Name: "k", UID: "u2"}}
	w.clusters(other, api)
	third := fake.call(t, 2)
	cancel()
	<-done
	if third.ctx.Err() == nil {
		t.Error("the manager stopped and a watch still runs")
	}
}
