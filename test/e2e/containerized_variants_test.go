package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hostcluster"
	"github.com/kao-io/kao/test/members"
)

// Host cluster namespaces of TestContainerizedVariants: one control plane
// each, served by a kubelet each.
const (
	// variantsNodePortNamespace holds a managed etcd on a HostPath, then one
	// on an EmptyDir, with karmada-apiserver behind a NodePort Service.
	variantsNodePortNamespace = "karmada-nodeport"
	// variantsExternalNamespace holds a control plane on an external etcd,
	// with karmada-apiserver behind a ClusterIP Service.
	variantsExternalNamespace = "karmada-external"
	// variantsKeyPrefix is where the external etcd keeps Karmada's objects.
	variantsKeyPrefix = "/kao-e2e/karmada"
)

// clusterNetworkEnv marks the copy of the test binary that
// TestContainerizedVariants runs in a mount namespace of its own; its value
// is the mount namespace of the test that started the copy.
const clusterNetworkEnv = "KAO_E2E_CLUSTER_NETWORK"

// variantDeployment is a small Containerized control plane in hostNS: one
// replica of everything, the spec's exposure and etcd.
func variantDeployment(ns, name, hostNS string, service kaov1.ServiceType, etcd kaov1.EtcdSpec) *kaov1.KarmadaDeployment {
	return &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:      kaov1.ContainerizedMode,
			Version:   "v1.18.1",
			Artifacts: kaov1.ArtifactsSpec{ImageRegistry: containerizedRegistry},
			HostCluster: &kaov1.HostClusterSpec{
				KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: "host-cluster", Key: "kubeconfig"},
				Namespace:           hostNS,
			},
			APIServer: kaov1.APIServerSpec{ServiceType: service},
			Etcd:      etcd,
		},
	}
}

