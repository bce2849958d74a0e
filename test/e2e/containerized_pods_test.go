package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/members"
	"github.com/kao-io/kao/test/node"
)

// Settings of the control plane on real pods.
const (
	// podsRegistry is spec.artifacts.imageRegistry: `make images` names the
	// images under it when they are loaded into the node's containerd, as
	// an air-gapped data centre's registry would serve them.
	podsRegistry  = "registry.kao.test"
	podsNamespace = "karmada-pods"
)

// TestContainerizedOnRealPods installs a Containerized control plane whose
// every component runs as a real container on a real node (test/node: a
// kubelet with containerd and runc, kube-proxy, CoreDNS), from the images
// `make images` builds out of the offline bundle, with nothing pulled. Then
// a stock client uses it as a user would: `karmadactl join` of a member
// outside kao, a Deployment propagated to it by a PropagationPolicy, an
// invalid policy refused by karmada-webhook, `karmadactl unjoin`. Deleting
// the deployment removes every pod and object kao made.
func TestContainerizedOnRealPods(t *testing.T) {
	start := time.Now()
	ctx := context.Background()
	c := node.Start(t, node.Options{})
	t.Logf("STEP %-50s %6.1fs", "node up", time.Since(start).Seconds())
	phase := time.Now()
	importComponentImages(t, c)
	t.Logf("STEP %-50s %6.1fs", "images built and imported", time.Since(phase).Seconds())
	client, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, client, podsNamespace)
		}
	})

	ns := newNamespace(t)
	stateDir := startOperator(t, ns)
	hostKubeconfig := serviceAccountKubeconfig(t, client, flatKubeconfig(t, c.Kubeconfig()))
	createSecret(t, ns, "host-cluster", map[string][]byte{"kubeconfig": hostKubeconfig})
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:      kaov1.ContainerizedMode,
			Version:   "v1.18.1",
			Artifacts: kaov1.ArtifactsSpec{ImageRegistry: podsRegistry},
			HostCluster: &kaov1.HostClusterSpec{
				KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: "host-cluster", Key: "kubeconfig"},
				Namespace:           podsNamespace,
			},
			APIServer: kaov1.APIServerSpec{ServiceType: kaov1.NodePortService},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
				Replicas: ptr.To(int32(3)),
				Storage:  kaov1.EtcdStorage{Type: kaov1.EmptyDirStorage},
			}},
		},
	}
	phase = time.Now()
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	done := waitForRun(t, kd, 8*time.Minute)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	t.Logf("STEP %-50s %6.1fs", "install run", time.Since(phase).Seconds())
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("STEP %-50s %6.1fs", "created to Ready", time.Since(phase).Seconds())

	// Every component is a container that containerd runs from the image
	// kao named, Ready by its own probes.
	checkRealPods(t, client, map[string]string{
		"karmada-etcd":                 podsRegistry + "/etcd:3.6.6-0",
		"karmada-apiserver":            podsRegistry + "/kube-apiserver:v1.35.4",
		"karmada-aggregated-apiserver": podsRegistry + "/karmada/karmada-aggregated-apiserver:v1.18.1",
		"kube-controller-manager":      podsRegistry + "/kube-controller-manager:v1.35.4",
		"karmada-controller-manager":   podsRegistry + "/karmada/karmada-controller-manager:v1.18.1",
		"karmada-scheduler":            podsRegistry + "/karmada/karmada-scheduler:v1.18.1",
		"karmada-webhook":              podsRegistry + "/karmada/karmada-webhook:v1.18.1",
	}, map[string]int{"karmada-etcd": 3})
	if msg := conditionMessage(ready, kaov1.EtcdHealthyCondition); !strings.Contains(msg, "3/3 members") {
		t.Errorf("EtcdHealthy: %q", msg)
	}

	// karmada-apiserver behind a NodePort: the exported kubeconfig names the
	// node's address and the node port, which kube-proxy serves.
	svc, err := client.CoreV1().Services(podsNamespace).Get(ctx, "karmada-apiserver", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("the karmada-apiserver Service: %v %+v", err, svc)
	}
	checkKubeconfigServer(t, ready, c.NodeIP()+":"+strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	kubectl := karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz through the exported kubeconfig: %s", out)
	}

	phase = time.Now()
	stockClientCheck(t, c, ready, kubectl)
	t.Logf("STEP %-50s %6.1fs", "karmadactl join, propagation, webhook, unjoin", time.Since(phase).Seconds())

	checkNoSecretsLeaked(t, ns, get(t, kd), stateDir, hostKubeconfig)

	phase = time.Now()
	deleteAndWait(t, get(t, kd))
	t.Logf("STEP %-50s %6.1fs", "deletion", time.Since(phase).Seconds())
	waitFor(t, 2*time.Minute, "the control plane's pods to go", func() bool {
		pods, err := client.CoreV1().Pods(podsNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	for _, kind := range []string{"deployments", "statefulsets", "services", "secrets", "configmaps"} {
		out, err := c.Kubectl(ctx, "-n", podsNamespace, "get", kind, "-l", "kao.io/deployment-uid="+string(kd.UID), "-o", "name").Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("after deletion, %s of the deployment are left: %v %s", kind, err, out)
		}
	}
	t.Logf("TestContainerizedOnRealPods took %s", time.Since(start).Round(time.Second))
}

// importComponentImages builds the control plane's images with `hack/image
// -components` (the layer cache is `make images`'s) and loads the archive
// into the node's containerd.
func importComponentImages(t testing.TB, c *node.Cluster) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./hack/image", "-components", "-registry", podsRegistry, "-out", out)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image -components: %v\n%s", err, b)
	}
	if err := c.ImportImage(filepath.Join(out, "karmada-images.oci.tar")); err != nil {
		t.Fatal(err)
	}
}

