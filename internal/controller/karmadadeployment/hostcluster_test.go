package karmadadeployment

import (
	"context"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
)

func node(name string, ready bool, addrs ...corev1.NodeAddress) corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Addresses:  addrs,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
		},
	}
}

func internalIP(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
}

func externalIP(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a}
}

func TestPickNodeAddress(t *testing.T) {
	tests := []struct {
		name     string        // what the cluster looks like
		nodes    []corev1.Node // the host cluster's nodes
		previous string        // the address chosen before
		want     string        // the address to use
	}{
		{name: "no nodes", want: ""},
		{name: "first ready node by name", nodes: []corev1.Node{
			node("b", true, internalIP("10.0.0.2")), node("a", true, internalIP("10.0.0.1")),
		}, want: "10.0.0.1"},
		{name: "an ExternalIP before any InternalIP", nodes: []corev1.Node{
			node("a", true, internalIP("10.0.0.1")), node("b", true, internalIP("10.0.0.2"), externalIP("192.0.2.2")),
		}, want: "192.0.2.2"},
		{name: "ready nodes before others", nodes: []corev1.Node{
			node("a", false, externalIP("192.0.2.1")), node("b", true, internalIP("10.0.0.2")),
		}, want: "10.0.0.2"},
		{name: "a not-ready node when no node is ready", nodes: []corev1.Node{
			node("a", false, internalIP("10.0.0.1")),
		}, want: "10.0.0.1"},
		{name: "the previous choice while a node has it", nodes: []corev1.Node{
			node("a", true, externalIP("192.0.2.1")), node("b", false, internalIP("10.0.0.2")),
		}, previous: "10.0.0.2", want: "10.0.0.2"},
		{name: "a new choice once no node has the previous address", nodes: []corev1.Node{
			node("a", true, internalIP("10.0.0.1")),
		}, previous: "10.0.0.9", want: "10.0.0.1"},
		{name: "host names are no address", nodes: []corev1.Node{
			node("a", true, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a.example"}),
		}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pickNodeAddress(tt.nodes, tt.previous); got != tt.want {
				t.Errorf("pickNodeAddress = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWorkloadStates(t *testing.T) {
	dep := func(gen, observed int64, replicas, updated, ready, available, total int32) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Generation: gen},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas)},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: total, UpdatedReplicas: updated,
				ReadyReplicas: ready, AvailableReplicas: available},
		}
	}
	tests := []struct {
		name      string             // the rollout's state
		d         *appsv1.Deployment // the Deployment
		wantReady bool               // whether the component is ready
		wantMsg   string             // what status says
	}{
		{"complete", dep(2, 2, 2, 2, 2, 2, 2), true, "2/2 replicas ready"},
		{"not observed", dep(3, 2, 2, 2, 2, 2, 2), false, "has not seen generation 3"},
		{"half updated", dep(2, 2, 2, 1, 2, 2, 3), false, "rolling out: 1/2 replicas updated, 2 ready"},
		{"old replicas left", dep(2, 2, 2, 2, 2, 2, 3), false, "1 old replicas still run"},
		{"not ready", dep(2, 2, 2, 2, 1, 1, 2), false, "1/2 replicas ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready, msg := deploymentState(tt.d)
			if ready != tt.wantReady || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("deploymentState = %v %q, want %v %q", ready, msg, tt.wantReady, tt.wantMsg)
			}
		})
	}

	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To(int32(3))},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, UpdatedReplicas: 3, ReadyReplicas: 3,
			CurrentRevision: "r1", UpdateRevision: "r1"},
	}
	if ready, msg := statefulSetState(sts); !ready || msg != "3/3 replicas ready" {
		t.Errorf("statefulSetState = %v %q, want ready", ready, msg)
	}
	sts.Status.UpdateRevision = "r2"
	if ready, _ := statefulSetState(sts); ready {
		t.Error("a StatefulSet between revisions is ready")
	}
}

