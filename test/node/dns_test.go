package node_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kao-io/kao/test/node"
)

// TestClusterDNSResolvesServicesAndStatefulSetPods proves the node has a
// real cluster DNS that pods use through their resolv.conf: from a pod in
// another namespace, a Service's name in its long and short forms resolves
// to the Service's cluster IP, the name of each StatefulSet pod behind a
// headless Service to that pod's IP and the headless Service to both, a
// cluster IP and a pod IP back to their names, and names that do not exist
// to NXDOMAIN.
func TestClusterDNSResolvesServicesAndStatefulSetPods(t *testing.T) {
	c := node.Start(t, node.Options{})
	t.Logf("cluster up, its DNS answering, in %s", c.StartupDuration().Round(10*time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	importEcho(ctx, t, c)
	client, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	dns, err := client.CoreV1().Services(metav1.NamespaceSystem).Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dns.Spec.ClusterIP != c.DNSServiceIP() {
		t.Errorf("Service kube-system/kube-dns has cluster IP %s, want %s", dns.Spec.ClusterIP, c.DNSServiceIP())
	}

	// The StatefulSet and its Services live in a namespace of their own; the
	// pod that asks runs in default, so the short forms need the search
	// path to find them.
	const ns, sts, headless, front = "dns-test", "web", "web", "front"
	labels := map[string]string{"app": sts}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ports := []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: headless}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: labels, Ports: ports}},
		{ObjectMeta: metav1.ObjectMeta{Name: front}, Spec: corev1.ServiceSpec{Selector: labels, Ports: ports}},
	} {
		if _, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: sts},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr(int32(2)),
			ServiceName:         headless,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template:            corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: echoPodSpec()},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The pod that asks: not one of the StatefulSet's, whose /etc/hosts
	// (the kubelet's) holds its own name.
	const asker = "dns-client"
	if _, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: asker},
		Spec:       echoPodSpec(),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the StatefulSet and pod "+asker+" to be Ready", func() (bool, string) {
		s, err := client.AppsV1().StatefulSets(ns).Get(ctx, sts, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p, err := client.CoreV1().Pods("default").Get(ctx, asker, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return s.Status.ReadyReplicas == 2 && podReady(p), fmt.Sprintf("%d of 2 StatefulSet pods ready, %s ready: %t", s.Status.ReadyReplicas, asker, podReady(p))
	})

	ip := func(get func() (string, error)) string {
		t.Helper()
		v, err := get()
		if err != nil || v == "" {
			t.Fatalf("reading an address: %q, %v", v, err)
		}
		return v
	}
	podIP := func(name string) func() (string, error) {
		return func() (string, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return p.Status.PodIP, nil
		}
	}
	clusterIP := func(ns, name string) func() (string, error) {
		return func() (string, error) {
			s, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return s.Spec.ClusterIP, nil
		}
	}
	web0, web1 := ip(podIP("web-0")), ip(podIP("web-1"))
	frontIP, apiIP := ip(clusterIP(ns, front)), ip(clusterIP("default", "kubernetes"))
	both := []string{web0, web1}
	sort.Strings(both)

	for _, tc := range []struct {
		// name is what the pod looks up (echo lookup NAME).
		name string
		// want is what it must print: the addresses, sorted, or NXDOMAIN.
		want string
	}{
		{front + "." + ns + ".svc.cluster.local", frontIP},
		{front + "." + ns + ".svc", frontIP},
		{front + "." + ns, frontIP},
		{"kubernetes.default", apiIP},
		{"web-0." + headless + "." + ns + ".svc.cluster.local", web0},
		{"web-1." + headless + "." + ns + ".svc", web1},
		{headless + "." + ns + ".svc.cluster.local", strings.Join(both, " ")},
		{frontIP, front + "." + ns + ".svc.cluster.local."},
		// A pod's address names it under every Service it backs: by its
		// hostname under the headless one, by its dashed address under front.
		{web0, strings.ReplaceAll(web0, ".", "-") + "." + front + "." + ns + ".svc.cluster.local. web-0." + headless + "." + ns + ".svc.cluster.local."},
		{"nope." + ns + ".svc.cluster.local", "NXDOMAIN"},
		{"web-2." + headless + "." + ns + ".svc.cluster.local", "NXDOMAIN"},
	} {
		// The EndpointSlices of the pods that just became Ready may reach
		// CoreDNS a moment after the test saw them: ask again for a while.
		caseCtx, caseCancel := context.WithTimeout(ctx, 20*time.Second)
		poll(caseCtx, t, fmt.Sprintf("pod %s to resolve %s to %s", asker, tc.name, tc.want), func() (bool, string) {
			out, err := c.Kubectl(caseCtx, "exec", "-n", "default", asker, "--", "/echo", "lookup", tc.name).Output()
			got := strings.TrimSpace(string(out))
			// echo lookup fails exactly when the name does not exist.
			if failed := err != nil; failed != (tc.want == "NXDOMAIN") {
				return false, fmt.Sprintf("%q, %v%s", got, err, stderr(err))
			}
			return got == tc.want, got
		})
		caseCancel()
	}
}

// echoPodSpec runs echoImage, Ready once it serves.
func echoPodSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{
		Name:            "echo",
		Image:           echoImage,
		ImagePullPolicy: corev1.PullNever,
		Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1,
		},
	}}}
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// stderr is what a failed command wrote to its standard error.
func stderr(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(exit.Stderr))
	}
	return ""
}