// TestContainerizedVariants installs Containerized control planes through
// the operator with the storage, etcd and exposure choices that
// TestContainerizedInstall does not take, on the same kind of host cluster
// (kwok's simulated nodes and pods; the test's kubelet runs the real
// programs of every control-plane pod):
//
//   - in karmada-nodeport, reached with a kubeconfig Secret (as a remote
//     host cluster), etcd on a HostPath with karmada-apiserver behind a
//     NodePort Service, reached at a node's address and the node port;
//     deleted, then an etcd on an EmptyDir in the same namespace;
//   - in karmada-external, at the same time, with spec.hostCluster.inCluster,
//     an external etcd (a real etcd with TLS that the test starts) with
//     karmada-apiserver behind a ClusterIP Service, reached at its cluster
//     DNS name.
//
// The API admits a ClusterIP Service only for the operator's own cluster
// (inCluster), since it is reachable only from inside the host cluster. So
// here the host cluster is also the operator's cluster: the CRDs are
// installed in it and the operator reaches it as the ServiceAccount that
// config/rbac and config/rbac-host-cluster bind, with those rights only.
// And the operator must run where the host cluster's Service names resolve
// and their addresses answer, as in a pod: the test runs itself again in a
// mount namespace of its own whose /etc/hosts is the kubelet's hosts file of
// karmada-external, so the operator, its ansible-playbook runs and kubectl
// resolve those names as a pod of the host cluster does.
//
// Why it still uses the simulated kubelet: its external etcd, HostPath and
// in-cluster operator variants have not moved to the real node harness yet;
// TestContainerizedOnRealPods covers EmptyDir, NodePort and the upgrade on
// real containers.
func TestContainerizedVariants(t *testing.T) {
	if os.Getenv(clusterNetworkEnv) == "" {
		runInMountNamespace(t)
		return
	}
	start := time.Now()
	ctx := context.Background()
	hc := hostcluster.Start(t, hostcluster.Options{Nodes: 2, StorageClass: containerizedClass, Volumes: 1})
	t.Logf("host cluster up in %s", time.Since(start).Round(time.Second))
	images := containerizedImages(t)
	// The external etcd's deployment starts on Karmada v1.17.1 and is
	// upgraded: its kubelet runs that version's programs too.
	for _, repo := range []string{"karmada-aggregated-apiserver", "karmada-controller-manager", "karmada-scheduler", "karmada-webhook"} {
		images["karmada/"+repo+":v1.17.1"] = hostcluster.Image{Dir: filepath.Join(artifactsDir, "karmada", "v1.17.1", "bin"), Tag: "v1.17.1"}
	}
	controlPlane := []string{"karmada-apiserver", "karmada-aggregated-apiserver", "kube-controller-manager",
		"karmada-controller-manager", "karmada-scheduler", "karmada-webhook"}
	kubeletNP := hc.RunPods(t, hostcluster.RunOptions{
		Namespace: variantsNodePortNamespace, Registry: containerizedRegistry,
		Components: append([]string{"karmada-etcd"}, controlPlane...), Images: images,
	})
	kubeletExt := hc.RunPods(t, hostcluster.RunOptions{
		Namespace: variantsExternalNamespace, Registry: containerizedRegistry,
		Components: controlPlane, Images: images,
	})
	t.Cleanup(func() {
		if t.Failed() {
			for name, k := range map[string]*hostcluster.Kubelet{variantsNodePortNamespace: kubeletNP, variantsExternalNamespace: kubeletExt} {
				t.Logf("kubelet of %s: errors %v\nprograms' logs:\n%s", name, k.Errors(), k.Logs(25))
			}
		}
	})
	resolveClusterNames(t, kubeletExt.HostsFile())
	ext := startExternalEtcd(t, testenv.ToolDir(t, "etcd"), "127.0.0.1")

	operator, hostKubeconfig := operatorInHostCluster(t, hc)
	ns := newNamespace(t)
	stateDir := startOperatorAs(t, operator, ns)
	createSecret(t, ns, "host-cluster", map[string][]byte{"kubeconfig": hostKubeconfig})
	createSecret(t, ns, "their-etcd-ca", map[string][]byte{"ca.crt": ext.ca})
	clientCert := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "their-etcd-client", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: ext.clientCert, corev1.TLSPrivateKeyKey: ext.clientKey},
	}
	if err := k8s.Create(ctx, clientCert); err != nil {
		t.Fatal(err)
	}

	hostPath := variantDeployment(ns, "hostpath", variantsNodePortNamespace, kaov1.NodePortService, kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
		Replicas: ptr.To(int32(1)), Storage: kaov1.EtcdStorage{Type: kaov1.HostPathStorage},
	}})
	external := variantDeployment(ns, "external", variantsExternalNamespace, kaov1.ClusterIPService, kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{
		Endpoints:            []string{ext.endpoint},
		CASecretRef:          kaov1.SecretKeyReference{Name: "their-etcd-ca", Key: "ca.crt"},
		ClientCertSecretName: "their-etcd-client",
		KeyPrefix:            variantsKeyPrefix,
	}})
	external.Spec.HostCluster = &kaov1.HostClusterSpec{InCluster: true, Namespace: variantsExternalNamespace}
	external.Spec.Version = "v1.17.1"
	phase := time.Now()
	for _, kd := range []*kaov1.KarmadaDeployment{hostPath, external} {
		if err := k8s.Create(ctx, kd); err != nil {
			t.Fatal(err)
		}
	}
	for _, kd := range []*kaov1.KarmadaDeployment{hostPath, external} {
		if done := waitForRun(t, kd, 8*time.Minute); done.Status.LastRun.Result != kaov1.RunSucceeded {
			t.Fatalf("the install of %s failed: %+v", kd.Name, done.Status.LastRun)
		}
	}
	t.Logf("both installs, side by side, took %s", time.Since(phase).Round(time.Second))

	// HostPath and NodePort. The run and the operator reach karmada-apiserver
	// at the first node's address and the node port, as a client outside the
	// host cluster would.
	ready := waitForCondition(t, hostPath, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	checkReadyStatus(t, ready, true)
	etcdVolume := checkEtcdVolume(t, hc, variantsNodePortNamespace)
	if hp := etcdVolume.HostPath; hp == nil || hp.Path != "/var/lib/karmada-etcd/"+variantsNodePortNamespace ||
		hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("etcd's data volume is %+v, want the hostPath /var/lib/karmada-etcd/%s (DirectoryOrCreate)", etcdVolume, variantsNodePortNamespace)
	}
	// Each member keeps its data in <dataDir>/<namespace>/<pod> of its node.
	dataDir := filepath.Join(kubeletNP.HostPath("/var/lib/karmada-etcd/"+variantsNodePortNamespace), "karmada-etcd-0")
	if _, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db")); err != nil {
		t.Errorf("etcd keeps no data in its host path: %v", err)
	}
	svc := apiServerService(t, hc, variantsNodePortNamespace)
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("karmada-apiserver's Service is %s with ports %+v, want a NodePort Service with a node port", svc.Spec.Type, svc.Spec.Ports)
	}
	nodePort := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	checkKubeconfigServer(t, ready, net.JoinHostPort(hc.NodeAddresses[hc.Nodes[0]], nodePort))
	kubectl := karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz through the exported kubeconfig: %s", out)
	}
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=on-hostpath")
	if got := kubectl("get", "configmap", "kao-e2e-marker", "-n", "default", "-o", "jsonpath={.data.written}"); got != "on-hostpath" {
		t.Errorf("karmada-apiserver does not keep a ConfigMap: %q", got)
	}

	// Deleted, the HostPath deployment leaves nothing in the host cluster
	// namespace: it has no claims. Its data stays in the host path on the
	// node: the role deletes objects of the host cluster only, and
	// purgeDataOnDelete does not reach into nodes' directories (the API
	// says so), so an operator of the host cluster removes it.
	phase = time.Now()
	deleteAndWait(t, ready)
	t.Logf("deleting the HostPath deployment took %s", time.Since(phase).Round(time.Second))
	checkNamespaceClean(t, hc, variantsNodePortNamespace)
	if _, err := os.Stat(filepath.Join(dataDir, "member")); err != nil {
		t.Errorf("etcd's data left the host path with the deletion: %v", err)
	}

	// EmptyDir, in the same namespace, behind a NodePort again: installed
	// while the external etcd's deployment is checked.
	emptyDir := variantDeployment(ns, "emptydir", variantsNodePortNamespace, kaov1.NodePortService, kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
		Storage: kaov1.EtcdStorage{Type: kaov1.EmptyDirStorage},
	}})
	emptyDirStart := time.Now()
	if err := k8s.Create(ctx, emptyDir); err != nil {
		t.Fatal(err)
	}

	// External etcd and ClusterIP. karmada-apiserver is reached at the
	// Service's DNS name, which only resolves inside the host cluster.
	ready = waitForCondition(t, external, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	checkReadyAt(t, ready, false, containerizedVersions("v1.17.1"))
	phase = time.Now()
	ready = upgradeContainerized(t, hc.Client, ready, stateDir, "")
	t.Logf("the external etcd's deployment's two upgrades took %s", time.Since(phase).Round(time.Second))
	checkReadyStatus(t, ready, false)
	if c := conditionMessage(ready, kaov1.EtcdHealthyCondition); !strings.HasPrefix(c, "1/1 members healthy") {
		t.Errorf("EtcdHealthy of the external etcd: %q", c)
	}
	if ready.Status.Etcd == nil || len(ready.Status.Etcd.Members) != 1 || ready.Status.Etcd.Members[0].ClientURL != ext.endpoint {
		t.Errorf("status.etcd does not list the external etcd at %s: %+v", ext.endpoint, ready.Status.Etcd)
	}
	for _, o := range hostObjects(t, hc, variantsExternalNamespace) {
		if strings.HasPrefix(o.GetName(), "karmada-etcd") || o.GetKind() == "StatefulSet" || o.GetKind() == "PersistentVolumeClaim" {
			t.Errorf("kao made %s %s for an external etcd", o.GetKind(), o.GetName())
		}
	}
	checkExternalEtcdFlags(t, hc.Client, variantsExternalNamespace, ext, variantsKeyPrefix)
	svc = apiServerService(t, hc, variantsExternalNamespace)
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("karmada-apiserver's Service is %s, want ClusterIP", svc.Spec.Type)
	}
	checkKubeconfigServer(t, ready, "karmada-apiserver."+variantsExternalNamespace+".svc.cluster.local:5443")
	kubectl = karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz through the exported kubeconfig: %s", out)
	}
	if clusters := kubectl("get", "clusters", "-o", "name"); clusters != "" {
		t.Errorf("kubectl get clusters lists clusters no one joined: %s", clusters)
	}
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=external")
	// Karmada's objects are in the external etcd, under the key prefix:
	// the ConfigMap just written, and the Cluster API's storage
	// (karmada-aggregated-apiserver uses the same etcd).
	keys := ext.keys(t, "/")
	for _, want := range []string{variantsKeyPrefix + "/configmaps/default/kao-e2e-marker", variantsKeyPrefix + "/namespaces/karmada-system"} {
		if !slices.Contains(keys, want) {
			t.Errorf("the external etcd has no key %s", want)
		}
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, variantsKeyPrefix+"/") {
			t.Errorf("the external etcd has key %s outside the prefix %s", k, variantsKeyPrefix)
		}
	}
	t.Logf("the external etcd holds %d keys under %s", len(keys), variantsKeyPrefix)

	// Deleted, the external etcd's deployment leaves nothing in the host
	// cluster, and Karmada's data where they are: kao does not own that etcd.
	phase = time.Now()
	deleteAndWait(t, ready)
	t.Logf("deleting the external etcd's deployment took %s", time.Since(phase).Round(time.Second))
	checkNamespaceClean(t, hc, variantsExternalNamespace)
	if left := ext.keys(t, variantsKeyPrefix+"/configmaps/default/"); !slices.Contains(left, variantsKeyPrefix+"/configmaps/default/kao-e2e-marker") {
		t.Errorf("Karmada's data left the external etcd with the deletion: %v", left)
	}

	// The EmptyDir deployment: an etcd of its own, empty at the start (the
	// HostPath deployment's data are not in it), behind a new node port.
	if done := waitForRun(t, emptyDir, 8*time.Minute); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install of %s failed: %+v", emptyDir.Name, done.Status.LastRun)
	}
	ready = waitForCondition(t, emptyDir, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("the EmptyDir install took %s", time.Since(emptyDirStart).Round(time.Second))
	checkReadyStatus(t, ready, true)
	if v := checkEtcdVolume(t, hc, variantsNodePortNamespace); v.EmptyDir == nil {
		t.Errorf("etcd's data volume is %+v, want an emptyDir", v)
	}
	svc = apiServerService(t, hc, variantsNodePortNamespace)
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("karmada-apiserver's Service is %s with ports %+v, want a NodePort Service", svc.Spec.Type, svc.Spec.Ports)
	}
	checkKubeconfigServer(t, ready, net.JoinHostPort(hc.NodeAddresses[hc.Nodes[0]], strconv.Itoa(int(svc.Spec.Ports[0].NodePort))))
	kubectl = karmadaKubectl(t, ready)
	if out, err := karmadaKubectlErr(t, ready, "get", "configmap", "kao-e2e-marker", "-n", "default"); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("the EmptyDir etcd holds the HostPath deployment's ConfigMap (or kubectl failed otherwise): %v: %s", err, out)
	}
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=on-emptydir")
	phase = time.Now()
	deleteAndWait(t, ready)
	t.Logf("deleting the EmptyDir deployment took %s", time.Since(phase).Round(time.Second))
	checkNamespaceClean(t, hc, variantsNodePortNamespace)

	for name, k := range map[string]*hostcluster.Kubelet{variantsNodePortNamespace: kubeletNP, variantsExternalNamespace: kubeletExt} {
		if errs := k.Errors(); len(errs) > 0 {
			t.Errorf("the kubelet of %s could not run pods as kao described them: %v", name, errs)
		}
	}
	t.Logf("TestContainerizedVariants took %s (in its mount namespace)", time.Since(start).Round(time.Second))
}