func TestImageVersion(t *testing.T) {
	for image, want := range map[string]string{
		"registry.dc1.example:5000/kube-apiserver:v1.35.4":                    "v1.35.4",
		"registry.dc1.example:5000/etcd:3.6.6-0":                              "v3.6.6",
		"registry.dc1.example:5000/karmada/karmada-webhook:v1.18.1":           "v1.18.1",
		"registry.dc1.example:5000/karmada/karmada-webhook":                   "",
		"registry.dc1.example:5000/karmada/karmada-webhook:v1.18.1@sha256:ab": "v1.18.1",
	} {
		if got := imageVersion(image); got != want {
			t.Errorf("imageVersion(%q) = %q, want %q", image, got, want)
		}
	}
}

func TestRecordEtcdPodHealth(t *testing.T) {
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
		Mode: kaov1.ContainerizedMode, HostCluster: &kaov1.HostClusterSpec{Namespace: "kd", DNSDomain: "dc1.local"},
	}}
	members := []string{"karmada-etcd-0", "karmada-etcd-1", "karmada-etcd-2"}
	tests := []struct {
		name       string          // the pods' state
		ready      map[string]bool // pod readiness by name
		apiProblem string          // karmada-apiserver's etcd check failure
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		{"all ready", map[string]bool{"karmada-etcd-0": true, "karmada-etcd-1": true, "karmada-etcd-2": true}, "",
			metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason},
		{"one missing", map[string]bool{"karmada-etcd-0": true, "karmada-etcd-1": true}, "",
			metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason},
		{"two not ready", map[string]bool{"karmada-etcd-0": true, "karmada-etcd-1": false, "karmada-etcd-2": false}, "",
			metav1.ConditionFalse, kaov1.EtcdQuorumLostReason},
		{"ready pods but karmada-apiserver's check fails", map[string]bool{"karmada-etcd-0": true, "karmada-etcd-1": true, "karmada-etcd-2": true},
			"karmada-apiserver's etcd check fails: 500", metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kd := kd.DeepCopy()
			recordEtcdPodHealth(kd, members, tt.ready, true, tt.apiProblem)
			c := conditionOf(kd, kaov1.EtcdHealthyCondition)
			if c.Status != tt.wantStatus || c.Reason != tt.wantReason {
				t.Fatalf("EtcdHealthy = %s/%s (%s), want %s/%s", c.Status, c.Reason, c.Message, tt.wantStatus, tt.wantReason)
			}
			if got := kd.Status.Etcd.Members[0].ClientURL; got != "https://karmada-etcd-0.karmada-etcd.kd.svc.dc1.local:2379" {
				t.Errorf("member client URL %q", got)
			}
		})
	}
}

