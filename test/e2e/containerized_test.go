package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hostcluster"
)

// update rewrites the golden files of the Containerized test.
var update = flag.Bool("update", false, "rewrite testdata/containerized/*.golden.yaml from the objects read back")

// Settings of the Containerized test deployment.
const (
	containerizedRegistry  = "registry.kao.test:5000"
	containerizedNamespace = "karmada-e2e"
	containerizedClass     = "kao-e2e"
)

// containerizedDeployment is a Containerized control plane on the test's
// host cluster: three etcd members on claims of the host cluster's
// StorageClass, karmada-apiserver behind a LoadBalancer, two
// karmada-controller-managers, and settings of every kind the API takes.
func containerizedDeployment(ns, name, kubeconfigSecret string) *kaov1.KarmadaDeployment {
	return &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.ContainerizedMode,
			Version: "v1.18.1",
			Artifacts: kaov1.ArtifactsSpec{
				ImageRegistry:       containerizedRegistry,
				ImagePullSecretName: "kao-registry",
			},
			HostCluster: &kaov1.HostClusterSpec{
				KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: kubeconfigSecret, Key: "kubeconfig"},
				Namespace:           containerizedNamespace,
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
						Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "type", Operator: corev1.NodeSelectorOpIn, Values: []string{"kwok"}},
						}},
					}},
				}},
			},
			APIServer: kaov1.APIServerSpec{
				ServiceType: kaov1.LoadBalancerService,
				CertSANs:    []string{"karmada.e2e.example"},
				ComponentSpec: kaov1.ComponentSpec{
					ExtraArgs: []kaov1.Arg{{Name: "max-requests-inflight", Value: "300"}},
					Resources: &corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					},
				},
			},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
				Replicas: ptr.To(int32(3)),
				Storage: kaov1.EtcdStorage{Type: kaov1.PVCStorage, Size: ptr.To(resource.MustParse("1Gi")),
					StorageClassName: containerizedClass},
				Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "etcd", Effect: corev1.TaintEffectNoSchedule}},
			}},
			Components: kaov1.ComponentsSpec{
				ControllerManager: kaov1.ComponentSpec{
					Replicas:     ptr.To(int32(2)),
					FeatureGates: []kaov1.FeatureGate{{Name: "PropagateDeps", Enabled: true}},
				},
				Webhook: kaov1.ComponentSpec{
					Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}},
				},
			},
		},
	}
}

