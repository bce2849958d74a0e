package controllertest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/testenv"
)

// TestImageRegistry is the registry of the test deployments' images; the
// test playbooks pull nothing.
const TestImageRegistry = "registry.kao.test:5000"

var (
	// Env is the package's API server; nil under -short.
	Env *testenv.Env

	// CRDBundle is an artifacts bundle with only a manifest and an empty CRD
	// archive: all a Containerized deployment takes from the bundle.
	CRDBundle string

	// Scheme knows Kubernetes' and kao's types.
	Scheme = runtime.NewScheme()

	// K8s reads and writes without a cache.
	K8s client.Client

	// OperatorLog collects what every manager in this package logs, to scan for secrets.
	OperatorLog = &testenv.LogBuffer{}
)

// RequireEnv skips a test that needs the package's API server under -short,
// where none is started.
func RequireEnv(t testing.TB) {
	t.Helper()
	if Env == nil {
		t.Skip("needs kube-apiserver and ansible-playbook: run without -short")
	}
}

// Main runs a controller package's tests: with -short only them, for the
// pure unit tests (those needing the API server skip, RequireEnv); otherwise
// against one real kube-apiserver and etcd for the package, with kao's CRDs.
// Each package's TestMain calls it: os.Exit(controllertest.Main(m)).
func Main(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	_ = clientgoscheme.AddToScheme(Scheme)
	_ = kaov1.AddToScheme(Scheme)
	ctrl.SetLogger(zap.New(zap.WriteTo(OperatorLog), zap.UseDevMode(true)))
	var err error
	dir, err := os.MkdirTemp("", "kao-crd-bundle-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if CRDBundle, err = writeCRDBundle(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	Env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = Env.Stop() }()
	if K8s, err = client.New(Env.Config, client.Options{Scheme: Scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// TestPolicy allows what the tests' deployments ask for: control planes in
// the test API server's namespaces (it is their host cluster), and bundles
// in temporary directories. policy_test.go tests the policy itself.
var TestPolicy = pipeline.Policy{
	ArtifactPaths:        []string{os.TempDir()},
	InClusterNamespaces:  []string{"*"},
	InClusterHostPath:    true,
	InClusterTolerations: true,
}

// PlaybookDir holds the test playbooks the operators under test run: they
// record what a run got instead of installing anything.
func PlaybookDir() string {
	return filepath.Join(testenv.RepoRoot(), "internal", "controller", "controllertest", "testdata", "playbooks")
}

// NewNamespace creates a namespace for one test.
func NewNamespace(t *testing.T) string {
	RequireEnv(t)
	return testenv.Namespace(t, K8s, "kao-test-")
}

// Get reads the latest version of an object (a deployment, a backup, a
// restore).
func Get[T client.Object](t testing.TB, obj T) T {
	t.Helper()
	cur := obj.DeepCopyObject().(T)
	if err := K8s.Get(context.Background(), client.ObjectKeyFromObject(obj), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// WaitFor polls an object until cond holds or the timeout passes, and
// fails with its status then.
func WaitFor[T client.Object](t testing.TB, obj T, timeout time.Duration, what string, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := Get(t, obj)
		if cond(cur) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; status: %+v", timeout, what, reflect.ValueOf(cur).Elem().FieldByName("Status"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// DeploymentEvents lists the Events about a deployment.
func DeploymentEvents(t *testing.T, kd *kaov1.KarmadaDeployment) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := K8s.List(context.Background(), list, client.InNamespace(kd.Namespace)); err != nil {
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
