package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kao-io/kao/internal/machine"
	"github.com/kao-io/kao/internal/procfs"
)

// Cluster is a running single-node cluster.
type Cluster struct {
	opts Options
	idx  int
	l    layout
	a    addresses
	bins binaries
	logf func(format string, args ...any)

	mu   sync.Mutex
	st   *state
	lock *machine.Lock
	// stopLoadBalancer ends the load-balancer allocator; nil before it
	// starts and once it is stopped.
	stopLoadBalancer func()

	config  *rest.Config
	startup time.Duration
}

// binaries are the programs a cluster runs; coreDNS runs in a pod, from
// CoreDNSImage.
type binaries struct {
	etcd, apiServer, controllerManager, kubectl string
	scheduler, kubelet, proxy                   string
	coreDNS                                     string
}

// imageArchives are the image archives a cluster imports before its
// kubelet starts.
type imageArchives struct {
	// pause is the sandbox image's, imported as soon as containerd runs.
	pause string
	// coreDNS waits for the cluster DNS's archive, written in the
	// background, and returns its path; it is imported while the control
	// plane starts.
	coreDNS func() (string, error)
}

// up creates a cluster: a free index, its network, processes and cluster
// DNS, until the node is Ready and the DNS answers. If it fails, what it
// created stays recorded for teardown.
func up(ctx context.Context, opts Options, bins binaries, images imageArchives, logf func(string, ...any)) (*Cluster, error) {
	if err := os.MkdirAll(opts.StateRoot, 0o755); err != nil {
		return nil, fmt.Errorf("creating the state root: %w", err)
	}
	reapOrphans(ctx, opts.StateRoot, logf)
	c, err := claim(ctx, opts, logf)
	if err != nil {
		return nil, err
	}
	c.bins = bins
	start := time.Now()
	if err := c.create(ctx, images); err != nil {
		return c, err
	}
	c.startup = time.Since(start)
	logf("cluster %s up in %s (node %s, API server https://%s:%d, directory %s)",
		nodeName(c.idx), c.startup.Round(10*time.Millisecond), c.a.Node, c.a.Node, apiServerPort, c.l)
	return c, nil
}

