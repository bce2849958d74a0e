package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/testenv"
)

// Start starts a single-node cluster for a test and tears it down in
// t.Cleanup, also when the test fails or Start itself fails half way. It
// skips the test in -short mode. Otherwise, if this machine cannot run the
// node (not Linux, not root, a program or tool set missing), it fails the
// test with what to install or run: a test that skipped would pass on a
// machine that never ran it.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("test node: skipped in -short mode (starts a real Kubernetes node)")
	}
	opts, err := opts.complete()
	if err != nil {
		t.Fatalf("test node: %v", err)
	}
	bins, err := findBinaries()
	if err == nil {
		err = checkMachine()
	}
	if err != nil {
		t.Fatalf("test node: %v.\nThis test starts a real Kubernetes node and runs in CI (.ci/run, as root). To skip it: go test -short.", err)
	}
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("test node: "+format, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout+2*time.Minute)
	defer cancel()

	images := t.TempDir()
	pause, err := BuildImage(ctx, "./test/node/cmd/pause", Image{Name: PauseImage}, images)
	if err != nil {
		t.Fatalf("test node: building the pause image: %v", err)
	}
	c, err := up(ctx, opts, bins, pause, logf)
	if c != nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if t.Failed() {
				if dir, err := keepLogs(c); err != nil {
					logf("keeping the logs: %v", err)
				} else {
					logf("the test failed: the cluster's logs are kept in %s", dir)
				}
			}
			start := time.Now()
			if err := c.stop(ctx); err != nil {
				t.Errorf("test node: tearing down %s: %v", c.NodeName(), err)
				return
			}
			logf("cluster %s torn down in %s", c.NodeName(), time.Since(start).Round(10*time.Millisecond))
		})
	}
	if err != nil {
		if c != nil {
			err = fmt.Errorf("%w (see the logs kept at cleanup)", err)
		}
		t.Fatalf("test node: starting the cluster: %v", err)
	}
	return c
}

// findBinaries locates the control plane in the envtest assets (the
// kubernetes and etcd tool sets) and the node in the kubernetes-node set.
func findBinaries() (binaries, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return binaries{}, err
	}
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "dir", "kubernetes-node").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("locating the kubernetes-node tool set: %w", err)
	}
	nodeDir := strings.TrimSpace(string(out))
	b := binaries{
		etcd:              filepath.Join(assets, "etcd"),
		apiServer:         filepath.Join(assets, "kube-apiserver"),
		controllerManager: filepath.Join(assets, "kube-controller-manager"),
		kubectl:           filepath.Join(assets, "kubectl"),
		scheduler:         filepath.Join(nodeDir, "kube-scheduler"),
		kubelet:           filepath.Join(nodeDir, "kubelet"),
		proxy:             filepath.Join(nodeDir, "kube-proxy"),
	}
	for _, p := range []string{b.etcd, b.apiServer, b.controllerManager, b.kubectl} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s not found: run `make tools` (or hack/tools.sh build kubernetes etcd)", p)
		}
	}
	for _, p := range []string{b.scheduler, b.kubelet, b.proxy} {
		if _, err := os.Stat(p); err != nil {
			return b, fmt.Errorf("%s not found: run `make tools` (or hack/tools.sh build kubernetes-node)", p)
		}
	}
	return b, nil
}

// checkMachine says what this machine lacks to run the node, or nil.
func checkMachine() error {
	if runtime.GOOS != "linux" {
		return errors.New("the test node needs Linux, not " + runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("the test node needs root (network namespaces, mounts, containers), but this process runs as uid %d", os.Geteuid())
	}
	var missing []string
	for _, p := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip", "nsenter", "iptables", "sysctl"} {
		if _, err := exec.LookPath(p); err != nil {
			if _, err := os.Stat(filepath.Join("/usr/sbin", p)); err != nil {
				missing = append(missing, p)
			}
		}
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, p))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the test node needs %s: install them with hack/deps.sh (Debian: containerd runc containernetworking-plugins iptables conntrack iproute2 util-linux procps)",
			strings.Join(missing, ", "))
	}
	return nil
}

// keepLogs copies the cluster's logs to a new directory under the system's
// temporary directory, which outlives the cluster, and returns its path.
func keepLogs(c *Cluster) (string, error) {
	dir, err := os.MkdirTemp("", "kao-node-logs-")
	if err != nil {
		return "", err
	}
	logs, err := filepath.Glob(c.l.log("*"))
	if err != nil {
		return "", err
	}
	for _, src := range logs {
		data, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}