// TestContainerizedInstall installs a Containerized control plane through
// the operator onto a host cluster (a real kube-apiserver and
// kube-controller-manager with kwok's simulated nodes), and checks what it
// applied there against golden files, the status it reports, and an
// idempotent re-run, and plans a change (planContainerizedChange). Its
// addons, a spec change that replaces pods, deletion
// and taking kept claims over run on real pods (TestContainerizedOnRealPods).
//
// The pods are simulated by kwok; the test's kubelet (test/hostcluster)
// runs the real programs of every pod of the control plane on this
// machine, from the commands, Secrets and volumes kao put in the host
// cluster, and acts as the load balancer: karmada-apiserver, etcd and the
// Karmada components really run, so the run's Karmada resources, the
// webhook wiring and the exported kubeconfig are proven against them.
//
// Why it still uses the simulated kubelet: it needs three nodes (affinity,
// spread and tolerations), which the real node harness does not have;
// TestContainerizedOnRealPods runs real containers.
func TestContainerizedInstall(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	start := time.Now()
	ctx := context.Background()
	hc := hostcluster.Start(t, hostcluster.Options{Nodes: 3, StorageClass: containerizedClass, Volumes: 3})
	t.Logf("host cluster up in %s", time.Since(start).Round(time.Second))
	kubelet := hc.RunPods(t, hostcluster.RunOptions{
		Namespace: containerizedNamespace,
		Registry:  containerizedRegistry,
		Components: []string{"karmada-etcd", "karmada-apiserver", "karmada-aggregated-apiserver", "kube-controller-manager",
			"karmada-controller-manager", "karmada-scheduler", "karmada-webhook"},
		Images: containerizedImages(t),
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kubelet errors: %v\nprograms' logs:\n%s", kubelet.Errors(), kubelet.Logs(25))
		}
	})

	ns := newNamespace(t)
	stateDir := startOperator(t, ns)
	hostKubeconfig := hostClusterKubeconfig(t, hc)
	createSecret(t, ns, "host-cluster", map[string][]byte{"kubeconfig": hostKubeconfig})
	kd := containerizedDeployment(ns, "platform", "host-cluster")
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	installStart := time.Now()
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v\nkubelet errors: %v", done.Status.LastRun, kubelet.Errors())
	}
	t.Logf("install run took %s", time.Since(installStart).Round(time.Second))
	lb := kubelet.ServiceAddress("karmada-apiserver")

	// Health from the workloads, karmada-apiserver's readyz and the Cluster
	// APIService; every component at the version its image names.
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	wantVersions := map[string]string{
		"etcd": "v3.6.6", "karmada-apiserver": "v1.35.4", "kube-controller-manager": "v1.35.4",
		"karmada-aggregated-apiserver": "v1.18.1", "karmada-controller-manager": "v1.18.1",
		"karmada-scheduler": "v1.18.1", "karmada-webhook": "v1.18.1",
	}
	if len(ready.Status.Components) != len(wantVersions) {
		t.Errorf("status.components lists %d components: %+v", len(ready.Status.Components), ready.Status.Components)
	}
	for _, c := range ready.Status.Components {
		if !c.Ready || c.Version != wantVersions[c.Name] {
			t.Errorf("component %+v: want ready at %s", c, wantVersions[c.Name])
		}
	}
	if ready.Status.Phase != kaov1.RunningPhase || ready.Status.ObservedGeneration != ready.Generation {
		t.Errorf("status.phase %s at observedGeneration %d, want Running at %d", ready.Status.Phase, ready.Status.ObservedGeneration, ready.Generation)
	}
	for _, ct := range []string{kaov1.ControlPlaneReadyCondition, kaov1.EtcdHealthyCondition, kaov1.PlaybookSucceededCondition, kaov1.CertificatesValidCondition} {
		if c := meta.FindStatusCondition(ready.Status.Conditions, ct); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("condition %s: %+v, want True", ct, c)
		}
	}
	if len(ready.Status.Certificates) == 0 {
		t.Error("status.certificates lists no certificate")
	}
	if c := conditionMessage(ready, kaov1.EtcdHealthyCondition); !strings.Contains(c, "3/3 members healthy") || !strings.Contains(c, "karmada-apiserver reaches etcd") {
		t.Errorf("EtcdHealthy: %q", c)
	}

	// The exported kubeconfig names karmada-apiserver at the load
	// balancer's address (the exposure the spec chose), and Karmada's APIs
	// answer there: the CRDs, the Cluster API (karmada-aggregated-apiserver
	// through the host cluster's Service), and karmada-webhook's verdict on
	// an invalid policy.
	checkKubeconfigServer(t, ready, lb+":5443")
	kubectl := karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz through the exported kubeconfig: %s", out)
	}
	if clusters := kubectl("get", "clusters", "-o", "name"); clusters != "" {
		t.Errorf("kubectl get clusters lists clusters no one joined: %s", clusters)
	}
	invalid := filepath.Join(t.TempDir(), "invalid.yaml")
	if err := os.WriteFile(invalid, []byte("apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: invalid, namespace: default}\n"+
		"spec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, namespace: elsewhere}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := karmadaKubectlErr(t, ready, "create", "--dry-run=server", "-f", invalid); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("karmada-webhook did not refuse an invalid PropagationPolicy: %v: %s", err, out)
	}

	// What kao applied to the host cluster, and inside karmada-apiserver,
	// matches the golden files.
	checkGolden(t, hc, done, kubectl)

	// A second run of the same spec changes nothing.
	phase := time.Now()
	again := rerun(t, kd)
	if again.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the re-run failed: %+v", again.Status.LastRun)
	}
	for _, h := range again.Status.LastRun.Hosts {
		if h.Changed != 0 {
			t.Errorf("the re-run changed %d things on %s: not idempotent", h.Changed, h.Name)
		}
	}
	t.Logf("idempotent re-run took %s", time.Since(phase).Round(time.Second))

	// A planned change lists the workloads it would change, field by
	// field, and changes nothing in the host cluster.
	planContainerizedChange(t, hc, kd)

	// No private key kao issued, and no credential of the host cluster's
	// kubeconfig, appears where kao writes: status, Events, the operator's
	// log, the state directory.
	final := get(t, kd)
	checkNoSecretsLeaked(t, ns, final, stateDir, hostKubeconfig)

	if errs := kubelet.Errors(); len(errs) > 0 {
		t.Errorf("the kubelet could not run pods as kao described them: %v", errs)
	}
	t.Logf("TestContainerizedInstall took %s", time.Since(start).Round(time.Second))
}

