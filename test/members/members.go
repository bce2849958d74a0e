package members

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kao-io/kao/internal/testenv"
)

// Options configure Start.
type Options struct {
	// Address is the IP address of this machine that every member's API
	// server binds to and names in its serving certificate. Clients must
	// reach the members there: for members of a Karmada control plane on
	// test hosts, the test hosts' gateway (hosts.Cluster.Gateway). Empty
	// means 127.0.0.1.
	Address string
	// Controllers are the kube-controller-manager controllers each member
	// runs, for a cluster that needs more than a member of Karmada does (a
	// host cluster with workloads). Empty means the member's set.
	Controllers []string
	// Lean trades a member's spare capacity for memory, for benchmarks that
	// start a hundred members on one machine: its API server serves only
	// the API groups a member of Karmada uses (leanAPIs), without a watch
	// cache or API priority and fairness, and its processes collect
	// garbage more often (leanGC). A member then takes about 140 MB of
	// anonymous memory instead of about 210 MB (measured on this machine:
	// kube-apiserver 121 MB instead of 188 MB, kube-controller-manager
	// 17 MB), and idles at the same 0.4% of a core. It stays a whole
	// cluster to Karmada: its own API server, objects, kube-system UID and
	// controllers.
	Lean bool
}

// leanAPIs are the API groups a Lean member serves: what Karmada's cluster
// controllers, kao's join, karmada-agent and the member's own controllers
// use, and what kube-apiserver refuses to start or become ready without
// (its admission plugins and post-start hooks read storage, node,
// scheduling, networking, admission registration and CRDs).
var leanAPIs = []string{
	"api/all=false", "api/v1=true", "apps/v1=true", "rbac.authorization.k8s.io/v1=true",
	"coordination.k8s.io/v1=true", "discovery.k8s.io/v1=true", "events.k8s.io/v1=true",
	"authentication.k8s.io/v1=true", "authorization.k8s.io/v1=true", "certificates.k8s.io/v1=true",
	"apiregistration.k8s.io/v1=true", "apiextensions.k8s.io/v1=true", "admissionregistration.k8s.io/v1=true",
	"networking.k8s.io/v1=true", "scheduling.k8s.io/v1=true", "storage.k8s.io/v1=true", "node.k8s.io/v1=true",
	"policy/v1=true",
}

// leanGC is the Go runtime's garbage collection target of a Lean member's
// processes: the heap may grow by half its live size between collections
// instead of by all of it. (A soft memory limit, GOMEMLIMIT=64MiB, saved
// 30 MB more but kept each idle API server collecting, at 10% of a core:
// a hundred of them would have taken five cores.)
const leanGC = "GOGC=50"

// apiServerArgs are the flags a member's API server adds for opts.
func (o Options) apiServerArgs() []string {
	if !o.Lean {
		return nil
	}
	return []string{"--watch-cache=false", "--enable-priority-and-fairness=false", "--runtime-config=" + strings.Join(leanAPIs, ",")}
}

// env is what a member's processes add to their environment for opts.
func (o Options) env() []string {
	if !o.Lean {
		return nil
	}
	return []string{leanGC}
}

// Member is one running member cluster.
type Member struct {
	// Name is the member's name in this harness (member-1, member-2, ...); it
	// names its etcd prefix and its directory, not its Karmada Cluster.
	Name string
	// Server is the API server's URL, https://<address>:<port>.
	Server string
	// Kubeconfig is an admin kubeconfig (system:masters) for Server, with its
	// CA and client certificate inline.
	Kubeconfig []byte
	// CA is the PEM certificate of the member's own CA, which signed its
	// serving certificate.
	CA []byte
	// KubeSystemUID is the UID of the member's kube-system namespace: the ID
	// Karmada gives the cluster.
	KubeSystemUID string
	// Dir holds the member's certificates and its processes' logs.
	Dir string
}

// Timeouts of Start: the machine may be busy with other tests.
const (
	etcdReadyTimeout   = 2 * time.Minute
	memberReadyTimeout = 4 * time.Minute
	// perMemberReadyTimeout is added to memberReadyTimeout for each member.
	perMemberReadyTimeout = 3 * time.Second
	pollInterval          = 500 * time.Millisecond
)

