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
	pollInterval       = 500 * time.Millisecond
)

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

	// All API servers start at once; each controller manager only once its
	// API server is ready, since it gives up on one that is slow to start.
	members := make([]*Member, n)
	apiServers := make([]*process, n)
	for i := range members {
		members[i], apiServers[i] = startAPIServer(t, bins, root, fmt.Sprintf("member-%d", i+1), ip, etcdURL)
		started(apiServers[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), memberReadyTimeout)
	defer cancel()
	controllerManagers := make([]*process, n)
	for i, m := range members {
		if err := waitAPIServer(ctx, m, []*process{apiServers[i], etcd}); err != nil {
			t.Fatalf("member clusters: %s's kube-apiserver did not become ready: %v", m.Name, err)
		}
		controllerManagers[i] = started(startControllerManager(t, bins, m, opts.Controllers))
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
	p := started(start(t, "etcd", filepath.Join(root, "etcd.log"), bin,
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
func startAPIServer(t testing.TB, bins binaries, root, name string, ip netip.Addr, etcdURL string) (*Member, *process) {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t, ip.String())
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

	apiServer := start(t, name+"-kube-apiserver", path("kube-apiserver.log"), bins.apiServer,
		"--etcd-servers="+etcdURL,
		// Its own prefix: its own objects and its own kube-system UID.
		"--etcd-prefix=/kao-members/"+name,
		"--bind-address="+ip.String(),
		"--advertise-address="+ip.String(),
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+path("generated"),
		"--tls-cert-file="+path("apiserver.crt"),
		"--tls-private-key-file="+path("apiserver.key"),
		"--client-ca-file="+path("ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+path("sa.pub"),
		"--service-account-signing-key-file="+path("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true",
		"--profiling=false",
	)
	m := &Member{Name: name, Server: server, Kubeconfig: kubeconfig, CA: ca.certPEM, Dir: dir}
	return m, apiServer
}

// startControllerManager starts m's controller manager with the files
// startAPIServer wrote, running the given controllers (the member's set
// when empty).
func startControllerManager(t testing.TB, bins binaries, m *Member, run []string) *process {
	t.Helper()
	path := func(f string) string { return filepath.Join(m.Dir, f) }
	list := controllers
	if len(run) > 0 {
		list = strings.Join(run, ",")
	}
	return start(t, m.Name+"-kube-controller-manager", path("kube-controller-manager.log"), bins.controllerManager,
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

// handed are the ports FreePort gave out in this process, by address and
// port. They are never handed out again: 12000 ports per address outlast
// any test binary's members.
var handed = struct {
	mu    sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// start runs bin in its own process group with its output in logPath; the
// caller stops it (Start's cleanup).
func start(t testing.TB, name, logPath, bin string, args ...string) *process {
	t.Helper()
	p, err := startProcess(name, logPath, bin, args...)
	if err != nil {
		t.Fatalf("member clusters: %v", err)
	}
	return p
}
