package members

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestStart proves what the member tests rely on: two members are separate
// clusters (their own kube-system UID, their own objects), each serves a
// certificate of its own CA for the address, and each issues
// service-account tokens and deletes namespaces.
func TestStart(t *testing.T) {
	ms := Start(t, 2, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ms[0].KubeSystemUID == "" || ms[0].KubeSystemUID == ms[1].KubeSystemUID {
		t.Errorf("kube-system UIDs %q and %q, want two different ones", ms[0].KubeSystemUID, ms[1].KubeSystemUID)
	}
	if ms[0].Server == ms[1].Server || !strings.HasPrefix(ms[0].Server, "https://127.0.0.1:") {
		t.Errorf("servers %q and %q, want two https://127.0.0.1 URLs", ms[0].Server, ms[1].Server)
	}
	clients := make([]*kubernetes.Clientset, len(ms))
	for i, m := range ms {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(m.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		if clients[i], err = kubernetes.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}

	// Each member trusts only its own CA.
	block, _ := pem.Decode(ms[1].CA)
	other, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := clientcmd.RESTConfigFromKubeConfig(ms[0].Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	wrong.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Raw})
	wrongClient, err := kubernetes.NewForConfig(wrong)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrongClient.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
		t.Error("member-1 answered a client that trusts only member-2's CA")
	}

	// Objects of one member do not show in the other.
	c0, c1 := clients[0], clients[1]
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "only-in-member-1"}}
	if _, err := c0.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{}); err == nil {
		t.Error("member-2 sees member-1's namespace")
	}

	requireToken(ctx, t, c0, ns.Name)

	// The namespace controller finishes a deletion.
	if err := c0.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the namespace to be gone", func() bool {
		_, err := c0.CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
		return err != nil && strings.Contains(err.Error(), "not found")
	})
}

// TestLeanMember proves a Lean member still does what a member of Karmada
// needs (it fills service-account tokens, which kao's Push join waits for)
// while serving fewer API groups, and that its processes run with the
// lean garbage collection target.
func TestLeanMember(t *testing.T) {
	m := Start(t, 1, Options{Lean: true})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := m.Client()
	if err != nil {
		t.Fatal(err)
	}
	groups, err := c.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, g := range groups.Groups {
		served[g.Name] = true
	}
	for _, g := range []string{"", "apps", "rbac.authorization.k8s.io", "coordination.k8s.io"} {
		if !served[g] {
			t.Errorf("API group %q is not served; a member of Karmada needs it", g)
		}
	}
	for _, g := range []string{"batch", "autoscaling", "flowcontrol.apiserver.k8s.io"} {
		if served[g] {
			t.Errorf("API group %q is served by a Lean member", g)
		}
	}

	requireToken(ctx, t, c, metav1.NamespaceDefault)

	// Both of the member's processes name its directory on their command
	// line (certificates, kubeconfig); each must have the setting.
	found := 0
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmdline), m.Dir+"/") {
			continue
		}
		environ, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(environ), "\x00"), leanGC) {
			t.Errorf("%s runs without %s", strings.SplitN(string(cmdline), "\x00", 2)[0], leanGC)
		}
		found++
	}
	if found != 2 {
		t.Errorf("found %d processes of the member, want its kube-apiserver and kube-controller-manager", found)
	}
}

// requireToken proves the member's token controller works: it fills a
// service-account token Secret created in ns with a token and the CA.
func requireToken(ctx context.Context, t *testing.T, c *kubernetes.Clientset, ns string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns}}
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-token", Namespace: ns,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: sa.Name}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	if _, err := c.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "a token in probe-token", func() bool {
		s, err := c.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
		return err == nil && len(s.Data[corev1.ServiceAccountTokenKey]) > 0 && len(s.Data[corev1.ServiceAccountRootCAKey]) > 0
	})
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestFreePortNeverHandsOutAPortTwice asks for ports from many goroutines
// at once, as members starting together do: every port is distinct and was
// free when handed out.
func TestFreePortNeverHandsOutAPortTwice(t *testing.T) {
	const callers, each = 16, 50
	got := make(chan int, callers*each)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				got <- FreePort(t, "127.0.0.1")
			}
		}()
	}
	wg.Wait()
	close(got)
	seen := map[int]bool{}
	for p := range got {
		if seen[p] {
			t.Fatalf("port %d was handed out twice", p)
		}
		seen[p] = true
	}
}

// TestAMemberWhosePortIsTakenStartsOnAnother hands a member's API server a
// port another listener holds, as a process outside this test binary could
// take it between FreePort's check and the bind: the API server exits with
// "address already in use", and Start brings it up on another port.
func TestAMemberWhosePortIsTakenStartsOnAnother(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	choosePort = func(t testing.TB, address string) int {
		calls++
		if calls == 1 {
			return takenPort
		}
		return FreePort(t, address)
	}
	t.Cleanup(func() { choosePort = FreePort })

	ms := Start(t, 1, Options{Lean: true})
	if calls != 2 {
		t.Errorf("Start chose a port %d times, want 2 (the taken one, then another)", calls)
	}
	if strings.HasSuffix(ms[0].Server, ":"+strconv.Itoa(takenPort)) {
		t.Errorf("the member serves on the taken port: %s", ms[0].Server)
	}
	c, err := ms[0].Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Errorf("the member does not answer on its new port: %v", err)
	}
}
