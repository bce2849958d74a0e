package karmadadeployment

import (
	"context"
	"crypto/tls"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/runner"
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

// TestRecordClusters writes what a watch saw into a real object's status:
// members, readyMembers, MembersReady and, outside runs, Ready; during a
// run Ready stays as it was.
func TestRecordClusters(t *testing.T) {
	controllertest.RequireEnv(t)
	ctx := context.Background()
	ns := controllertest.NewNamespace(t)
	kd := newDeployment(t, ns, "watched", true, "m1", "m2")
	kd.Spec.Paused = false
	if err := controllertest.K8s.Update(ctx, kd); err != nil {
		t.Fatal(err)
	}
	// As after a successful install whose probe found the control plane healthy.
	kd.Status.ObservedGeneration = kd.Generation
	kd.Status.LastRun = &kaov1.RunStatus{ID: "r0", Playbook: "install.yml", Generation: kd.Generation, Result: kaov1.RunSucceeded,
		StartTime: metav1.Now(), EndTime: metav1.Now()}
	for _, c := range []string{kaov1.ControlPlaneReadyCondition, kaov1.PlaybookSucceededCondition, kaov1.EtcdHealthyCondition} {
		setCondition(kd, c, metav1.ConditionTrue, "Test", "healthy")
	}
	setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionFalse, "Test", "not yet")
	setCondition(kd, kaov1.ReadyCondition, metav1.ConditionFalse, "Test", "members not yet")
	kd.Status.Progress = &kaov1.RunProgress{RunID: "r1", Playbook: "members.yml", StartTime: metav1.Now()}
	if err := controllertest.K8s.Status().Update(ctx, kd); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: controllertest.K8s, APIReader: controllertest.K8s, Clock: clocktesting.NewFakePassiveClock(time.Now())}
	r.runs = pipeline.NewTracker()

	both := []probe.ClusterState{{Name: "m1", Ready: true}, {Name: "m2", Ready: true}}
	r.recordClusters(ctx, kd, both)
	cur := controllertest.Get(t, kd)
	if cur.Status.ReadyMembers != "2/2" || !meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.MembersReadyCondition) {
		t.Errorf("during the run: readyMembers %q, conditions %+v", cur.Status.ReadyMembers, cur.Status.Conditions)
	}
	if meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition) {
		t.Error("Ready was summed up during a run")
	}

	cur.Status.Progress = nil
	if err := controllertest.K8s.Status().Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	r.recordClusters(ctx, kd, both)
	cur = controllertest.Get(t, kd)
	if !meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition) || cur.Status.Phase != kaov1.RunningPhase {
		t.Errorf("after the run, every member Ready: Ready %+v, phase %s", meta.FindStatusCondition(cur.Status.Conditions, kaov1.ReadyCondition), cur.Status.Phase)
	}

	r.recordClusters(ctx, kd, both[:1])
	cur = controllertest.Get(t, kd)
	if cur.Status.ReadyMembers != "1/2" || meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition) {
		t.Errorf("m2 left Karmada: readyMembers %q, Ready %+v", cur.Status.ReadyMembers, meta.FindStatusCondition(cur.Status.Conditions, kaov1.ReadyCondition))
	}
}

// TestSumUpReadyWhenARunEnds: a run that joined members ends while one of
// them is not Ready yet (the watch set MembersReady False during the run,
// when Ready is left alone); the status written at its end must not keep
// the Ready=True of before the run until the next probe.
func TestSumUpReadyWhenARunEnds(t *testing.T) {
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Members: []kaov1.MemberSpec{{Name: "m1"}, {Name: "m2"}}}}
	if sumUpReady(kd) || meta.FindStatusCondition(kd.Status.Conditions, kaov1.ReadyCondition) != nil {
		t.Fatal("Ready summed up before any probe judged the control plane")
	}
	for _, c := range []string{kaov1.ControlPlaneReadyCondition, kaov1.EtcdHealthyCondition, kaov1.ReadyCondition} {
		setCondition(kd, c, metav1.ConditionTrue, "Test", "healthy before the run")
	}
	setCondition(kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, "Running", "the run joining m1 and m2")
	setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionFalse, kaov1.MembersNotReadyReason, "m2 is not Ready")

	setRunResultCondition(kd, &runner.Result{ID: "r1", Playbook: "members.yml", Outcome: runner.Succeeded})
	if !sumUpReady(kd) {
		t.Fatal("Ready was not summed up when the run ended")
	}
	if c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.ReadyCondition); c.Status != metav1.ConditionFalse ||
		!strings.Contains(c.Message, kaov1.MembersReadyCondition) {
		t.Errorf("the run ended with m2 not Ready: Ready %+v", c)
	}

	setCondition(kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, "Test", "m1 and m2 Ready")
	if !sumUpReady(kd) || !meta.IsStatusConditionTrue(kd.Status.Conditions, kaov1.ReadyCondition) {
		t.Errorf("every condition True: Ready %+v", meta.FindStatusCondition(kd.Status.Conditions, kaov1.ReadyCondition))
	}
}
