package controllers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
)

// testImageRegistry is the registry of the test deployments' images; the
// test playbooks pull nothing.
const testImageRegistry = "registry.kao.test:5000"

var (
	env *testenv.Env
	// crdBundle is an artifacts bundle with only a manifest and an empty CRD
	// archive: all a Containerized deployment takes from the bundle.
	crdBundle string
	scheme    = runtime.NewScheme()
	// k8s reads and writes without a cache.
	k8s client.Client
	// operatorLog collects what every manager in this package logs, to scan for secrets.
	operatorLog = &testenv.LogBuffer{}
)

// TestMain starts the API server once for the package, unless -short asks
// for the pure unit tests alone: then the tests that need it skip
// (requireEnv) and the others run.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

// requireEnv skips a test that needs the package's API server under -short,
// where none is started.
func requireEnv(t testing.TB) {
	t.Helper()
	if env == nil {
		t.Skip("needs kube-apiserver and ansible-playbook: run without -short")
	}
}

func run(m *testing.M) int {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = kaov1.AddToScheme(scheme)
	ctrl.SetLogger(zap.New(zap.WriteTo(operatorLog), zap.UseDevMode(true)))
	var err error
	dir, err := os.MkdirTemp("", "kao-crd-bundle-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if crdBundle, err = writeCRDBundle(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// operator is a running manager with the KarmadaDeployment reconciler,
// watching one namespace.
type operator struct {
	reconciler *KarmadaDeploymentReconciler
	stateDir   string
	stop       func()
}

// startOperator starts a manager for namespace ns with the real runner and the
// test playbooks. stateDir is reused when not empty, as after a restart.
func startOperator(t *testing.T, ns, stateDir string) *operator {
	t.Helper()
	return startOperatorWith(t, ns, stateDir, nil)
}

// startOperatorWith is startOperator with options changed by tune.
func startOperatorWith(t *testing.T, ns, stateDir string, tune func(*Options)) *operator {
	t.Helper()
	requireEnv(t)
	if stateDir == "" {
		stateDir = testenv.StateDir(t)
	}
	abs, _ := filepath.Abs("testdata/playbooks")
	op := &operator{stateDir: stateDir}
	opts := Options{StateDir: stateDir, PlaybookDir: abs, RunTimeout: 2 * time.Minute, ArtifactsDir: crdBundle, Policy: testPolicy}
	if tune != nil {
		tune(&opts)
	}
	op.stop = env.StartManager(t, scheme, ns, func(mgr ctrl.Manager) error {
		op.reconciler = &KarmadaDeploymentReconciler{
			Client:          mgr.GetClient(),
			APIReader:       mgr.GetAPIReader(),
			Recorder:        mgr.GetEventRecorder("kao"),
			InClusterConfig: mgr.GetConfig(),
			Options:         opts,
		}
		return op.reconciler.SetupWithManager(mgr)
	})
	return op
}

// testPolicy allows what the tests' deployments ask for: control planes in
// the test API server's namespaces (it is their host cluster), and bundles
// in temporary directories. policy_test.go tests the policy itself.
var testPolicy = Policy{
	ArtifactPaths:        []string{os.TempDir()},
	InClusterNamespaces:  []string{"*"},
	InClusterHostPath:    true,
	InClusterTolerations: true,
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	requireEnv(t)
	return testenv.Namespace(t, k8s, "kao-test-")
}

// fakeKubeconfig is member kubeconfig content with a token that must never leak.
func fakeKubeconfig(member string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: https://127.0.0.1:6443
users:
- name: admin
  user:
    token: %[1]s-TOKEN-e5b1c0ffee4242deadbeef
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: admin}
current-context: %[1]s
`, member)
}

// newDeployment creates the member kubeconfig Secret and a Containerized
// KarmadaDeployment whose members pick the test playbook's behaviour.
func newDeployment(t *testing.T, ns, name string, paused bool, members ...string) *kaov1.KarmadaDeployment {
	t.Helper()
	return newDeploymentWith(t, ns, name, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Paused = paused }, members...)
}

// newDeploymentWith is newDeployment with change applied to the
// deployment before it is created.
func newDeploymentWith(t *testing.T, ns, name string, change func(*kaov1.KarmadaDeployment), members ...string) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-members", Namespace: ns}, Data: map[string][]byte{}}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:      kaov1.ContainerizedMode,
			Version:   "v1.18.1",
			Artifacts: kaov1.ArtifactsSpec{ImageRegistry: testImageRegistry},
			// The test environment's API server is the host cluster; each
			// deployment gets a namespace of its own there.
			HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns + "-" + name},
			Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
	}
	for _, m := range members {
		secret.Data[m] = []byte(fakeKubeconfig(m))
		kd.Spec.Members = append(kd.Spec.Members, kaov1.MemberSpec{
			Name: m, SyncMode: kaov1.PushSyncMode,
			KubeconfigSecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: m},
		})
	}
	change(kd)
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	return kd
}

// get reads the latest version of a deployment.
func get(t *testing.T, kd *kaov1.KarmadaDeployment) *kaov1.KarmadaDeployment {
	t.Helper()
	cur := &kaov1.KarmadaDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kd), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// update changes the latest version of a deployment's spec or metadata,
// again on a conflict: the operator writes the object too (its finalizer).
func update(t *testing.T, kd *kaov1.KarmadaDeployment, change func(*kaov1.KarmadaDeployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := get(t, kd)
		change(cur)
		return k8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitFor polls a deployment until cond holds or the timeout passes.
func waitFor(t *testing.T, kd *kaov1.KarmadaDeployment, timeout time.Duration, what string, cond func(*kaov1.KarmadaDeployment) bool) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if cond(cur) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; status: %+v", timeout, what, cur.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// events lists the Events about a deployment.
func deploymentEvents(t *testing.T, kd *kaov1.KarmadaDeployment) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(kd.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := []eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Name == kd.Name {
			out = append(out, e)
		}
	}
	return out
}

// waitForEvent waits until an Event with the reason exists for the deployment.
func waitForEvent(t *testing.T, kd *kaov1.KarmadaDeployment, reason string) eventsv1.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range deploymentEvents(t, kd) {
			if e.Reason == reason {
				return e
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s Event for %s", reason, kd.Name)
	return eventsv1.Event{}
}

// writeCRDBundle writes a bundle for Containerized test deployments under
// dir: manifest.json and an empty karmada/v1.18.1/crds.tar.gz.
func writeCRDBundle(dir string) (string, error) {
	if err := os.MkdirAll(filepath.Join(dir, "karmada", "v1.18.1"), 0o755); err != nil {
		return "", err
	}
	manifest := `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}`
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o644); err != nil {
		return "", err
	}
	var archive bytes.Buffer
	zw := gzip.NewWriter(&archive)
	if err := tar.NewWriter(zw).Close(); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "karmada", "v1.18.1", "crds.tar.gz"), archive.Bytes(), 0o644)
}
