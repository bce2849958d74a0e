package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kao-io/kao/internal/podforward"
	"github.com/kao-io/kao/test/node"
)

// echoImage is the test image: test/node/cmd/echo.
const echoImage = "kao.test/echo:1"

// TestNodeRunsADeploymentBehindAService proves the node is a real one: a
// Deployment of a locally built image becomes Ready on the real kubelet, a
// ClusterIP Service reaches its pods from the machine (kube-proxy's rules),
// pod logs and exec work through the API server, and a pod reaches the API
// server with its service account and a Service back to a pod.
func TestNodeRunsADeploymentBehindAService(t *testing.T) {
	testStart := time.Now()
	c := node.Start(t, node.Options{})
	t.Logf("cluster up in %s", c.StartupDuration().Round(10*time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	importEcho(ctx, t, c)
	client, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}

	const ns, name, replicas = "default", "echo", int32(2)
	labels := map[string]string{"app": name}
	deployStart := time.Now()
	_, err = client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:            name,
					Image:           echoImage,
					ImagePullPolicy: corev1.PullNever,
					Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	waitAvailable(ctx, t, client, ns, name, replicas)
	t.Logf("Deployment available in %s", time.Since(deployStart).Round(10*time.Millisecond))

	// The Service from the machine: kube-proxy's rules in the node's network
	// spread the connections over both pods.
	url := fmt.Sprintf("http://%s/", svc.Spec.ClusterIP)
	seen := map[string]bool{}
	// A new connection each time, so that kube-proxy picks a pod each time.
	httpClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	poll(ctx, t, "both pods to answer through Service "+url, func() (bool, string) {
		resp, err := httpClient.Get(url)
		if err != nil {
			return false, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		if s := strings.TrimSpace(string(body)); strings.HasPrefix(s, "echo from ") {
			seen[strings.TrimPrefix(s, "echo from ")] = true
		}
		return len(seen) == int(replicas), fmt.Sprintf("answered: %v", seen)
	})

	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("listing the pods: %v (%d pods)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	if pod.Spec.NodeName != c.NodeName() || !strings.HasPrefix(pod.Status.PodIP, strings.TrimSuffix(c.PodCIDR(), "0/24")) {
		t.Errorf("pod %s runs on %q at %s, want node %s and an address in %s", pod.Name, pod.Spec.NodeName, pod.Status.PodIP, c.NodeName(), c.PodCIDR())
	}

	// Logs and exec go from the API server to the kubelet.
	logs, err := c.Kubectl(ctx, "logs", "-n", ns, pod.Name).CombinedOutput()
	if err != nil || !strings.Contains(string(logs), "Listening on :8080") {
		t.Errorf("kubectl logs %s: %v\n%s", pod.Name, err, logs)
	}
	out, err := c.Kubectl(ctx, "exec", "-n", ns, pod.Name, "--", "/echo", "say", "hello", "from", "exec").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello from exec" {
		t.Errorf("kubectl exec %s: %v\n%s", pod.Name, err, out)
	}
	// From a pod: the API server through the kubernetes Service, with the
	// pod's service account (what an operator running as a pod does), and
	// the echo Service (back to a pod on the same bridge).
	api, err := client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		// url is fetched from inside the pod.
		url string
		// want is the start of what echo get prints.
		want string
	}{
		// The default service account may not read namespaces, so 403 proves
		// that the API server authenticated the pod's token.
		{"https://" + api.Spec.ClusterIP + "/api/v1/namespaces/default", `403 {"kind":"Status"`},
		{"https://" + api.Spec.ClusterIP + "/version", `200 {`},
		{url, "200 echo from echo-"},
	} {
		out, err := c.Kubectl(ctx, "exec", "-n", ns, pod.Name, "--", "/echo", "get", tc.url).CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), tc.want) {
			t.Errorf("from pod %s, GET %s: %v\n%s\nwant %s...", pod.Name, tc.url, err, out, tc.want)
		}
	}
	checkPortForward(ctx, t, c, ns, pod.Name)
	t.Logf("test body done %s after the start of the test", time.Since(testStart).Round(10*time.Millisecond))
}

// checkPortForward reaches the echo pod through the API server and the
// kubelet with internal/podforward, as kao reaches the etcd of a remote
// host cluster: two connections at once over one tunnel answer, and a port
// nothing listens on fails with the kubelet's word for it.
func checkPortForward(ctx context.Context, t *testing.T, c *node.Cluster, ns, pod string) {
	t.Helper()
	pf, err := podforward.New(c.Config(), ns)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pf.Close() }()
	get := func() (string, error) {
		conn, err := pf.Dial(ctx, pod, 8080)
		if err != nil {
			return "", err
		}
		defer func() { _ = conn.Close() }()
		if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: echo\r\n\r\n"); err != nil {
			return "", err
		}
		out, err := io.ReadAll(conn)
		return string(out), err
	}
	answers := make(chan string, 2)
	for range 2 {
		go func() {
			out, err := get()
			answers <- fmt.Sprintf("%s (%v)", out, err)
		}()
	}
	for range 2 {
		if got := <-answers; !strings.HasPrefix(got, "HTTP/1.0 200 OK") || !strings.Contains(got, "echo from "+pod) || !strings.HasSuffix(got, "(<nil>)") {
			t.Errorf("GET / through a port-forward to %s: %s", pod, got)
		}
	}
	conn, err := pf.Dial(ctx, pod, 9)
	if err != nil {
		t.Fatalf("a connection to port 9 of %s: %v, want the error at the first read", pod, err)
	}
	defer func() { _ = conn.Close() }()
	_, _ = io.WriteString(conn, "x")
	if _, err := io.ReadAll(conn); err == nil || !strings.Contains(err.Error(), "port 9 of pod "+ns+"/"+pod) || !strings.Contains(err.Error(), "refused") {
		t.Errorf("reading from port 9 of %s, where nothing listens: %v, want the kubelet's refusal", pod, err)
	}
}

// importEcho builds echoImage from test/node/cmd/echo and imports it into
// the node.
func importEcho(ctx context.Context, t *testing.T, c *node.Cluster) {
	t.Helper()
	archive, err := node.BuildImage(ctx, "./test/node/cmd/echo", node.Image{Name: echoImage}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(archive); err != nil {
		t.Fatal(err)
	}
}

// poll checks cond every 250ms until it holds, failing the test with cond's
// last word when ctx ends.
func poll(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; last: %s", what, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func ptr[T any](v T) *T { return &v }

// waitAvailable polls until Deployment ns/name has replicas available.
func waitAvailable(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	poll(ctx, t, "the Deployment to be available", func() (bool, string) {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == replicas, fmt.Sprintf("%d of %d available", d.Status.AvailableReplicas, replicas)
	})
}
