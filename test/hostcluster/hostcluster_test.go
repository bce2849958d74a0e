package hostcluster

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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kao-io/kao/internal/testenv"
)

// TestWorkloadsBecomeReadyAndRun starts a host cluster, checks that a
// StatefulSet with claims and a Deployment become ready on the simulated
// nodes, and that the kubelet runs a real program (etcd, from the tools
// cache) of a pod behind a LoadBalancer Service and a NodePort Service the
// test reaches: at the load balancer's address, and at every node's
// address and the node port.
func TestWorkloadsBecomeReadyAndRun(t *testing.T) {
	c := Start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "hc-test"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := func(name string) map[string]string { return map[string]string{"app.kubernetes.io/name": name} }

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(2)),
			ServiceName:         "db",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels("db")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels("db")},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "example.test/db:1", Command: []string{"db"}}}},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: ptr.To(c.StorageClass),
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	etcdDir := testenv.ToolDir(t, "etcd")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels("kv")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels("kv")},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name: "kv", Image: "registry.test:5000/etcd:3.6.6-0",
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						Command: []string{"etcd", "--name=$(POD_NAME)", "--data-dir=/var/lib/etcd",
							"--listen-client-urls=http://0.0.0.0:2379", "--advertise-client-urls=http://kv.hc-test.svc.cluster.local:80",
							"--listen-peer-urls=http://0.0.0.0:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
							"--initial-cluster=$(POD_NAME)=http://127.0.0.1:2380"},
						Ports:        []corev1.ContainerPort{{Name: "client", ContainerPort: 2379}},
						VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/var/lib/etcd"}},
					}},
					Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, Selector: labels("kv"),
			Ports: []corev1.ServicePort{{Name: "client", Port: 80, TargetPort: intstr.FromString("client")}},
		},
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodePortSvc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kv-node", Namespace: ns},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: labels("kv"),
			Ports: []corev1.ServicePort{{Name: "client", Port: 2379, TargetPort: intstr.FromString("client")}},
		},
	}
	nodePortSvc, err := c.Client.CoreV1().Services(ns).Create(ctx, nodePortSvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := nodePortSvc.Spec.Ports[0].NodePort
	k := c.RunPods(t, RunOptions{
		Namespace: ns, Registry: "registry.test:5000", Components: []string{"kv"},
		Images: map[string]Image{"etcd": {Dir: etcdDir, Tag: "3.6.6-0"}},
	})

	for {
		s, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "db", metav1.GetOptions{})
		d, err2 := c.Client.AppsV1().Deployments(ns).Get(ctx, "kv", metav1.GetOptions{})
		if err == nil && err2 == nil && s.Status.ReadyReplicas == 2 && d.Status.ReadyReplicas == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("workloads not ready: StatefulSet %+v, Deployment %+v", s.Status, d.Status)
		}
		time.Sleep(300 * time.Millisecond)
	}
	claims, err := c.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 2 {
		t.Fatalf("claims %v, %v", claims, err)
	}
	for _, pvc := range claims.Items {
		if pvc.Status.Phase != corev1.ClaimBound {
			t.Errorf("claim %s is %s, want Bound", pvc.Name, pvc.Status.Phase)
		}
	}

	// The LoadBalancer address reaches the real etcd through the proxy.
	var body string
	for {
		s, err := c.Client.CoreV1().Services(ns).Get(ctx, "kv", metav1.GetOptions{})
		if err == nil && len(s.Status.LoadBalancer.Ingress) == 1 {
			resp, err := http.Get("http://" + s.Status.LoadBalancer.Ingress[0].IP + ":80/health")
			if err == nil {
				data, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				body = string(data)
				if strings.Contains(body, `"health":"true"`) {
					break
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("etcd did not answer through the load balancer address (last %q); errors %v; logs:\n%s", body, k.Errors(), k.Logs(20))
		}
		time.Sleep(300 * time.Millisecond)
	}

	// Every node has its loopback address as InternalIP (kwok kept it), and
	// the node port answers there.
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != len(c.NodeAddresses) {
		t.Errorf("%d nodes, %d node addresses", len(nodes.Items), len(c.NodeAddresses))
	}
	for _, n := range nodes.Items {
		internal := ""
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				internal = a.Address
			}
		}
		if internal == "" || internal != c.NodeAddresses[n.Name] {
			t.Errorf("node %s has InternalIP %q, want %q", n.Name, internal, c.NodeAddresses[n.Name])
			continue
		}
		url := fmt.Sprintf("http://%s:%d/health", internal, nodePort)
		resp, err := http.Get(url)
		if err != nil {
			t.Errorf("etcd does not answer at node %s's node port: %v", n.Name, err)
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if !strings.Contains(string(data), `"health":"true"`) {
			t.Errorf("%s: %q", url, data)
		}
	}
	if errs := k.Errors(); len(errs) > 0 {
		t.Errorf("kubelet errors: %v", errs)
	}
}