// startWave is how many API servers start at once: a hundred starting
// together on two cores starved the shared etcd until its requests timed
// out and API servers gave up during their start.
const startWave = 10

// controllers are the kube-controller-manager controllers a member runs.
const controllers = "serviceaccount-token,namespace,garbagecollector,root-ca-cert-publisher"

// binaries are the paths of the programs Start runs.
type binaries struct {
	etcd, apiServer, controllerManager string
}

// Start starts n member clusters on opts.Address, waits until each answers
// and runs its controllers, and stops them all in t.Cleanup. It skips t in
// -short mode and fails it when the binaries are missing.
func Start(t testing.TB, n int, opts Options) []*Member {
	t.Helper()
	if testing.Short() {
		t.Skip("member clusters: skipped in -short mode (they run kube-apiserver, kube-controller-manager and etcd)")
	}
	bins := requireBinaries(t)
	address := opts.Address
	if address == "" {
		address = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(address)
	if err != nil {
		t.Fatalf("member clusters: address %q is not an IP address: %v", address, err)
	}
	root := t.TempDir()
	t.Logf("member clusters: files and logs in %s", root)
	// One cleanup stops every process of the members at once (registered
	// first, it also covers a Start that fails half-way).
	var procs []*process
	t.Cleanup(func() { stopAll(procs) })
	started := func(p *process) *process {
		procs = append(procs, p)
		return p
	}

	etcd, etcdURL := startEtcd(t, bins.etcd, root, started)

	// API servers start in waves of startWave; each controller manager
	// only once its API server is ready, since it gives up on one that is
	// slow to start. Each API server's start costs a few seconds of CPU: on
	// two cores a hundred of them take minutes.
	ctx, cancel := context.WithTimeout(context.Background(), memberReadyTimeout+time.Duration(n)*perMemberReadyTimeout)
	defer cancel()
	members := make([]*Member, n)
	apiServers := make([]*process, n)
	controllerManagers := make([]*process, n)
	for lo := 0; lo < n; lo += startWave {
		wave := min(n, lo+startWave)
		for i := lo; i < wave; i++ {
			members[i], apiServers[i] = startAPIServer(t, bins, root, fmt.Sprintf("member-%d", i+1), ip, etcdURL, opts)
			started(apiServers[i])
		}
		for i := lo; i < wave; i++ {
			for attempt := 1; ; attempt++ {
				err := waitAPIServer(ctx, members[i], []*process{apiServers[i], etcd})
				if err == nil {
					break
				}
				if attempt == bindAttempts || !lostItsPort(apiServers[i]) {
					t.Fatalf("member clusters: %s's kube-apiserver did not become ready: %v", members[i].Name, err)
				}
				t.Logf("member clusters: %s's port (%s) was taken before its kube-apiserver bound it; starting it on another",
					members[i].Name, members[i].Server)
				members[i], apiServers[i] = startAPIServer(t, bins, root, members[i].Name, ip, etcdURL, opts)
				started(apiServers[i])
			}
			controllerManagers[i] = started(startControllerManager(t, bins, members[i], opts))
		}
	}
	for i, m := range members {
		uid, err := waitControllers(ctx, m, []*process{apiServers[i], controllerManagers[i], etcd})
		if err != nil {
			t.Fatalf("member clusters: %s did not come up: %v", m.Name, err)
		}
		m.KubeSystemUID = uid
	}
	return members
}

// requireBinaries finds etcd, kube-apiserver and kube-controller-manager in
// the tools cache (or $KUBEBUILDER_ASSETS).
func requireBinaries(t testing.TB) binaries {
	t.Helper()
	dir, err := testenv.AssetsDir()
	if err == nil {
		if _, statErr := os.Stat(filepath.Join(dir, "kube-controller-manager")); statErr != nil {
			err = fmt.Errorf("kube-controller-manager not found in %s: run `make tools` first", dir)
		}
	}
	if err != nil {
		t.Fatalf("member clusters need etcd, kube-apiserver and kube-controller-manager: %v; to skip: go test -short", err)
	}
	return binaries{
		etcd:              filepath.Join(dir, "etcd"),
		apiServer:         filepath.Join(dir, "kube-apiserver"),
		controllerManager: filepath.Join(dir, "kube-controller-manager"),
	}
}

// startEtcd starts the members' shared etcd on loopback and waits until it
// is healthy.
func startEtcd(t testing.TB, bin, root string, started func(*process) *process) (*process, string) {
	t.Helper()
	dir := filepath.Join(root, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(FreePort(t, "127.0.0.1"))
	peerURL := "http://127.0.0.1:" + strconv.Itoa(FreePort(t, "127.0.0.1"))
	p := started(start(t, "etcd", filepath.Join(root, "etcd.log"), bin, nil,
		"--name=members",
		"--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=members="+peerURL,
		// Test data: durability does not matter, speed on a busy disk does.
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	))
	ctx, cancel := context.WithTimeout(context.Background(), etcdReadyTimeout)
	defer cancel()
	err := poll(ctx, []*process{p}, func() (bool, error) {
		resp, err := http.Get(clientURL + "/health")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("member clusters: etcd did not become healthy: %v", err)
	}
	return p, clientURL
}

// startAPIServer writes a member's certificates and kubeconfig and starts
// its API server.
func startAPIServer(t testing.TB, bins binaries, root, name string, ip netip.Addr, etcdURL string, opts Options) (*Member, *process) {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	port := choosePort(t, ip.String())
	server := "https://" + net.JoinHostPort(ip.String(), strconv.Itoa(port))

	ca, err := newCA(name + "-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.issue("kube-apiserver", nil, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]netip.Addr{ip, netip.MustParseAddr("10.0.0.1")}, true)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.issue("kao-member-admin", []string{"system:masters"}, nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	saKey, saPub, err := newServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthorityData: ca.certPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: admin.certPEM, ClientKeyData: admin.keyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: "admin"}},
		CurrentContext: name,
	})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"ca.crt": ca.certPEM, "apiserver.crt": serving.certPEM, "apiserver.key": serving.keyPEM,
		"sa.key": saKey, "sa.pub": saPub, "admin.kubeconfig": kubeconfig,
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := func(f string) string { return filepath.Join(dir, f) }

	apiServer := start(t, name+"-kube-apiserver", path("kube-apiserver.log"), bins.apiServer, opts.env(), append([]string{
		"--etcd-servers=" + etcdURL,
		// Its own prefix: its own objects and its own kube-system UID.
		"--etcd-prefix=/kao-members/" + name,
		"--bind-address=" + ip.String(),
		"--advertise-address=" + ip.String(),
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + path("generated"),
		"--tls-cert-file=" + path("apiserver.crt"),
		"--tls-private-key-file=" + path("apiserver.key"),
		"--client-ca-file=" + path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + path("sa.pub"),
		"--service-account-signing-key-file=" + path("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--profiling=false",
	}, opts.apiServerArgs()...)...)
	m := &Member{Name: name, Server: server, Kubeconfig: kubeconfig, CA: ca.certPEM, Dir: dir}
	return m, apiServer
}

// startControllerManager starts m's controller manager with the files
// startAPIServer wrote, running opts.Controllers (the member's set when
// empty).
func startControllerManager(t testing.TB, bins binaries, m *Member, opts Options) *process {
	t.Helper()
	path := func(f string) string { return filepath.Join(m.Dir, f) }
	list := controllers
	if len(opts.Controllers) > 0 {
		list = strings.Join(opts.Controllers, ",")
	}
	return start(t, m.Name+"-kube-controller-manager", path("kube-controller-manager.log"), bins.controllerManager, opts.env(),
		"--kubeconfig="+path("admin.kubeconfig"),
		"--controllers="+list,
		"--root-ca-file="+path("ca.crt"),
		"--service-account-private-key-file="+path("sa.key"),
		"--use-service-account-credentials=false",
		"--leader-elect=false",
		// Nothing scrapes it; serving nothing avoids a port per member.
		"--secure-port=0",
		"--profiling=false",
	)
}

// Client is an admin client of m, with a 10 s timeout per request.
func (m *Member) Client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(m.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// waitAPIServer waits until m's API server is ready (every post-start hook
// done, RBAC bootstrapped). It gives up early when one of procs exits.
func waitAPIServer(ctx context.Context, m *Member, procs []*process) error {
	c, err := m.Client()
	if err != nil {
		return err
	}
	return poll(ctx, procs, func() (bool, error) {
		body, err := c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
}

// waitControllers waits until m's controller manager published
// kube-root-ca.crt into kube-system, and returns the kube-system UID. It
// gives up early when one of procs exits.
func waitControllers(ctx context.Context, m *Member, procs []*process) (string, error) {
	c, err := m.Client()
	if err != nil {
		return "", err
	}
	var uid string
	err = poll(ctx, procs, func() (bool, error) {
		ns, err := c.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		uid = string(ns.UID)
		_, err = c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
	return uid, err
}

// poll calls ready until it returns true, ctx ends, or a process in procs
// exits (then the error has the end of its log).
func poll(ctx context.Context, procs []*process, ready func() (bool, error)) error {
	for {
		ok, err := ready()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		for _, p := range procs {
			if p.exited() {
				err := p.exitErr()
				if err == nil {
					err = errors.New("exit status 0")
				}
				return fmt.Errorf("%s exited: %w; the end of %s:\n%s", p.name, err, p.logPath, p.logTail(40))
			}
		}
		select {
		case <-ctx.Done():
			var tails []string
			for _, p := range procs {
				tails = append(tails, fmt.Sprintf("the end of %s:\n%s", p.logPath, p.logTail(15)))
			}
			return fmt.Errorf("%w; %s", ctx.Err(), strings.Join(tails, "\n"))
		case <-time.After(pollInterval):
		}
	}
}

// FreePort returns a TCP port that is free on address right now and that
// no other caller in this process was given: two members starting at once
// on one address can never be handed the same port between choosing it and
// binding it (BenchmarkMemberJoin once failed with "address already in use"
// that way). Ports come from below the kernel's ephemeral range (32768 and
// up by default): a port the kernel handed out with Listen(":0") is also
// what it picks as the source port of outgoing connections, which the
// clients of twenty API servers starting at once open by the hundred.
func FreePort(t testing.TB, address string) int {
	t.Helper()
	const low, high = 20000, 32000
	handed.mu.Lock()
	defer handed.mu.Unlock()
	for range 1000 {
		port := low + rand.IntN(high-low)
		key := net.JoinHostPort(address, strconv.Itoa(port))
		if handed.ports[key] {
			continue
		}
		l, err := net.Listen("tcp", key)
		if err != nil {
			continue
		}
		_ = l.Close()
		handed.ports[key] = true
		return port
	}
	t.Fatalf("member clusters: no free port in %d-%d on %s", low, high, address)
	return 0
}

// bindAttempts is how many ports a member's API server is given before Start
// gives up: FreePort rules out the ports this process handed out, but any
// other process (another test binary, a NodePort, a kube-apiserver's own
// listener of another test) may still bind the port between FreePort's
// check and the API server's bind.
const bindAttempts = 3

// choosePort picks a member API server's port; tests replace it to hand out
// a taken port.
var choosePort = FreePort

// lostItsPort tells whether p exited because its port was taken.
func lostItsPort(p *process) bool {
	return p.exited() && strings.Contains(p.logTail(40), "address already in use")
}

// handed are the ports FreePort gave out in this process, by address and
// port. They are never handed out again: 12000 ports per address outlast
// any test binary's members.
var handed = struct {
	mu    sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// start runs bin in its own process group with its output in logPath; the
// caller stops it (Start's cleanup).
func start(t testing.TB, name, logPath, bin string, env []string, args ...string) *process {
	t.Helper()
	p, err := startProcess(name, logPath, bin, env, args...)
	if err != nil {
		t.Fatalf("member clusters: %v", err)
	}
	return p
}