// containerizedImages maps the image repositories of a Containerized
// control plane to the programs of the tools cache the test kubelet runs
// for them, at the tags kao's defaults name.
func containerizedImages(t testing.TB) map[string]hostcluster.Image {
	t.Helper()
	kubeDir, etcdDir, karmadaDir := testenv.ToolDir(t, "kubernetes"), testenv.ToolDir(t, "etcd"), testenv.ToolDir(t, "karmada")
	return map[string]hostcluster.Image{
		"etcd":                                 {Dir: etcdDir, Tag: "3.6.6-0"},
		"kube-apiserver":                       {Dir: kubeDir, Tag: "v1.35.4"},
		"kube-controller-manager":              {Dir: kubeDir, Tag: "v1.35.4"},
		"karmada/karmada-aggregated-apiserver": {Dir: karmadaDir, Tag: "v1.18.1"},
		"karmada/karmada-controller-manager":   {Dir: karmadaDir, Tag: "v1.18.1"},
		"karmada/karmada-scheduler":            {Dir: karmadaDir, Tag: "v1.18.1"},
		"karmada/karmada-webhook":              {Dir: karmadaDir, Tag: "v1.18.1"},
	}
}

// deleteAndWait deletes a deployment and waits until the operator released it.
func deleteAndWait(t testing.TB, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Delete(ctx, kd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 4*time.Minute, "deployment "+kd.Name+" to be released", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{}))
	})
}

func conditionMessage(kd *kaov1.KarmadaDeployment, t string) string {
	for _, c := range kd.Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

// hostClusterKubeconfig is the kubeconfig kao gets for the host cluster: a
// token of the ServiceAccount that config/rbac-host-cluster binds, with the
// rights of that ClusterRole and no others, so a request the role does not
// allow fails the run.
func hostClusterKubeconfig(t testing.TB, hc *hostcluster.Cluster) []byte {
	t.Helper()
	return serviceAccountKubeconfig(t, hc.Client, hc.Kubeconfig)
}

// serviceAccountKubeconfig binds config/rbac-host-cluster in the cluster of
// client and returns admin (a kubeconfig of that cluster) with a token of
// its ServiceAccount instead of admin's credentials.
func serviceAccountKubeconfig(t testing.TB, client kubernetes.Interface, admin []byte) []byte {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(testenv.RepoRoot(), "config", "rbac-host-cluster")
	role, binding := &rbacv1.ClusterRole{}, &rbacv1.ClusterRoleBinding{}
	for file, obj := range map[string]any{"role.yaml": role, "role_binding.yaml": binding} {
		data, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s/%s: %v", dir, file, err)
		}
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.ServiceAccountKind {
		t.Fatalf("%s/role_binding.yaml binds %+v, want one ServiceAccount", dir, binding.Subjects)
	}
	sa := binding.Subjects[0]
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sa.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(admin)
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// checkKubeconfigServer checks that the kubeconfig Secret kao exported
// names karmada-apiserver at the address of the exposure the spec chose,
// and that status.endpoint says the same.
func checkKubeconfigServer(t testing.TB, kd *kaov1.KarmadaDeployment, want string) {
	t.Helper()
	ref := kd.Status.KubeconfigSecretRef
	if ref == nil {
		t.Fatal("status.kubeconfigSecretRef is empty")
		return
	}
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: ref.Name}, s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(s.Data[ref.Key])
	if err != nil {
		t.Fatalf("the exported kubeconfig does not parse: %v", err)
	}
	if len(cfg.Clusters) != 1 {
		t.Errorf("the exported kubeconfig names %d clusters, want 1", len(cfg.Clusters))
	}
	for name, c := range cfg.Clusters {
		if c.Server != "https://"+want {
			t.Errorf("the exported kubeconfig's cluster %s is %s, want https://%s", name, c.Server, want)
		}
	}
	if kd.Status.Endpoint != want {
		t.Errorf("status.endpoint is %q, want %q", kd.Status.Endpoint, want)
	}
}

// hostKinds are the kinds kao makes in the host cluster, whose objects
// checkGolden compares.
var hostKinds = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "persistentvolumeclaims"},
}