// checkReadyStatus checks what a Ready deployment reports: every component
// ready at its image's version (etcd only when managed), and the
// conditions that make Ready.
func checkReadyStatus(t testing.TB, kd *kaov1.KarmadaDeployment, managedEtcd bool) {
	t.Helper()
	checkReadyAt(t, kd, managedEtcd, containerizedVersions("v1.18.1"))
}

// containerizedVersions are the versions of a Containerized control
// plane's components when Karmada's run karmada.
func containerizedVersions(karmada string) map[string]string {
	return map[string]string{
		"karmada-apiserver": "v1.35.4", "kube-controller-manager": "v1.35.4",
		"karmada-aggregated-apiserver": karmada, "karmada-controller-manager": karmada,
		"karmada-scheduler": karmada, "karmada-webhook": karmada,
	}
}

// checkReadyAt is checkReadyStatus with the versions each component must
// be ready at.
func checkReadyAt(t testing.TB, kd *kaov1.KarmadaDeployment, managedEtcd bool, want map[string]string) {
	t.Helper()
	want = maps.Clone(want)
	if managedEtcd {
		want["etcd"] = "v3.6.6"
	}
	if len(kd.Status.Components) != len(want) {
		t.Errorf("%s: status.components lists %d components, want %d: %+v", kd.Name, len(kd.Status.Components), len(want), kd.Status.Components)
	}
	for _, c := range kd.Status.Components {
		if !c.Ready || c.Version != want[c.Name] {
			t.Errorf("%s: component %+v: want ready at %s", kd.Name, c, want[c.Name])
		}
	}
	for _, ct := range []string{kaov1.ControlPlaneReadyCondition, kaov1.EtcdHealthyCondition, kaov1.PlaybookSucceededCondition, kaov1.CertificatesValidCondition} {
		if c := meta.FindStatusCondition(kd.Status.Conditions, ct); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("%s: condition %s: %+v, want True", kd.Name, ct, c)
		}
	}
	if managedEtcd {
		if c := conditionMessage(kd, kaov1.EtcdHealthyCondition); !strings.Contains(c, "1/1 members healthy") || !strings.Contains(c, "karmada-apiserver reaches etcd") {
			t.Errorf("%s: EtcdHealthy: %q", kd.Name, c)
		}
	}
}

