package node_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kao-io/kao/test/node"
)

// TestLoadBalancerServicesGetPoolAddressesThatForward proves the node's
// load-balancer implementation: a Service of type LoadBalancer gets the
// lowest address of the pool, and a request from the machine to that
// address and the Service's port is answered by the Deployment's pods
// (kube-proxy's rules), as is one from a pod; a second Service gets the
// next address; a Service with a loadBalancerClass is left alone;
// deleting a Service, or making it a ClusterIP Service, frees its address
// for the next one; Stop removes the machine's route to the pool.
func TestLoadBalancerServicesGetPoolAddressesThatForward(t *testing.T) {
	// An address appears in tens of milliseconds, and kube-proxy forwards
	// it within seconds.
	const waitAddress, waitAnswer = 10 * time.Second, 30 * time.Second
	c := node.Start(t, node.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	importEcho(ctx, t, c)
	client, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := netip.ParsePrefix(c.LoadBalancerCIDR())
	if err != nil {
		t.Fatal(err)
	}
	// The pool's .N.
	poolAddr := func(n int) string {
		b := pool.Addr().As4()
		b[3] += byte(n)
		return netip.AddrFrom4(b).String()
	}
	if route := ipRoute(t, pool.String()); !strings.Contains(route, "via "+c.NodeIP()+" ") {
		t.Errorf("the machine's route to the pool %s is %q, want one via the node %s", pool, route, c.NodeIP())
	}

	const ns, name, replicas = "default", "echo", int32(2)
	labels := map[string]string{"app": name}
	_, err = client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: echoPodSpec()},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitAvailable(ctx, t, client, ns, name, replicas)
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	podNames := map[string]bool{}
	for _, p := range pods.Items {
		podNames[p.Name] = true
	}

	services := client.CoreV1().Services(ns)
	// create creates a LoadBalancer Service in front of the pods on port,
	// of loadBalancerClass class if not empty.
	create := func(svc string, port int32, class string) {
		t.Helper()
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeLoadBalancer,
				Selector: labels,
				Ports:    []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(8080)}},
			},
		}
		if class != "" {
			s.Spec.LoadBalancerClass = &class
		}
		if _, err := services.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ingress := func(svc string) string {
		t.Helper()
		s, err := services.Get(ctx, svc, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Status.LoadBalancer.Ingress) == 0 {
			return ""
		}
		return s.Status.LoadBalancer.Ingress[0].IP
	}
	// assigned waits for Service svc's address, which must be want, and
	// says how long it took.
	assigned := func(svc, want string) {
		t.Helper()
		start := time.Now()
		for ingress(svc) == "" && time.Since(start) < waitAddress {
			time.Sleep(20 * time.Millisecond)
		}
		if got := ingress(svc); got != want {
			t.Fatalf("Service %s has address %q, want %s (the lowest free of %s)", svc, got, want, pool)
		}
		t.Logf("Service %s got %s %s after it was created", svc, want, time.Since(start).Round(time.Millisecond))
	}
	// answered waits until requests from this process to addr are
	// answered by every pod, and says how long the first answer took. A
	// new connection each time, so that kube-proxy picks a pod each time;
	// until kube-proxy's rules are there, a connection attempt goes
	// unanswered, and is given up soon.
	httpClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext,
	}}
	answered := func(addr string) {
		t.Helper()
		start, seen := time.Now(), map[string]bool{}
		var first time.Duration
		url := "http://" + addr + "/"
		wctx, wcancel := context.WithTimeout(ctx, waitAnswer)
		defer wcancel()
		poll(wctx, t, "every pod to answer "+url, func() (bool, string) {
			resp, err := httpClient.Get(url)
			if err != nil {
				return false, err.Error()
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			pod := strings.TrimPrefix(strings.TrimSpace(string(body)), "echo from ")
			if !podNames[pod] {
				return false, fmt.Sprintf("answer %q is from none of the pods %v", body, podNames)
			}
			if first == 0 {
				first = time.Since(start)
			}
			seen[pod] = true
			return len(seen) == len(podNames), fmt.Sprintf("answered: %v", seen)
		})
		t.Logf("%s answered %s after its address was seen, by every pod after %s", url, first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}

	create("first", 80, "")
	assigned("first", poolAddr(1))
	answered(net.JoinHostPort(poolAddr(1), "80"))

	// The classed Service is older than second: every pass that gives
	// second an address lists it first, so had it been served it would
	// have taken .2 and second .3.
	create("classed", 80, "example.com/other")
	create("second", 8000, "")
	assigned("second", poolAddr(2))
	answered(net.JoinHostPort(poolAddr(2), "8000"))
	if got := ingress("classed"); got != "" {
		t.Errorf("Service classed, of loadBalancerClass example.com/other, has address %s", got)
	}

	// Deleted, first frees .1; a new Service on another port gets it, and
	// kube-proxy forwards the address's new port.
	if err := services.Delete(ctx, "first", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	create("third", 81, "")
	assigned("third", poolAddr(1))
	answered(net.JoinHostPort(poolAddr(1), "81"))
	// Pods reach the address too: kube-proxy's rules take it in the
	// node's network namespace before any route does.
	url := "http://" + net.JoinHostPort(poolAddr(1), "81") + "/"
	pod := pods.Items[0].Name
	if out, err := c.Kubectl(ctx, "exec", "-n", ns, pod, "--", "/echo", "get", url).CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "200 echo from "+name+"-") {
		t.Errorf("from pod %s, GET %s: %v\n%s\nwant 200 echo from %s-...", pod, url, err, out, name)
	}

	// Made a ClusterIP Service, second frees .2 (the API server clears its
	// status).
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := services.Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Type = corev1.ServiceTypeClusterIP
		_, err = services.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	create("fourth", 80, "")
	assigned("fourth", poolAddr(2))
	if got := ingress("second"); got != "" {
		t.Errorf("Service second, now a ClusterIP Service, still has address %s", got)
	}

	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if route := ipRoute(t, pool.String()); route != "" {
		t.Errorf("after Stop, the machine still routes the pool: %q", route)
	}
}

// ipRoute returns the machine's route to prefix, or "".
func ipRoute(t *testing.T, prefix string) string {
	t.Helper()
	out, err := exec.Command("ip", "route", "show", prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show %s: %v\n%s", prefix, err, out)
	}
	return strings.TrimSpace(string(out))
}