func conditionOf(kd *kaov1.KarmadaDeployment, t string) metav1.Condition {
	for _, c := range kd.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// TestExposeAPIServer applies karmada-apiserver's Service to a real API
// server (the test environment's, as a host cluster) for every service type
// and checks the endpoint kao derives from what the cluster gave it.
func TestExposeAPIServer(t *testing.T) {
	controllertest.RequireEnv(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(controllertest.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []corev1.Node{
		node("kao-expose-b", true, internalIP("10.20.0.2")),
		node("kao-expose-a", false, internalIP("10.20.0.1")),
	} {
		created, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: n.ObjectMeta}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = n.Status
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	}
	newKD := func(ns string, typ kaov1.ServiceType, endpoint string) *kaov1.KarmadaDeployment {
		return &kaov1.KarmadaDeployment{
			ObjectMeta: metav1.ObjectMeta{Name: "kd", UID: types.UID("uid-" + ns)},
			Spec: kaov1.KarmadaDeploymentSpec{
				Mode:        kaov1.ContainerizedMode,
				HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns, DNSDomain: "dc1.local"},
				APIServer:   kaov1.APIServerSpec{ServiceType: typ, Endpoint: endpoint, SecurePort: 6443},
			},
		}
	}
	hostFor := func(kd *kaov1.KarmadaDeployment) *pipeline.HostCluster {
		return &pipeline.HostCluster{Client: cs, Namespace: pipeline.HostNamespace(kd), DNSDomain: pipeline.HostDNSDomain(kd), InCluster: true}
	}

	t.Run("ClusterIP is the Service's DNS name", func(t *testing.T) {
		kd := newKD("kao-expose-cip", kaov1.ClusterIPService, "")
		got, err := exposeAPIServer(ctx, kd, hostFor(kd))
		if err != nil || got != "karmada-apiserver.kao-expose-cip.svc.dc1.local:6443" {
			t.Fatalf("endpoint %q, %v", got, err)
		}
		svc, err := cs.CoreV1().Services("kao-expose-cip").Get(ctx, pipeline.HostAPIServer, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Selector[kaov1.DeploymentUIDLabel] != "uid-kao-expose-cip" || svc.Spec.Ports[0].TargetPort.StrVal != "https" {
			t.Errorf("Service %+v selects or targets the wrong pods", svc.Spec)
		}
	})
	t.Run("NodePort is a ready node's address and the node port", func(t *testing.T) {
		kd := newKD("kao-expose-np", kaov1.NodePortService, "")
		got, err := exposeAPIServer(ctx, kd, hostFor(kd))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := cs.CoreV1().Services("kao-expose-np").Get(ctx, pipeline.HostAPIServer, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "10.20.0.2:" + strconv.Itoa(int(svc.Spec.Ports[0].NodePort)); got != want {
			t.Fatalf("endpoint %q, want %q", got, want)
		}
	})
	t.Run("LoadBalancer waits for the load balancer's address", func(t *testing.T) {
		kd := newKD("kao-expose-lb", kaov1.LoadBalancerService, "")
		_, err := exposeAPIServer(ctx, kd, hostFor(kd))
		if pending, ok := reason.From(err); !ok || pending.Kind != reason.Wait || pending.Reason != kaov1.ExposurePendingReason ||
			!strings.Contains(pending.Message, "load balancer") {
			t.Fatalf("err = %v, want an ExposurePending wait", err)
		}
		svc, err := cs.CoreV1().Services("kao-expose-lb").Get(ctx, pipeline.HostAPIServer, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.dc1.example"}}
		if _, err := cs.CoreV1().Services("kao-expose-lb").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := exposeAPIServer(ctx, kd, hostFor(kd))
		if err != nil || got != "lb.dc1.example:6443" {
			t.Fatalf("endpoint %q, %v", got, err)
		}
	})
	t.Run("an endpoint in the spec wins", func(t *testing.T) {
		kd := newKD("kao-expose-ep", kaov1.NodePortService, "karmada.dc1.example:443")
		if got, err := exposeAPIServer(ctx, kd, hostFor(kd)); err != nil || got != "karmada.dc1.example:443" {
			t.Fatalf("endpoint %q, %v", got, err)
		}
	})
	t.Run("another deployment's Service is refused", func(t *testing.T) {
		kd := newKD("kao-expose-cip", kaov1.ClusterIPService, "")
		kd.UID = "someone-else"
		_, err := exposeAPIServer(ctx, kd, hostFor(kd))
		if bad, ok := reason.From(err); !ok || bad.Reason != kaov1.PrerequisitesMissingReason ||
			!strings.Contains(bad.Message, "belongs to another KarmadaDeployment (uid uid-kao-expose-cip)") {
			t.Fatalf("err = %v, want a refusal naming the owner", err)
		}
	})
}

// TestInClusterKubeconfigReachesTheCluster renders the operator's own client
// configuration as a run's kubeconfig and uses it, as kubernetes.core would.
func TestInClusterKubeconfigReachesTheCluster(t *testing.T) {
	controllertest.RequireEnv(t)
	g := &pipeline.Gatherer{InClusterConfig: controllertest.Env.Config, Options: pipeline.Options{Policy: controllertest.TestPolicy}}
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
		Mode: kaov1.ContainerizedMode, HostCluster: &kaov1.HostClusterSpec{InCluster: true},
	}}
	hc, err := g.HostCluster(context.Background(), kd)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(hc.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("the rendered kubeconfig does not reach the cluster: %v", err)
	}
	if hc.Namespace != "karmada-system" || hc.DNSDomain != "cluster.local" || len(hc.Secrets) < 2 {
		t.Errorf("namespace %q, domain %q, %d secrets to redact", hc.Namespace, hc.DNSDomain, len(hc.Secrets))
	}
}

// TestClaimEtcdVolumes: a deployment starts on etcd claims it made, takes
// over those a deleted deployment of its own namespace left only when
// kao.io/take-over-from names that deployment, and never uses claims of
// another namespace's deployment or claims kao did not make; a refusal names
// no deployment of another namespace.
func TestClaimEtcdVolumes(t *testing.T) {
	controllertest.RequireEnv(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(controllertest.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	const mine, old, stranger = "11111111-0000-4000-8000-000000000001", "22222222-0000-4000-8000-000000000002", "33333333-0000-4000-8000-000000000003"
	const pvcName = "data-karmada-etcd-0"
	// claim makes the claim of etcd's first member in a new host namespace.
	claim := func(hostNS string, labels, annotations map[string]string) {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: pvcName, Namespace: hostNS, Labels: labels, Annotations: annotations},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(hostNS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		takeOver    string
		// want is part of the refusal; "" takes the claim.
		want string
	}{
		{"no claim yet", nil, nil, "", ""},
		{"this deployment's", map[string]string{kaov1.DeploymentUIDLabel: mine}, map[string]string{kaov1.DeploymentNamespaceAnnotation: "team-a"}, "", ""},
		{"a claim kao did not make", map[string]string{"app": "other"}, nil, "", "was not made by kao"},
		{"a deleted deployment's of the namespace", map[string]string{kaov1.DeploymentUIDLabel: old}, map[string]string{kaov1.DeploymentNamespaceAnnotation: "team-a"}, "",
			"holds the etcd data of another KarmadaDeployment (uid " + old + "): to start on that data, annotate this deployment kao.io/take-over-from=" + old},
		{"taken over", map[string]string{kaov1.DeploymentUIDLabel: old}, map[string]string{kaov1.DeploymentNamespaceAnnotation: "team-a"}, old, ""},
		{"another namespace's deployment's", map[string]string{kaov1.DeploymentUIDLabel: stranger}, map[string]string{kaov1.DeploymentNamespaceAnnotation: "team-b"}, stranger,
			"holds the etcd data of a KarmadaDeployment of another namespace"},
	} {
		hostNS := controllertest.NewNamespace(t)
		if tc.labels != nil || tc.annotations != nil {
			claim(hostNS, tc.labels, tc.annotations)
		}
		kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dc1", Namespace: "team-a", UID: mine, Annotations: map[string]string{}},
			Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.ContainerizedMode, HostCluster: &kaov1.HostClusterSpec{Namespace: hostNS},
				Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			}}
		if tc.takeOver != "" {
			kd.Annotations[kaov1.TakeOverFromAnnotation] = tc.takeOver
		}
		hc := &pipeline.HostCluster{Client: cs, Namespace: hostNS}
		err := claimEtcdVolumes(ctx, kd, hc)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a refusal saying %q", tc.name, err, tc.want)
		case err != nil && strings.Contains(err.Error(), stranger):
			t.Errorf("%s: the refusal names another namespace's deployment: %v", tc.name, err)
		}
		if tc.want == "" && tc.labels != nil {
			pvc, err := cs.CoreV1().PersistentVolumeClaims(hostNS).Get(ctx, pvcName, metav1.GetOptions{})
			if err != nil || pvc.Labels[kaov1.DeploymentUIDLabel] != mine || pvc.Annotations[kaov1.DeploymentNamespaceAnnotation] != "team-a" {
				t.Errorf("%s: the claim is not this deployment's now: %v %v (%v)", tc.name, pvc.Labels, pvc.Annotations, err)
			}
		}
	}
}