// checkEtcdVolume checks that the etcd StatefulSet of a namespace asks for
// no claims and that no claim exists there, and returns its data volume.
func checkEtcdVolume(t testing.TB, hc *hostcluster.Cluster, ns string) corev1.Volume {
	t.Helper()
	ctx := context.Background()
	sts, err := hc.Client.AppsV1().StatefulSets(ns).Get(ctx, "karmada-etcd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("the etcd StatefulSet of %s asks for claims: %+v", ns, sts.Spec.VolumeClaimTemplates)
	}
	claims, err := hc.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims.Items {
		t.Errorf("claim %s/%s exists, though etcd keeps its data elsewhere", ns, c.Name)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			return v
		}
	}
	t.Fatalf("the etcd StatefulSet of %s has no data volume", ns)
	return corev1.Volume{}
}

// apiServerService reads karmada-apiserver's Service in a host cluster namespace.
func apiServerService(t testing.TB, hc *hostcluster.Cluster, ns string) *corev1.Service {
	t.Helper()
	svc, err := hc.Client.CoreV1().Services(ns).Get(context.Background(), "karmada-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// checkExternalEtcdFlags checks that both API servers of the external
// etcd's deployment in host cluster namespace ns name its endpoint and the
// key prefix, and read the user's CA and client certificate from the files
// their Secret mounts.
func checkExternalEtcdFlags(t testing.TB, kc kubernetes.Interface, ns string, ext *externalEtcd, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"karmada-apiserver", "karmada-aggregated-apiserver"} {
		d, err := kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctr := d.Spec.Template.Spec.Containers[0]
		flags := map[string]string{}
		for _, a := range ctr.Command {
			if k, v, ok := strings.Cut(a, "="); ok {
				flags[k] = v
			}
		}
		if flags["--etcd-servers"] != ext.endpoint || flags["--etcd-prefix"] != prefix {
			t.Errorf("%s runs with --etcd-servers=%s --etcd-prefix=%s, want %s and %s",
				name, flags["--etcd-servers"], flags["--etcd-prefix"], ext.endpoint, prefix)
		}
		files := map[string][]byte{
			flags["--etcd-cafile"]: ext.ca, flags["--etcd-certfile"]: ext.clientCert, flags["--etcd-keyfile"]: ext.clientKey,
		}
		for path, want := range files {
			got, ok := mountedFile(t, kc, d, path)
			if !ok {
				t.Errorf("%s reads %q, which no Secret of its pod holds", name, path)
				continue
			}
			if string(got) != string(want) {
				t.Errorf("%s's %s is not the external etcd's file from spec.etcd.external", name, path)
			}
		}
	}
}

// mountedFile finds the Secret key a Deployment's container sees at path.
func mountedFile(t testing.TB, kc kubernetes.Interface, d *appsv1.Deployment, path string) ([]byte, bool) {
	t.Helper()
	spec := d.Spec.Template.Spec
	for _, m := range spec.Containers[0].VolumeMounts {
		key, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, err := kc.CoreV1().Secrets(d.Namespace).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data, ok := s.Data[key]
			return data, ok
		}
	}
	return nil, false
}

