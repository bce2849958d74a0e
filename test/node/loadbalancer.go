package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The cluster's load-balancer implementation works as bare-metal ones such
// as MetalLB do: an allocator gives each Service of type LoadBalancer an
// address of a pool (the cluster's load-balancer /24, which the machine
// routes to the node) in status.loadBalancer.ingress, and kube-proxy,
// which programs a rule for every ingress address, forwards the traffic
// that arrives for it to the Service's pods. Nothing announces the
// addresses: the machine's route does what MetalLB's ARP or BGP speakers
// do on a real network.
const (
	// lbRetryFirst is the wait before a failed pass runs again: long
	// enough not to spin while the API server is briefly away.
	lbRetryFirst = 200 * time.Millisecond
	// lbRetryMax caps the doubling wait, so a Service waits at most this
	// long once the API server is back.
	lbRetryMax = 5 * time.Second
)

// lbAssignment is an address the allocator gives a Service.
type lbAssignment struct {
	service *corev1.Service
	ip      netip.Addr
}

// servesLoadBalancer reports whether the allocator is the load-balancer
// implementation of s: s is of type LoadBalancer and names no
// spec.loadBalancerClass, as a cluster's default implementation serves.
func servesLoadBalancer(s *corev1.Service) bool {
	return s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.Spec.LoadBalancerClass == nil
}

// planLoadBalancerIPs decides which Services get which address of pool.
// Every address of pool in any Service's status.loadBalancer.ingress is
// taken, whoever wrote it, so an address given before the allocator
// (re)started is kept. Each Service the allocator serves that has no
// ingress address and is not being deleted gets the lowest free address
// from .1 to the one before the last, the oldest Service first; those left
// when the pool runs out are returned as waiting. A Service that is
// deleted or stops being a LoadBalancer (the API server then clears its
// status) no longer holds its address, so the next plan gives it out
// again.
func planLoadBalancerIPs(services []corev1.Service, pool netip.Prefix) (assign []lbAssignment, waiting []*corev1.Service) {
	taken := map[netip.Addr]bool{}
	var need []*corev1.Service
	for i := range services {
		s := &services[i]
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(ing.IP); err == nil && pool.Contains(ip) {
				taken[ip] = true
			}
		}
		if servesLoadBalancer(s) && len(s.Status.LoadBalancer.Ingress) == 0 && s.DeletionTimestamp == nil {
			need = append(need, s)
		}
	}
	slices.SortFunc(need, func(a, b *corev1.Service) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	first, last := pool.Addr().Next(), addAddr(pool.Addr(), 1<<(32-pool.Bits())-2)
	next := first
	for _, s := range need {
		for next.Compare(last) <= 0 && taken[next] {
			next = next.Next()
		}
		if next.Compare(last) > 0 {
			waiting = append(waiting, s)
			continue
		}
		assign = append(assign, lbAssignment{service: s, ip: next})
		taken[next] = true
	}
	return assign, waiting
}

// lbAllocator runs planLoadBalancerIPs against a cluster whenever a
// Service changes.
type lbAllocator struct {
	client kubernetes.Interface
	pool   netip.Prefix
	logf   func(format string, args ...any)
	// changed holds one signal that a Service changed since the last pass:
	// a burst of changes makes one pass.
	changed chan struct{}
}

// startLoadBalancer starts an allocator of pool's addresses over client
// and returns once it watches Services (in every namespace), with stop,
// which ends it and waits until it has. The allocator runs until stop,
// whatever becomes of ctx, which bounds only the start. logf receives what
// it assigns and why it waits.
func startLoadBalancer(ctx context.Context, client kubernetes.Interface, pool netip.Prefix, logf func(string, ...any)) (stop func(), err error) {
	a := &lbAllocator{client: client, pool: pool, logf: logf, changed: make(chan struct{}, 1)}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The informer only says that something changed; each pass lists the
	// Services from the API server, not from the informer's cache, so it
	// sees the previous pass's writes and never gives an address twice.
	factory := informers.NewSharedInformerFactory(client, 0)
	services := factory.Core().V1().Services().Informer()
	if _, err := services.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.poke() },
		UpdateFunc: func(_, _ any) { a.poke() },
		DeleteFunc: func(any) { a.poke() },
	}); err != nil {
		cancel()
		return nil, err
	}
	factory.Start(runCtx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.run(runCtx)
	}()
	stop = func() {
		cancel()
		factory.Shutdown()
		<-done
	}
	if !cache.WaitForCacheSync(ctx.Done(), services.HasSynced) {
		stop()
		return nil, fmt.Errorf("starting the load-balancer allocator: watching Services: %w", context.Cause(ctx))
	}
	return stop, nil
}

func (a *lbAllocator) poke() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// run makes a pass after each change until ctx ends; a failed pass runs
// again after a doubling wait.
func (a *lbAllocator) run(ctx context.Context) {
	var retry <-chan time.Time
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.changed:
		case <-retry:
		}
		if err := a.pass(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(max(2*wait, lbRetryFirst), lbRetryMax)
			a.logf("Retrying the load-balancer pass in %s: %v", wait, err)
			retry = time.After(wait)
			continue
		}
		retry, wait = nil, 0
	}
}

// pass lists the Services and writes the addresses planLoadBalancerIPs
// gives. A Service deleted meanwhile is skipped; one changed meanwhile
// (a conflict) fails the pass, and its change starts the next one.
func (a *lbAllocator) pass(ctx context.Context) error {
	list, err := a.client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Services: %w", err)
	}
	assign, waiting := planLoadBalancerIPs(list.Items, a.pool)
	var errs []error
	for _, as := range assign {
		s := as.service.DeepCopy()
		vip := corev1.LoadBalancerIPModeVIP
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: as.ip.String(), IPMode: &vip}}
		_, err := a.client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("assigning %s to Service %s/%s: %w", as.ip, s.Namespace, s.Name, err))
		default:
			a.logf("Assigned %s to Service %s/%s", as.ip, s.Namespace, s.Name)
		}
	}
	for _, s := range waiting {
		a.logf("Waiting for a free address of %s for Service %s/%s: the pool is exhausted", a.pool, s.Namespace, s.Name)
	}
	return errors.Join(errs...)
}

// startLoadBalancer starts the cluster's load-balancer allocator with a
// client of its own, logging to logs/load-balancer.log; Stop ends it. It
// runs in the test's process, so a cluster whose test died has none, and
// its routes go with the link.
func (c *Cluster) startLoadBalancer(ctx context.Context) error {
	f, err := os.OpenFile(c.l.log("load-balancer"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cfg := c.Config()
	cfg.UserAgent = "kao-node-load-balancer"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		_ = f.Close()
		return err
	}
	stop, err := startLoadBalancer(ctx, client, c.a.LoadBalancers, log.New(f, "", log.LstdFlags|log.Lmicroseconds).Printf)
	if err != nil {
		_ = f.Close()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLoadBalancer = func() {
		stop()
		_ = f.Close()
	}
	return nil
}
