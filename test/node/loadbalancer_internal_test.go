package node

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// lbService is a Service of type typ in namespace default, created at the
// second created, with a loadBalancerClass if class is not empty and
// ingress addresses ingress.
func lbService(name string, created int, typ corev1.ServiceType, class string, ingress ...string) corev1.Service {
	s := corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.Unix(int64(created), 0)},
		Spec:       corev1.ServiceSpec{Type: typ},
	}
	if class != "" {
		s.Spec.LoadBalancerClass = &class
	}
	for _, ip := range ingress {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	return s
}

func TestPlanLoadBalancerIPs(t *testing.T) {
	const lb, other = corev1.ServiceTypeLoadBalancer, "example.com/other"
	deleting := lbService("deleting", 1, lb, "")
	deleting.DeletionTimestamp = ptr.To(metav1.Unix(5, 0))
	for _, tc := range []struct {
		// name says what the case proves.
		name string
		// pool is the load-balancer pool; default 10.214.3.0/24.
		pool string
		// held is how many more Services already hold the pool's
		// addresses, from .1 on, as after the allocator restarts.
		held int
		// services are the other Services of the cluster.
		services []corev1.Service
		// want maps the Services given an address to it.
		want map[string]string
		// waiting are the Services left without one, in order.
		waiting []string
	}{{
		name:     "the first Service gets .1",
		services: []corev1.Service{lbService("a", 1, lb, "")},
		want:     map[string]string{"a": "10.214.3.1"},
	}, {
		name: "addresses already held are kept and taken, and the lowest free ones given",
		services: []corev1.Service{
			lbService("a", 1, lb, "", "10.214.3.1"), lbService("c", 1, lb, "", "10.214.3.3"),
			lbService("b", 2, lb, ""), lbService("d", 3, lb, ""),
		},
		want: map[string]string{"b": "10.214.3.2", "d": "10.214.3.4"},
	}, {
		name:     "the oldest Service first, then by name",
		services: []corev1.Service{lbService("y", 2, lb, ""), lbService("z", 1, lb, ""), lbService("x", 2, lb, "")},
		want:     map[string]string{"z": "10.214.3.1", "x": "10.214.3.2", "y": "10.214.3.3"},
	}, {
		name: "a Service with a loadBalancerClass is left alone, but a pool address in its status is taken",
		services: []corev1.Service{
			lbService("classed", 1, lb, other), lbService("classed-holding", 1, lb, other, "10.214.3.1"),
			lbService("a", 2, lb, ""),
		},
		want: map[string]string{"a": "10.214.3.2"},
	}, {
		name: "Services of other types get nothing",
		services: []corev1.Service{
			lbService("cluster-ip", 1, corev1.ServiceTypeClusterIP, ""), lbService("node-port", 1, corev1.ServiceTypeNodePort, ""),
			lbService("external", 1, corev1.ServiceTypeExternalName, ""), lbService("default-type", 1, "", ""),
		},
		want: map[string]string{},
	}, {
		name: "a Service with an address outside the pool keeps it, which takes nothing",
		services: []corev1.Service{
			lbService("elsewhere", 1, lb, "", "192.0.2.1"), lbService("a", 2, lb, ""),
		},
		want: map[string]string{"a": "10.214.3.1"},
	}, {
		name:     "a Service being deleted gets nothing",
		services: []corev1.Service{deleting},
		want:     map[string]string{},
	}, {
		name:     "the last address given is .254, not the broadcast .255",
		held:     253,
		services: []corev1.Service{lbService("a", 2, lb, ""), lbService("b", 3, lb, "")},
		want:     map[string]string{"a": "10.214.3.254"},
		waiting:  []string{"b"},
	}, {
		name:     "a /30 gives its two host addresses",
		pool:     "10.214.3.4/30",
		services: []corev1.Service{lbService("a", 1, lb, ""), lbService("b", 2, lb, ""), lbService("c", 3, lb, "")},
		want:     map[string]string{"a": "10.214.3.5", "b": "10.214.3.6"},
		waiting:  []string{"c"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := netip.MustParsePrefix(firstNonEmpty(tc.pool, "10.214.3.0/24"))
			services := slices.Clone(tc.services)
			for i := range tc.held {
				services = append(services, lbService(fmt.Sprintf("held-%d", i+1), 0, lb, "", addAddr(pool.Addr(), i+1).String()))
			}
			assign, waiting := planLoadBalancerIPs(services, pool)
			got := map[string]string{}
			for _, a := range assign {
				got[a.service.Name] = a.ip.String()
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("assigned %v, want %v", got, tc.want)
			}
			var gotWaiting []string
			for _, s := range waiting {
				gotWaiting = append(gotWaiting, s.Name)
			}
			if !slices.Equal(gotWaiting, tc.waiting) {
				t.Errorf("waiting %v, want %v", gotWaiting, tc.waiting)
			}
		})
	}
}

// TestLoadBalancerAllocatorKeepsAddressesAndFreesThemOnDelete runs the
// allocator against a fake API server that already holds a Service with
// an address, as after a restart: the address is kept and a new Service
// gets the next; a classed Service is left alone; a deleted Service's
// address goes to the next new one; stop ends the allocator.
func TestLoadBalancerAllocatorKeepsAddressesAndFreesThemOnDelete(t *testing.T) {
	pool := netip.MustParsePrefix("10.214.3.0/24")
	kept, classed := lbService("kept", 1, corev1.ServiceTypeLoadBalancer, "", "10.214.3.1"), lbService("classed", 1, corev1.ServiceTypeLoadBalancer, "example.com/other")
	client := fake.NewClientset(&kept, &classed)
	// The fake API server has no resource versions: a Service created
	// before the informer watches would go unseen, so wait for the watch.
	watching, once := make(chan struct{}), sync.Once{}
	client.PrependWatchReactor("services", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, err := startLoadBalancer(ctx, client, pool, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	<-watching

	services := client.CoreV1().Services("default")
	create := func(name string) {
		t.Helper()
		s := lbService(name, 2, corev1.ServiceTypeLoadBalancer, "")
		if _, err := services.Create(ctx, &s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ingress := func(name string) string {
		s, err := services.Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return ""
		}
		return s.Status.LoadBalancer.Ingress[0].IP
	}
	waitIngress := func(name, want string) {
		t.Helper()
		for ingress(name) == "" && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		if got := ingress(name); got != want {
			t.Fatalf("Service %s has address %q, want %s", name, got, want)
		}
	}

	create("first")
	waitIngress("first", "10.214.3.2")
	if got := ingress("kept"); got != "10.214.3.1" {
		t.Errorf("Service kept has address %q, want 10.214.3.1 still", got)
	}
	if err := services.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create("second")
	waitIngress("second", "10.214.3.1")
	// Every pass lists the classed Service too, and it is older than
	// second: had it been served, it would hold an address by now.
	if got := ingress("classed"); got != "" {
		t.Errorf("Service classed, of another loadBalancerClass, has address %s", got)
	}

	stopped = true
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end the allocator within 10 s")
	}
}
