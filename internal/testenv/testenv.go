// Package testenv starts the real kube-apiserver and etcd built by `make tools`
// for tests, with kao's CRDs installed.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BuildFlags are what `make test` gives go test besides its own flags
// (GOTESTFLAGS in the Makefile: no DWARF). A test that builds one of kao's
// programs with them reuses the packages compiled for the test binaries,
// where other flags compile all of them again on a fresh machine.
var BuildFlags = []string{"-ldflags=-w", "-gcflags=all=-dwarf=false"}

// RepoRoot returns the repository root, found from this source file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// ToolDir is the bin directory of a tool set built by hack/tools.sh
// (kubernetes, etcd, karmada, karmada-addons, kwok). It fails t when the set
// is not built.
func ToolDir(t testing.TB, set string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "tools.sh"), "dir", set).Output()
	if err != nil {
		t.Fatalf("locating the %s tools with hack/tools.sh: %v", set, err)
	}
	dir := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(dir, "..", ".complete")); err != nil {
		t.Fatalf("the test needs the %s tools in %s: run `make tools` (or hack/tools.sh build %s) first", set, dir, set)
	}
	return dir
}

// ToolPath is a binary of a tool set built by hack/tools.sh, like ToolDir.
func ToolPath(t testing.TB, set, bin string) string {
	t.Helper()
	p := filepath.Join(ToolDir(t, set), bin)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the test needs %s: %v; run `make tools` (or hack/tools.sh build %s) first", bin, err, set)
	}
	return p
}

// AssetsDir returns the directory holding kube-apiserver, etcd and kubectl:
// $KUBEBUILDER_ASSETS when set, otherwise the tools cache that `make tools` fills.
// It fails with a message that tells the user what to run when the binaries are missing.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "tools.sh"), "assets").Output()
		if err != nil {
			return "", fmt.Errorf("locating the tools cache with hack/tools.sh assets: %w", err)
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, bin)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make tools` first", bin, dir)
		}
	}
	return dir, nil
}

// Env is a running API server with kao's CRDs.
type Env struct {
	*envtest.Environment
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// AssetsDir holds the binaries the environment runs.
	AssetsDir string
}

// Start starts etcd and kube-apiserver and installs the CRDs in config/crd/bases.
func Start() (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// envtest's default Service range is a /24: a package whose tests
	// expose a few hundred Containerized control planes (the scale
	// benchmark) would run out of ClusterIPs.
	env.ControlPlane.GetAPIServer().Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	return &Env{Environment: env, Config: cfg, AssetsDir: assets}, nil
}

// Kubeconfig writes an admin kubeconfig for the environment to path.
func (e *Env) Kubeconfig(path string) error {
	user, err := e.AddUser(envtest.User{Name: "kao-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding test user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering kubeconfig: %w", err)
	}
	return os.WriteFile(path, data, 0o600)
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return errors.New("environment was not started")
	}
	return e.Environment.Stop()
}