// checkRealPods checks that each workload's pods (by app.kubernetes.io/name)
// run on the node from the image named, as many as want says (default one),
// Ready, each container started by containerd.
func checkRealPods(t *testing.T, client kubernetes.Interface, images map[string]string, want map[string]int) {
	t.Helper()
	for name, image := range images {
		pods, err := client.CoreV1().Pods(podsNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		n := want[name]
		if n == 0 {
			n = 1
		}
		if len(pods.Items) != n {
			t.Errorf("%s has %d pods, want %d", name, len(pods.Items), n)
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
				t.Errorf("pod %s: phase %s", p.Name, p.Status.Phase)
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.Image != image || !cs.Ready || cs.State.Running == nil ||
				!strings.HasPrefix(cs.ContainerID, "containerd://") || !strings.HasPrefix(cs.ImageID, "sha256:") {
				t.Errorf("pod %s: container %+v, want %s running and Ready", p.Name, cs, image)
			}
		}
	}
}

// stockClientCheck uses the control plane with stock clients only:
// karmadactl joins a member that kao does not manage (its API server on the
// machine, which the pods reach through the node's route), a Deployment with
// a PropagationPolicy lands in it, karmada-webhook refuses an invalid
// policy, and karmadactl unjoins the member.
func stockClientCheck(t *testing.T, c *node.Cluster, kd *kaov1.KarmadaDeployment, kubectl func(...string) string) {
	t.Helper()
	ctx := context.Background()
	m := members.Start(t, 1, members.Options{Address: c.HostIP()})[0]
	dir := t.TempDir()
	memberKubeconfig := filepath.Join(dir, "member.kubeconfig")
	if err := os.WriteFile(memberKubeconfig, m.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	memberCfg, err := clientcmd.Load(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	karmadactl := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmadactl")
	karmadaKubeconfig := writeKarmadaKubeconfig(t, kd)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(karmadactl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("karmadactl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("join", "outside", "--kubeconfig", karmadaKubeconfig, "--cluster-kubeconfig", memberKubeconfig, "--cluster-context", memberCfg.CurrentContext)
	waitFor(t, 2*time.Minute, "Cluster outside Ready", func() bool {
		out, err := karmadaKubectlErr(t, kd, "get", "cluster", "outside", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True"
	})

	manifest := filepath.Join(dir, "propagate.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: pods-apps
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: pods-apps
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.dc1.example:5000/web:1}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: pods-apps
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement:
    clusterAffinity: {clusterNames: [outside]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	waitFor(t, 2*time.Minute, "the Deployment propagated to the member", func() bool {
		out, err := testenv.Kubectl(ctx, filepath.Join(env.AssetsDir, "kubectl"), memberKubeconfig,
			"-n", "pods-apps", "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		return err == nil && out == "registry.dc1.example:5000/web:1"
	})

	invalid := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalid, []byte("apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: invalid, namespace: default}\n"+
		"spec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, namespace: elsewhere}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := karmadaKubectlErr(t, kd, "create", "-f", invalid); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("karmada-webhook did not refuse an invalid PropagationPolicy: %v: %s", err, out)
	}

	run("unjoin", "outside", "--kubeconfig", karmadaKubeconfig, "--cluster-kubeconfig", memberKubeconfig, "--cluster-context", memberCfg.CurrentContext)
	if out, err := karmadaKubectlErr(t, kd, "get", "cluster", "outside", "-o", "name"); err == nil {
		t.Errorf("Cluster outside is still there after karmadactl unjoin: %s", out)
	}
}

// flatKubeconfig reads a kubeconfig and returns it with its certificates
// inline: kao refuses kubeconfigs that name files.
func flatKubeconfig(t testing.TB, path string) []byte {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		t.Fatal(err)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// logPods logs the pods of ns with their containers' states and the last
// lines of each container's log, for a failed test.
func logPods(t testing.TB, client kubernetes.Interface, ns string) {
	ctx := context.Background()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		for _, cs := range p.Spec.Containers {
			logs, err := client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: ptr.To(int64(20))}).DoRaw(ctx)
			t.Logf("log of %s/%s (%v):\n%s", p.Name, cs.Name, err, logs)
		}
	}
}
