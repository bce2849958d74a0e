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
// t.Cleanup, also when the test fails. It skips the test in -short mode.
// Otherwise, if this machine cannot run the node (not Linux, not root, a
// program or tool set missing), it fails the test with what to install or
// run: a test that skipped would pass on a machine that never ran it. When
// the test fails, the components' logs are kept (see keepLogs).
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("test node: skipped in -short mode (starts a real Kubernetes node)")
	}
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("test node: "+format, args...)
	}
	c, err := Up(context.Background(), opts, logf)
	if err != nil {
		t.Fatalf("test node: %v.\nThis test starts a real Kubernetes node and runs in CI (.ci/run, as root). To skip it: go test -short.", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if dir, err := keepLogs(c); err != nil {
				logf("keeping the logs: %v", err)
			} else {
				logf("the test failed: the cluster's logs are kept in %s", dir)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("test node: %v", err)
		}
	})
	return c
}

// Up starts a cluster outside a test's life, e.g. in TestMain to share one
// cluster between a package's tests; the caller must Stop it (a cluster
// whose process dies without Stop is removed by the next Up on the
// machine). If Up fails, it removes what it created, keeps the logs and
// says where. logf receives progress messages; nil discards them.
func Up(ctx context.Context, opts Options, logf func(format string, args ...any)) (*Cluster, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	bins, err := findBinaries()
	if err == nil {
		err = checkMachine()
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout+2*time.Minute)
	defer cancel()

	images, err := os.MkdirTemp("", "kao-node-images-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(images) }()
	pause, err := BuildImage(ctx, "./test/node/cmd/pause", Image{Name: PauseImage}, images)
	if err != nil {
		return nil, fmt.Errorf("building the pause image: %w", err)
	}
	// Compressing CoreDNS's 50 MB takes a second: the image is written
	// while the cluster starts, and finished before its directory goes.
	dnsArchive := filepath.Join(images, "coredns.oci.tar")
	dnsWritten := background(func() error { return writeCoreDNSImage(bins.coreDNS, dnsArchive) })
	defer func() { _ = dnsWritten() }()
	c, err := up(ctx, opts, bins, imageArchives{
		pause:   pause,
		coreDNS: func() (string, error) { return dnsArchive, dnsWritten() },
	}, logf)
	if err != nil && c != nil {
		if dir, kerr := keepLogs(c); kerr == nil {
			err = fmt.Errorf("%w (the cluster's logs are kept in %s)", err, dir)
		}
		tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer tcancel()
		if serr := c.Stop(tctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	return c, nil
}

// findBinaries locates the control plane in the envtest assets (the
// kubernetes and etcd tool sets), the node in the kubernetes-node set and
// the cluster DNS in the coredns set.
func findBinaries() (binaries, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return binaries{}, err
	}
	nodeDir, err := toolDir("kubernetes-node")
	if err != nil {
		return binaries{}, err
	}
	dnsDir, err := toolDir("coredns")
	if err != nil {
		return binaries{}, err
	}
	b := binaries{
		etcd:              filepath.Join(assets, "etcd"),
		apiServer:         filepath.Join(assets, "kube-apiserver"),
		controllerManager: filepath.Join(assets, "kube-controller-manager"),
		kubectl:           filepath.Join(assets, "kubectl"),
		scheduler:         filepath.Join(nodeDir, "kube-scheduler"),
		kubelet:           filepath.Join(nodeDir, "kubelet"),
		proxy:             filepath.Join(nodeDir, "kube-proxy"),
		coreDNS:           filepath.Join(dnsDir, "coredns"),
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
	if _, err := os.Stat(b.coreDNS); err != nil {
		return b, fmt.Errorf("%s not found: run `make tools` (or hack/tools.sh build coredns)", b.coreDNS)
	}
	return b, nil
}

// toolDir returns the bin directory of a tool set (hack/tools.sh dir SET).
func toolDir(set string) (string, error) {
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "dir", set).Output()
	if err != nil {
		return "", fmt.Errorf("locating the %s tool set: %w", set, err)
	}
	return strings.TrimSpace(string(out)), nil
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
// temporary directory, which outlives the cluster, and returns its path:
// the components' logs, and the containers' logs (the cluster DNS's among
// them) as pod_NS_POD_UID_CONTAINER_N.log.
func keepLogs(c *Cluster) (string, error) {
	dir, err := os.MkdirTemp("", "kao-node-logs-")
	if err != nil {
		return "", err
	}
	logs, err := filepath.Glob(c.l.log("*"))
	if err != nil {
		return "", err
	}
	pods, err := filepath.Glob(filepath.Join(c.l.podLogs(), "*", "*", "*.log"))
	if err != nil {
		return "", err
	}
	for _, src := range append(logs, pods...) {
		name := filepath.Base(src)
		if rel, err := filepath.Rel(c.l.podLogs(), src); err == nil && !strings.HasPrefix(rel, "..") {
			name = "pod_" + strings.ReplaceAll(rel, string(filepath.Separator), "_")
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}