// claim takes the lowest free cluster index: its lock is free, its
// namespace and link do not exist, its /22 overlaps no route.
func claim(ctx context.Context, opts Options, logf func(string, ...any)) (*Cluster, error) {
	pool := netip.MustParsePrefix(opts.SubnetPool)
	routes, err := machine.UsedPrefixes(ctx)
	if err != nil {
		return nil, err
	}
	for idx := 0; idx < maxClusters && idx < 1<<(22-pool.Bits()); idx++ {
		a, err := addressesFor(pool, idx)
		if err != nil {
			return nil, err
		}
		if machine.NetnsExists(netnsName(idx)) || machine.LinkExists(vethName(idx)) || overlapsAny(a.block(), routes) {
			continue
		}
		lock, ok, err := machine.TryLock(lockPath(opts.StateRoot, idx))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		dir := clusterDir(opts.StateRoot, idx)
		if _, err := os.Stat(dir); err == nil {
			// Left by a cluster whose process is gone and that reapOrphans
			// could not remove: do not build on top of it.
			lock.Unlock()
			logf("skipping cluster index %d: %s is left over (remove it by hand)", idx, dir)
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			lock.Unlock()
			return nil, err
		}
		st := &state{Version: stateVersion, Index: idx}
		if err := saveState(dir, st); err != nil {
			lock.Unlock()
			return nil, err
		}
		return &Cluster{opts: opts, idx: idx, l: layout(dir), a: a, logf: logf, st: st, lock: lock}, nil
	}
	return nil, fmt.Errorf("no free cluster index in %s below %s", opts.SubnetPool, opts.StateRoot)
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

// reapOrphans tears down clusters whose lock is free: their process died
// before its cleanup ran.
func reapOrphans(ctx context.Context, root string, logf func(string, ...any)) {
	for idx := 0; idx < maxClusters; idx++ {
		dir := clusterDir(root, idx)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		lock, ok, err := machine.TryLock(lockPath(root, idx))
		if err != nil || !ok {
			continue
		}
		logf("removing cluster %d: the process that started it is gone", idx)
		if err := teardown(ctx, layout(dir), logf); err != nil {
			logf("removing cluster %d: %v", idx, err)
		}
		lock.Unlock()
	}
}

func (c *Cluster) save() error { return saveState(string(c.l), c.st) }

// create writes the certificates and configs, creates the node's network
// and starts the processes in order, waiting for each stage, and installs
// the cluster DNS.
func (c *Cluster) create(ctx context.Context, images imageArchives) error {
	l, a, node := c.l, c.a, nodeName(c.idx)
	for _, d := range machineDirs() {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			c.st.CreatedDirs = append(c.st.CreatedDirs, d)
		}
	}
	c.st.NetnsDirMounted = !isMountPoint(machine.NetnsDir)
	c.st.Netns, c.st.Veth, c.st.CNINetwork = netnsName(c.idx), vethName(c.idx), cniNetworkName(c.idx)
	if err := c.save(); err != nil {
		return err
	}
	if err := writePKI(l, a, node); err != nil {
		return err
	}
	for _, write := range []func() error{
		func() error { return writeContainerdConfig(l) },
		func() error { return writeCNIConfig(l, a, c.idx) },
		func() error { return writeKubeletConfig(l, a) },
		func() error { return writeKubeProxyConfig(l, a, node) },
	} {
		if err := write(); err != nil {
			return err
		}
	}
	for _, d := range []string{l.podLogs(), l.kubeletRoot(), l.cniIPAMDir(), l.etcdData()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := createNodeNetwork(ctx, c.st.Netns, c.st.Veth, a); err != nil {
		return err
	}

	// The container runtime comes up beside the control plane.
	if err := c.start("containerd", "containerd", "--config", l.containerd("config.toml")); err != nil {
		return err
	}
	if err := c.startControlPlane(); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig("admin"))
	if err != nil {
		return err
	}
	c.config = cfg
	if err := c.waitFor(ctx, 30*time.Second, "containerd's socket", l.log("containerd"), func() (bool, error) {
		_, err := run(ctx, "ctr", "--address", l.containerdSocket(), "version")
		return err == nil, nil
	}); err != nil {
		return err
	}
	if err := c.ImportImage(images.pause); err != nil {
		return err
	}
	dnsImported := background(func() error {
		archive, err := images.coreDNS()
		if err != nil {
			return err
		}
		return c.ImportImage(archive)
	})
	defer func() { _ = dnsImported() }()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, time.Minute, "the API server to be ready", l.log("kube-apiserver"), func() (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	}); err != nil {
		return err
	}
	// The API server creates kube-system soon after it is ready.
	if err := c.waitFor(ctx, time.Minute, "namespace kube-system", l.log("kube-apiserver"), func() (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, dnsNamespace, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	if err := installDNS(ctx, client, a); err != nil {
		return err
	}
	if err := c.startLoadBalancer(ctx); err != nil {
		return err
	}
	if err := c.startControllers(); err != nil {
		return err
	}
	// The cluster DNS's pod must find its image.
	if err := dnsImported(); err != nil {
		return err
	}
	if err := c.startNode(); err != nil {
		return err
	}
	if err := c.waitFor(ctx, c.opts.StartTimeout, "node "+node+" to be Ready and untainted", l.log("kubelet"), func() (bool, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}
	// Pods need their namespace's default service account.
	if err := c.waitFor(ctx, time.Minute, "the default service account", l.log("kube-controller-manager"), func() (bool, error) {
		_, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	return c.waitForDNS(ctx, client)
}

// startControlPlane starts etcd and kube-apiserver in the node's network
// namespace: etcd on the namespace's loopback, the API server on the node
// address.
func (c *Cluster) startControlPlane() error {
	l, a, b := c.l, c.a, c.bins
	if err := c.start("etcd", b.etcd, flags(
		"name", "default",
		"data-dir", l.etcdData(),
		"listen-client-urls", "http://127.0.0.1:2379",
		"advertise-client-urls", "http://127.0.0.1:2379",
		"listen-peer-urls", "http://127.0.0.1:2380",
		"initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"initial-cluster", "default=http://127.0.0.1:2380",
		"unsafe-no-fsync", "true",
	)...); err != nil {
		return err
	}
	if err := c.start("kube-apiserver", b.apiServer, flags(
		"etcd-servers", "http://127.0.0.1:2379",
		"bind-address", a.Node.String(),
		"advertise-address", a.Node.String(),
		"secure-port", fmt.Sprint(apiServerPort),
		"tls-cert-file", l.pki("apiserver.crt"),
		"tls-private-key-file", l.pki("apiserver.key"),
		"client-ca-file", l.pki("ca.crt"),
		"service-account-key-file", l.pki("sa.pub"),
		"service-account-signing-key-file", l.pki("sa.key"),
		"service-account-issuer", "https://kubernetes.default.svc."+dnsDomain,
		"service-cluster-ip-range", a.Services.String(),
		"authorization-mode", "Node,RBAC",
		"enable-admission-plugins", "NodeRestriction",
		"allow-privileged", "true",
		"kubelet-client-certificate", l.pki("apiserver-kubelet-client.crt"),
		"kubelet-client-key", l.pki("apiserver-kubelet-client.key"),
		"kubelet-certificate-authority", l.pki("ca.crt"),
		"kubelet-preferred-address-types", "InternalIP",
		"profiling", "false",
	)...); err != nil {
		return err
	}
	return nil
}

// startControllers starts kube-controller-manager and kube-scheduler, once
// the API server is ready (they exit if RBAC's bootstrap roles are not
// there yet).
func (c *Cluster) startControllers() error {
	l, a, b := c.l, c.a, c.bins
	if err := c.start("kube-controller-manager", b.controllerManager, flags(
		"kubeconfig", l.kubeconfig("controller-manager"),
		"authentication-kubeconfig", l.kubeconfig("controller-manager"),
		"authorization-kubeconfig", l.kubeconfig("controller-manager"),
		"bind-address", "127.0.0.1",
		"service-account-private-key-file", l.pki("sa.key"),
		"root-ca-file", l.pki("ca.crt"),
		"use-service-account-credentials", "true",
		"service-cluster-ip-range", a.Services.String(),
		"allocate-node-cidrs", "false",
		"leader-elect", "false",
		"profiling", "false",
	)...); err != nil {
		return err
	}
	return c.start("kube-scheduler", b.scheduler, flags(
		"kubeconfig", l.kubeconfig("scheduler"),
		"authentication-kubeconfig", l.kubeconfig("scheduler"),
		"authorization-kubeconfig", l.kubeconfig("scheduler"),
		"bind-address", "127.0.0.1",
		"leader-elect", "false",
		"profiling", "false",
	)...)
}

// startNode starts the kubelet and kube-proxy.
func (c *Cluster) startNode() error {
	l, a, b, node := c.l, c.a, c.bins, nodeName(c.idx)
	if err := c.start("kubelet", b.kubelet, flags(
		"config", l.path("kubelet.yaml"),
		"kubeconfig", l.kubeconfig("kubelet"),
		"root-dir", l.kubeletRoot(),
		"cert-dir", l.path("kubelet-pki"),
		"hostname-override", node,
		"node-ip", a.Node.String(),
	)...); err != nil {
		return err
	}
	return c.start("kube-proxy", b.proxy, flags("config", l.path("kube-proxy.yaml"))...)
}

// start starts a program in the node's network namespace and records it.
func (c *Cluster) start(name, bin string, args ...string) error {
	cmd, err := startInNetns(c.st.Netns, c.l.log(name), append([]string{bin}, args...)...)
	if err != nil {
		return err
	}
	p, err := identify(name, cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Processes = append(c.st.Processes, p)
	return c.save()
}

// waitFor polls cond every 200ms until it holds or the timeout passes; the
// error names what it waited for and ends with the log that tells why.
func waitFor(ctx context.Context, timeout time.Duration, what, logPath string, cond func() (bool, error)) error {
	return waitAlive(ctx, timeout, what, logPath, nil, cond)
}

// waitAlive is waitFor that also fails as soon as one of procs has exited,
// with the end of that program's log.
func waitAlive(ctx context.Context, timeout time.Duration, what, logPath string, procs func() []processID, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		if procs != nil {
			for _, p := range procs() {
				if !p.alive() {
					return fmt.Errorf("waiting for %s: %s exited; last lines of its log:\n%s", what, p.Name, tail(filepath.Join(filepath.Dir(logPath), p.Name+".log"), 20))
				}
			}
		}
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: timed out after %s; last lines of %s:\n%s", what, timeout, logPath, tail(logPath, 20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ImportImage imports an OCI or Docker image archive (see WriteImage and
// BuildImage) into the node's container runtime, where pods find it with
// imagePullPolicy: Never (or IfNotPresent and a tag other than latest).
// The operator's image carries the offline bundle (1.2 GB): unpacking it
// took over two minutes in CI, beside the other tests' control planes.
func (c *Cluster) ImportImage(archive string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := run(ctx, "ctr", "--address", c.l.containerdSocket(), "--namespace", "k8s.io", "images", "import", archive); err != nil {
		return fmt.Errorf("importing image %s: %w", archive, err)
	}
	return nil
}

// teardown stops and removes everything the cluster in dir recorded: the
// pods (through the API server, so that the kubelet and CNI clean up after
// them), the processes, the containers left running, the mounts, the
// network, libcni's cache files and the directory. It goes on after a
// failed step and returns every error.
func teardown(ctx context.Context, l layout, logf func(string, ...any)) error {
	st, err := loadState(string(l))
	if errors.Is(err, os.ErrNotExist) {
		return removeAll(string(l))
	}
	if err != nil {
		return err
	}
	var errs []error
	byName := map[string]processID{}
	for _, p := range st.Processes {
		byName[p.Name] = p
	}
	if byName["kube-apiserver"].alive() && byName["kubelet"].alive() {
		for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
			_ = stopProcess(ctx, byName[name], 5*time.Second)
		}
		if err := drainPods(ctx, l, logf); err != nil {
			logf("deleting the pods before the node stops: %v (removing their containers by force)", err)
		}
	}
	for i := len(st.Processes) - 1; i >= 0; i-- {
		if err := stopProcess(ctx, st.Processes[i], 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", st.Processes[i].Name, err))
		}
	}
	// Containers that outlived the kubelet: their shims still name our
	// containerd's socket.
	socket := l.containerdSocket()
	if err := procfs.KillUntilGone(ctx, 10*time.Second, func() ([]int, error) { return descendants(shimsOf(socket)), nil }); err != nil {
		errs = append(errs, fmt.Errorf("stopping containers: %w", err))
	}
	removeContainerLeftovers(l)
	if err := unmountAll(string(l)); err != nil {
		errs = append(errs, err)
	}
	if err := deleteNodeNetwork(ctx, st.Netns, st.Veth); err != nil {
		errs = append(errs, err)
	}
	if st.CNINetwork != "" {
		cached, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", st.CNINetwork+"-*"))
		for _, f := range cached {
			_ = os.Remove(f)
		}
	}
	removeLogLinks(l)
	for _, d := range st.CreatedDirs {
		_ = syscall.Rmdir(d) // only if empty: someone else may use it by now
	}
	if st.NetnsDirMounted {
		// `ip netns add` made /run/netns a mount point of its own; undo it
		// if no namespace is left there. A namespace added meanwhile keeps
		// it busy, so the unmount fails and it stays.
		entries, err := os.ReadDir(machine.NetnsDir)
		if err == nil && len(entries) == 0 {
			err = syscall.Unmount(machine.NetnsDir, 0)
		}
		if err != nil || len(entries) > 0 {
			logf("leaving %s mounted: %d namespaces there (%v)", machine.NetnsDir, len(entries), err)
		}
	}
	if err := removeAll(string(l)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// drainPods deletes every pod at once and waits until the node's container
// runtime runs none, so the kubelet has torn each pod's network down.
func drainPods(ctx context.Context, l layout, logf func(string, ...any)) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig("admin"))
	if err != nil {
		return err
	}
	cfg.Timeout = 10 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	zero := int64(0)
	for _, p := range pods.Items {
		err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if len(pods.Items) > 0 {
		logf("deleted %d pods; waiting for the kubelet to stop them", len(pods.Items))
	}
	return waitFor(ctx, 30*time.Second, "the node's containers to stop", l.log("kubelet"), func() (bool, error) {
		out, err := run(ctx, "ctr", "--address", l.containerdSocket(), "--namespace", "k8s.io", "tasks", "list", "--quiet")
		return err == nil && strings.TrimSpace(out) == "", nil
	})
}

// containerIDs returns the ids of the containers and pod sandboxes that
// the node's containerd still knows (runc's and the shims' state
// directories): those that were killed rather than deleted.
func containerIDs(l layout) []string {
	seen := map[string]bool{}
	var ids []string
	for _, dir := range []string{
		filepath.Join(l.containerd("runc"), "k8s.io"),
		filepath.Join(l.containerd("state"), "io.containerd.runtime.v2.task", "k8s.io"),
	} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !seen[e.Name()] {
				seen[e.Name()] = true
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}

// removeContainerLeftovers removes what a killed container leaves outside
// the cluster directory: the cgroups runc made for it
// (CONTROLLER/k8s.io/ID; only empty cgroups go) and libcni's cache file of
// its sandbox's loopback network.
func removeContainerLeftovers(l layout) {
	controllers, _ := os.ReadDir("/sys/fs/cgroup")
	for _, id := range containerIDs(l) {
		for _, ctl := range controllers {
			_ = syscall.Rmdir(filepath.Join("/sys/fs/cgroup", ctl.Name(), "k8s.io", id))
		}
		_ = os.Remove(filepath.Join("/var/lib/cni/results", "cni-loopback-"+id+"-lo"))
	}
}

// removeLogLinks removes the kubelet's links in /var/log/containers that
// point into the cluster directory.
func removeLogLinks(l layout) {
	links, _ := os.ReadDir("/var/log/containers")
	for _, e := range links {
		p := filepath.Join("/var/log/containers", e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, string(l)+"/") {
			_ = os.Remove(p)
		}
	}
}

// unmountAll unmounts every mount at or below dir, deepest first; a mount
// still busy is detached.
func unmountAll(dir string) error {
	for range 3 {
		mounts, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			return nil
		}
		for _, mp := range mounts {
			if err := syscall.Unmount(mp, 0); err != nil {
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
	}
	mounts, _ := mountsUnder(dir)
	if len(mounts) > 0 {
		return fmt.Errorf("mounts left below %s: %v", dir, mounts)
	}
	return nil
}

// removeAll removes dir unless something is still mounted below it (then
// RemoveAll would delete through the mount).
func removeAll(dir string) error {
	if mounts, _ := mountsUnder(dir); len(mounts) > 0 {
		return fmt.Errorf("not removing %s: mounts left below it: %v", dir, mounts)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// Kubeconfig returns the path of a cluster-admin kubeconfig.
func (c *Cluster) Kubeconfig() string { return c.l.kubeconfig("admin") }

// FlatKubeconfig returns the admin kubeconfig with its certificates inline,
// for consumers that refuse kubeconfigs naming files (kao does).
func (c *Cluster) FlatKubeconfig() ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	if err := clientcmdapi.FlattenConfig(cfg); err != nil {
		return nil, err
	}
	return clientcmd.Write(*cfg)
}

// Config returns a cluster-admin REST config (a copy).
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// NodeName returns the node's name.
func (c *Cluster) NodeName() string { return nodeName(c.idx) }

// NodeIP returns the node's address: the API server and the kubelet listen
// on it, and the machine reaches it (and pods and Services) over a link
// that the harness created.
func (c *Cluster) NodeIP() string { return c.a.Node.String() }

// HostIP returns the machine's address on the node's link: what pods and
// the node reach the machine (a process outside the cluster) at.
func (c *Cluster) HostIP() string { return c.a.Host.String() }

// PodCIDR returns the pod range: the CNI bridge's subnet.
func (c *Cluster) PodCIDR() string { return c.a.Pods.String() }

// ServiceCIDR returns the Service cluster IP range.
func (c *Cluster) ServiceCIDR() string { return c.a.Services.String() }

// LoadBalancerCIDR returns the load-balancer pool: Services of type
// LoadBalancer without a loadBalancerClass get its addresses, and the
// machine routes it to the node (see the package doc).
func (c *Cluster) LoadBalancerCIDR() string { return c.a.LoadBalancers.String() }

// DNSServiceIP returns the cluster IP of the cluster DNS (the Service
// kube-system/kube-dns): the nameserver in the pods' resolv.conf, for the
// cluster domain DNSDomain.
func (c *Cluster) DNSServiceIP() string { return c.a.DNSService.String() }

// DNSDomain returns the cluster domain, cluster.local.
func (c *Cluster) DNSDomain() string { return dnsDomain }

// Dir returns the cluster's directory: certificates, configs and, in logs/,
// every component's log.
func (c *Cluster) Dir() string { return string(c.l) }

// LogPath returns the log of a component: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd, kubelet, kube-proxy,
// or load-balancer (the load-balancer allocator's).
func (c *Cluster) LogPath(component string) string { return c.l.log(component) }

// StartupDuration returns how long the cluster took to come up, from
// writing its certificates until the node was Ready and the cluster DNS
// answered.
func (c *Cluster) StartupDuration() time.Duration { return c.startup }

// Kubectl returns an unstarted kubectl command against the cluster.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.bins.kubectl, append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
}

// APIServerURL returns the API server's URL.
func (c *Cluster) APIServerURL() string {
	return "https://" + net.JoinHostPort(c.a.Node.String(), fmt.Sprint(apiServerPort))
}

// Stop ends the load-balancer allocator, tears the cluster down (see the
// package doc) and releases its index. Start's cleanup calls it; a second
// call does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lock == nil {
		return nil
	}
	start := time.Now()
	if c.stopLoadBalancer != nil {
		c.stopLoadBalancer()
		c.stopLoadBalancer = nil
	}
	err := teardown(ctx, c.l, c.logf)
	c.lock.Unlock()
	c.lock = nil
	if err != nil {
		return fmt.Errorf("tearing down %s: %w", nodeName(c.idx), err)
	}
	c.logf("cluster %s torn down in %s", nodeName(c.idx), time.Since(start).Round(10*time.Millisecond))
	return nil
}

// waitFor is waitAlive over the cluster's processes.
func (c *Cluster) waitFor(ctx context.Context, timeout time.Duration, what, logPath string, cond func() (bool, error)) error {
	return waitAlive(ctx, timeout, what, logPath, func() []processID {
		c.mu.Lock()
		defer c.mu.Unlock()
		return append([]processID(nil), c.st.Processes...)
	}, cond)
}