// hostObjects lists the objects of hostKinds in the host cluster namespace
// containerizedNamespace, labelled by kao or not, sorted by kind and name;
// only the CA ConfigMap that the host cluster itself puts into every
// namespace is left out.
func hostObjects(t testing.TB, hc *hostcluster.Cluster) []unstructured.Unstructured {
	t.Helper()
	ns := containerizedNamespace
	cfg, err := clientcmd.RESTConfigFromKubeConfig(hc.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []unstructured.Unstructured
	for _, gvr := range hostKinds {
		l, err := dyn.Resource(gvr).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range l.Items {
			if o.GetKind() == "ConfigMap" && o.GetName() == "kube-root-ca.crt" {
				continue
			}
			out = append(out, o)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetKind() != out[j].GetKind() {
			return out[i].GetKind() < out[j].GetKind()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

// checkGolden compares every object kao made in the host cluster, and the
// Services it made in karmada-apiserver, with testdata/containerized, after
// replacing what differs from run to run: the deployment's UID, hashes,
// addresses the clusters allocated, and Secret values (only their keys are
// compared; they hold certificates).
func checkGolden(t *testing.T, hc *hostcluster.Cluster, kd *kaov1.KarmadaDeployment, kubectl func(args ...string) string) {
	t.Helper()
	got := map[string]string{}
	for _, o := range hostObjects(t, hc) {
		got[strings.ToLower(o.GetKind())+"-"+o.GetName()] = normalize(t, &o, kd)
	}
	var karmadaServices unstructured.UnstructuredList
	if err := json.Unmarshal([]byte(kubectl("get", "services", "-n", "karmada-system", "-o", "json")), &karmadaServices); err != nil {
		t.Fatal(err)
	}
	for _, o := range karmadaServices.Items {
		if o.GetLabels()["app.kubernetes.io/managed-by"] == "kao" {
			got["karmada-apiserver-service-"+o.GetName()] = normalize(t, &o, kd)
		}
	}
	dir := filepath.Join("testdata", "containerized")
	if *update {
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, content := range got {
			if err := os.WriteFile(filepath.Join(dir, name+".golden.yaml"), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.golden.yaml"))
	want := map[string]bool{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".golden.yaml")
		want[name] = true
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got[name] != string(data) {
			t.Errorf("%s differs from %s (rerun with -update after an intended change):\n--- got\n%s", name, f, got[name])
		}
	}
	for name := range got {
		if !want[name] {
			t.Errorf("kao made %s, which has no golden file (rerun with -update after an intended change)", name)
		}
	}
}

// normalize renders an object as YAML without what the server or the run
// decides: metadata it manages, status, allocated addresses and ports, the
// deployment's UID and namespace, config hashes, Secret values.
func normalize(t testing.TB, o *unstructured.Unstructured, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	obj := o.DeepCopy().Object
	delete(obj, "status")
	md := obj["metadata"].(map[string]any)
	for _, k := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "finalizers", "ownerReferences"} {
		delete(md, k)
	}
	if ann, ok := md["annotations"].(map[string]any); ok {
		delete(ann, "deployment.kubernetes.io/revision")
		delete(ann, "pv.kubernetes.io/bind-completed")
		delete(ann, "pv.kubernetes.io/bound-by-controller")
		delete(ann, "volume.beta.kubernetes.io/storage-provisioner")
		delete(ann, "volume.kubernetes.io/storage-provisioner")
		if len(ann) == 0 {
			delete(md, "annotations")
		}
	}
	if spec, ok := obj["spec"].(map[string]any); ok {
		for _, k := range []string{"clusterIP", "clusterIPs", "volumeName"} {
			if _, set := spec[k]; set {
				spec[k] = "<allocated>"
			}
		}
		if ports, ok := spec["ports"].([]any); ok {
			for _, p := range ports {
				if pm, ok := p.(map[string]any); ok {
					if _, set := pm["nodePort"]; set {
						pm["nodePort"] = "<allocated>"
					}
				}
			}
		}
	}
	if o.GetKind() == "Secret" {
		if data, ok := obj["data"].(map[string]any); ok {
			for k := range data {
				data[k] = "<redacted>"
			}
		}
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.ReplaceAll(string(out), string(kd.UID), "<deployment-uid>")
	s = strings.ReplaceAll(s, "kao.io/deployment-namespace: "+kd.Namespace, "kao.io/deployment-namespace: <deployment-namespace>")
	s = configHash.ReplaceAllString(s, "kao.io/config-hash: <hash>")
	return s
}

// configHash matches the pod templates' Secret digest.
var configHash = regexp.MustCompile(`kao\.io/config-hash: [0-9a-f]{64}`)

// checkNoSecretsLeaked scans status, Events, the operator's log and the
// state directory for every private key of the deployment's PKI and for the
// host cluster kubeconfig's client key.
func checkNoSecretsLeaked(t *testing.T, ns string, kd *kaov1.KarmadaDeployment, stateDir string, hostKubeconfig []byte) {
	t.Helper()
	pkiSecret := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: kd.Name + "-pki"}, pkiSecret); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{}
	for name, data := range pkiSecret.Data {
		if strings.HasSuffix(name, ".key") {
			secrets[name] = strings.Split(strings.TrimSpace(string(data)), "\n")[1]
		}
	}
	cfg, err := clientcmd.Load(hostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, u := range cfg.AuthInfos {
		if len(u.ClientKeyData) > 0 {
			secrets["host cluster key of "+name] = strings.Split(strings.TrimSpace(string(u.ClientKeyData)), "\n")[1]
		}
		if u.Token != "" {
			secrets["host cluster token of "+name] = u.Token
		}
	}
	if len(secrets) < 10 {
		t.Fatalf("only %d keys to look for", len(secrets))
	}
	status, _ := json.Marshal(kd.Status)
	evs, _ := json.Marshal(deploymentEvents(t, kd))
	places := map[string]string{"status": string(status), "Events": string(evs), "operator log": operatorLog.String()}
	_ = filepath.Walk(stateDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			places[path] = string(data)
		}
		return nil
	})
	for where, text := range places {
		for what, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s leaked into %s", what, where)
			}
		}
	}
	t.Logf("scanned %d places for %d keys", len(places), len(secrets))
}

// planContainerizedChange plans a change of the running Containerized
// deployment kd with annotation kao.io/plan (docs/plan.md): karmada-apiserver's
// max-requests-inflight from 300 to 400, and one karmada-controller-manager
// instead of two. The plan must be install.yml's and list exactly those two
// Deployments of the host cluster, each with the fields that change, as
// the host cluster's server-side dry run of kao's apply found them; and
// nothing in the host cluster changed (every workload kao made keeps its
// generation, every other object its resourceVersion). The change is then taken back with the annotation, and
// the run of the unchanged spec succeeds.
func planContainerizedChange(t *testing.T, hc *hostcluster.Cluster, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	versions := func() map[string]string {
		out := map[string]string{}
		for _, o := range hostObjects(t, hc) {
			// A workload's status moves on its own; its spec bumps its
			// generation. Other kinds have none: their resourceVersion.
			v := o.GetResourceVersion()
			if g := o.GetGeneration(); g > 0 {
				v = fmt.Sprintf("generation %d", g)
			}
			out[o.GetKind()+" "+o.GetName()] = v
		}
		return out
	}
	before := versions()
	was := get(t, kd)
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, kaov1.PlanAnnotation, "inflight")
		cur.Spec.APIServer.ExtraArgs = []kaov1.Arg{{Name: "max-requests-inflight", Value: "400"}}
		cur.Spec.Components.ControllerManager.Replicas = ptr.To(int32(1))
	})
	var planned *kaov1.KarmadaDeployment
	waitFor(t, runWait, "the plan of the change", func() bool {
		planned = get(t, kd)
		pl := planned.Status.Plan
		return pl != nil && pl.Generation == planned.Generation && pl.Request == "inflight" && planned.Status.Progress == nil
	})
	pl := planned.Status.Plan
	t.Logf("plan: %s", pl.Message)
	for _, it := range pl.Items {
		t.Logf("plan item: %s %s %s %q", it.Host, it.Kind, it.Item, it.Diff)
	}
	if pl.Result != kaov1.PlanPlanned || pl.Playbook != "install.yml" {
		t.Fatalf("the plan of the change: %s with %s: %s", pl.Result, pl.Playbook, pl.Message)
	}
	apiserver := "Deployment " + containerizedNamespace + "/karmada-apiserver"
	manager := "Deployment " + containerizedNamespace + "/karmada-controller-manager"
	got := map[string]string{}
	for _, it := range pl.Items {
		if it.Kind != kaov1.DriftObject {
			t.Errorf("a %s item in the plan of a Containerized plane: %+v", it.Kind, it)
			continue
		}
		got[it.Item] = it.Diff
	}
	if len(got) != 2 || len(pl.Items) != 2 {
		t.Errorf("the plan lists %d items, want 2 (%s and %s): %+v", len(pl.Items), apiserver, manager, pl.Items)
	}
	if d := got[apiserver]; !regexp.MustCompile(`(?m)^-spec\.template\.spec\.containers\[0\]\.command\[\d+\]: --max-requests-inflight=300$`).MatchString(d) ||
		!regexp.MustCompile(`(?m)^\+spec\.template\.spec\.containers\[0\]\.command\[\d+\]: --max-requests-inflight=400$`).MatchString(d) {
		t.Errorf("%s's diff does not show max-requests-inflight from 300 to 400: %q", apiserver, d)
	}
	if d := got[manager]; !strings.Contains(d, "-spec.replicas: 2\n+spec.replicas: 1") {
		t.Errorf("%s's diff does not show its replicas from 2 to 1: %q", manager, d)
	}
	if !strings.Contains(pl.Message, "change 2 items on") || !slices.ContainsFunc(pl.NotPlanned, func(s string) bool { return strings.HasPrefix(s, "Karmada's objects") }) {
		t.Errorf("the plan's message and what it leaves out: %s; %q", pl.Message, pl.NotPlanned)
	}
	if after := versions(); !maps.Equal(after, before) {
		t.Errorf("the plan changed objects in the host cluster: %v, were %v", after, before)
	}
	if planned.Status.LastRun.ID != was.Status.LastRun.ID {
		t.Errorf("the plan changed status.lastRun: %s, was %s", planned.Status.LastRun.ID, was.Status.LastRun.ID)
	}

	// Taken back: the spec as applied, the annotation gone.
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		delete(cur.Annotations, kaov1.PlanAnnotation)
		cur.Spec.APIServer.ExtraArgs = was.Spec.APIServer.ExtraArgs
		cur.Spec.Components.ControllerManager.Replicas = was.Spec.Components.ControllerManager.Replicas
	})
	if done := waitForNextRun(t, kd, was.Status.LastRun.ID); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Errorf("the run of the spec without the change failed: %+v", done.Status.LastRun)
	}
}