// checkNamespaceClean checks that a deletion left no object of kao's kinds
// and no pod in a host cluster namespace.
func checkNamespaceClean(t testing.TB, hc *hostcluster.Cluster, ns string) {
	t.Helper()
	for _, o := range hostObjects(t, hc, ns) {
		t.Errorf("after deletion %s %s/%s is still in the host cluster", o.GetKind(), ns, o.GetName())
	}
	checkNoPods(t, hc, ns)
}

// externalEtcd is an etcd with TLS that kao does not manage, on loopback.
type externalEtcd struct {
	// endpoint is its client URL.
	endpoint string
	// ca, clientCert and clientKey are the PEM files a client needs.
	ca, clientCert, clientKey []byte
	// dir holds those files, its data and its log.
	dir     string
	etcdctl string
}

// startExternalEtcd starts etcd from the tools cache with certificates of
// its own (from kao's PKI package, as any CA would issue them) on a free
// port of address (an address of this machine), and stops it in t.Cleanup.
func startExternalEtcd(t testing.TB, etcdDir, address string) *externalEtcd {
	t.Helper()
	b, _, _, err := pki.Ensure(nil, pki.Request{EtcdHosts: []pki.Host{{Name: "external", Address: address}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &externalEtcd{
		ca: b[pki.CertFile(pki.EtcdCA)], clientCert: b[pki.CertFile(pki.EtcdHealthcheckClient)], clientKey: b[pki.KeyFile(pki.EtcdHealthcheckClient)],
		dir: dir, etcdctl: filepath.Join(etcdDir, "etcdctl"),
	}
	files := map[string][]byte{
		"ca.crt": e.ca, "client.crt": e.clientCert, "client.key": e.clientKey,
		"server.crt": b[pki.CertFile(pki.EtcdServer("external"))], "server.key": b[pki.KeyFile(pki.EtcdServer("external"))],
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	client := "https://" + net.JoinHostPort(address, strconv.Itoa(members.FreePort(t, address)))
	peer := "http://" + net.JoinHostPort(address, strconv.Itoa(members.FreePort(t, address)))
	e.endpoint = client
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(etcdDir, "etcd"), "--name=external", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=external="+peer,
		"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
		"--trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--client-cert-auth")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
	})
	waitFor(t, time.Minute, "the external etcd to answer", func() bool {
		return e.etcdctlErr("endpoint", "health") == nil
	})
	return e
}

// keys lists the etcd's keys under prefix.
func (e *externalEtcd) keys(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := e.etcdctlOut("get", prefix, "--prefix", "--keys-only")
	if err != nil {
		t.Fatalf("listing the external etcd's keys: %v: %s", err, out)
	}
	var keys []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keys = append(keys, l)
		}
	}
	return keys
}

func (e *externalEtcd) etcdctlErr(args ...string) error {
	_, err := e.etcdctlOut(args...)
	return err
}

func (e *externalEtcd) etcdctlOut(args ...string) (string, error) {
	cmd := exec.Command(e.etcdctl, append([]string{"--endpoints=" + e.endpoint, "--cacert=" + filepath.Join(e.dir, "ca.crt"),
		"--cert=" + filepath.Join(e.dir, "client.crt"), "--key=" + filepath.Join(e.dir, "client.key"), "--command-timeout=5s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// operatorInHostCluster makes the host cluster the operator's own cluster
// too: kao's CRDs in it, the test's client (k8s) pointed at it until the
// test ends, and the operator's ServiceAccount bound to config/rbac and
// config/rbac-host-cluster. It returns the operator's configuration (that
// ServiceAccount's token, as in its pod) and the same credentials as a
// kubeconfig, for deployments that name the host cluster with a Secret.
func operatorInHostCluster(t testing.TB, hc *hostcluster.Cluster) (*rest.Config, []byte) {
	t.Helper()
	ctx := context.Background()
	admin, err := clientcmd.RESTConfigFromKubeConfig(hc.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(admin, envtest.CRDInstallOptions{
		Paths: []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ErrorIfPathMissing: true,
	}); err != nil {
		t.Fatalf("installing kao's CRDs in the host cluster: %v", err)
	}
	c, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	management := k8s
	k8s = c
	t.Cleanup(func() { k8s = management })

	kubeconfig := hostClusterKubeconfig(t, hc) // config/rbac-host-cluster, and the ServiceAccount's token
	dir := filepath.Join(testenv.RepoRoot(), "config", "rbac")
	role, binding := &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}
	for file, obj := range map[string]client.Object{"role.yaml": role, "role_binding.yaml": binding} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s/%s: %v", dir, file, err)
		}
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kubeconfig
}

// runInMountNamespace runs the calling test again in a copy of the test
// binary that `unshare --mount` gives a mount namespace of its own (private
// propagation: nothing it mounts reaches the machine), relays its output
// and fails when it fails.
func runInMountNamespace(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test runs itself in a mount namespace of its own (unshare --mount): run it as root")
	}
	args := []string{"--mount", "--propagation", "private", "--", os.Args[0],
		"-test.run=^" + t.Name() + "$", "-test.v=true", "-test.count=1"}
	if deadline, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(deadline).Truncate(time.Second).String())
	}
	// The copy checks that its mount namespace is not this one.
	parentNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), clusterNetworkEnv+"="+parentNS)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
		for sc.Scan() {
			// Indented: go test does not read the copy's own test lines
			// as this test's.
			_, _ = fmt.Fprintln(os.Stdout, "    | "+sc.Text())
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The copy's process group, if the parent stops first.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	err = cmd.Wait()
	_ = w.Close()
	<-relayed
	if err != nil {
		t.Fatalf("the test in its mount namespace failed: %v (its output is above)", err)
	}
}

// resolveClusterNames mounts a kubelet's hosts file over /etc/hosts, so that
// this process and its children (the operator, ansible-playbook, kubectl)
// resolve the host cluster's Service names as a pod would. It refuses to
// do so outside a mount namespace of the test's own.
func resolveClusterNames(t testing.TB, hostsFile string) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	parent := os.Getenv(clusterNetworkEnv)
	if err != nil || !strings.HasPrefix(parent, "mnt:") || self == parent {
		t.Fatalf("refusing to mount over /etc/hosts: not in a mount namespace of the test's own (this process: %s %v; the test that started it: %q)", self, err, parent)
	}
	if err := syscall.Mount(hostsFile, "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("mounting %s over /etc/hosts: %v", hostsFile, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount("/etc/hosts", 0) })
}
