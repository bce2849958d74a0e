package controllertest

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/testenv"
)

// TestEtcdVersion is the etcd the tools cache holds (hack/tools.sh).
const TestEtcdVersion = "v3.6.6"

// EtcdCluster is a real etcd cluster on loopback addresses with kao's own
// PKI: the etcd hosts of a Binary deployment, each member on its own
// address at the ports kao's roles use.
type EtcdCluster struct {
	// Hosts are the deployment's hosts; the first also runs the API server and controllers.
	Hosts []kaov1.Host
	// Bundle is the deployment's PKI, as kao stores it in <name>-pki.
	Bundle pki.Bundle
	// ClientTLS is etcd-healthcheck-client's, the identity kao snapshots with.
	ClientTLS *tls.Config
	// Bin holds etcd, etcdctl and etcdutl.
	Bin string
	// args and cmds are each member's command line and running process.
	args map[string][]string
	cmds map[string]*exec.Cmd
	dir  string
}

// StartEtcdCluster starts n TLS etcd members on 127.x.y.1..n, ports 2379 and
// 2380, and waits until they elect a leader.
func StartEtcdCluster(t *testing.T, n int) *EtcdCluster {
	RequireEnv(t) // its binaries come from the API server's assets
	t.Helper()
	bin, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	c := &EtcdCluster{Bin: bin, args: map[string][]string{}, cmds: map[string]*exec.Cmd{}, dir: t.TempDir()}
	base := freeLoopbackNet(t, n)
	for i := range n {
		c.Hosts = append(c.Hosts, kaov1.Host{
			Name: fmt.Sprintf("etcd-%d", i+1), Address: fmt.Sprintf("%s.%d", base, i+1),
			Roles: []kaov1.HostRole{kaov1.EtcdRole},
		})
	}
	c.Hosts[0].Roles = append(c.Hosts[0].Roles, kaov1.APIServerRole, kaov1.ControlPlaneRole)
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Hosts: c.Hosts,
		Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}}}}
	c.Bundle, _, _, err = pki.Ensure(nil, pipeline.PKIRequest(kd), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range c.Bundle {
		if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c.ClientTLS, err = pipeline.ClientTLS(c.Bundle, "etcd-ca.crt", "etcd-healthcheck-client"); err != nil {
		t.Fatal(err)
	}
	initial := []string{}
	for _, h := range c.Hosts {
		initial = append(initial, h.Name+"=https://"+h.Address+":2380")
	}
	for _, h := range c.Hosts {
		file := func(s string) string { return filepath.Join(c.dir, s) }
		c.args[h.Name] = []string{
			"--name=" + h.Name, "--data-dir=" + file("data-"+h.Name),
			"--listen-client-urls=https://" + h.Address + ":2379", "--advertise-client-urls=https://" + h.Address + ":2379",
			"--listen-peer-urls=https://" + h.Address + ":2380", "--initial-advertise-peer-urls=https://" + h.Address + ":2380",
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=kao-test",
			"--cert-file=" + file(pki.CertFile(pki.EtcdServer(h.Name))), "--key-file=" + file(pki.KeyFile(pki.EtcdServer(h.Name))),
			"--trusted-ca-file=" + file("etcd-ca.crt"), "--client-cert-auth",
			"--peer-cert-file=" + file(pki.CertFile(pki.EtcdPeer(h.Name))), "--peer-key-file=" + file(pki.KeyFile(pki.EtcdPeer(h.Name))),
			"--peer-trusted-ca-file=" + file("etcd-ca.crt"), "--peer-client-cert-auth",
			"--log-level=error", "--log-outputs=" + file(h.Name+".log"),
		}
		c.Start(t, h.Name)
	}
	t.Cleanup(func() {
		for name := range c.cmds {
			c.Stop(name)
		}
	})
	c.WaitHealthy(t)
	return c
}

// freeLoopbackNet picks a random 127.x.y network whose first n addresses
// have the etcd ports free.
func freeLoopbackNet(t *testing.T, n int) string {
	t.Helper()
	for range 50 {
		base := fmt.Sprintf("127.%d.%d", 100+rand.IntN(100), rand.IntN(256))
		free := true
		for i := 1; i <= n && free; i++ {
			for _, port := range []int{2379, 2380} {
				l, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("%s.%d", base, i), strconv.Itoa(port)))
				if err != nil {
					free = false
					break
				}
				_ = l.Close()
			}
		}
		if free {
			return base
		}
	}
	t.Fatal("no free loopback network for etcd")
	return ""
}

// Start starts (or restarts, on its data) one member.
func (c *EtcdCluster) Start(t *testing.T, name string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.Bin, "etcd"), c.args[name]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.cmds[name] = cmd
}

// Stop kills one member.
func (c *EtcdCluster) Stop(name string) {
	if cmd := c.cmds[name]; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		delete(c.cmds, name)
	}
}

// Members maps member names to client URLs.
func (c *EtcdCluster) Members() map[string]string {
	out := map[string]string{}
	for _, h := range c.Hosts {
		out[h.Name] = "https://" + h.Address + ":2379"
	}
	return out
}

// WaitHealthy waits until every member answers and there is a leader.
func (c *EtcdCluster) WaitHealthy(t *testing.T) probe.EtcdHealth {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		h := probe.Etcd{}.Etcd(context.Background(), c.Members(), c.ClientTLS, nil)
		if h.Healthy == len(c.Hosts) && h.Leader != "" {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster not healthy: %s %s", h.Summary(), h.Problems())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client connects to every member.
func (c *EtcdCluster) client(t *testing.T) *clientv3.Client {
	t.Helper()
	eps := []string{}
	for _, u := range c.Members() {
		eps = append(eps, u)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: c.ClientTLS, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// PutKeys writes n keys under prefix and returns etcd's revision after them.
func (c *EtcdCluster) PutKeys(t *testing.T, prefix string, n int) int64 {
	t.Helper()
	cli := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rev int64
	for i := range n {
		resp, err := cli.Put(ctx, fmt.Sprintf("%s%04d", prefix, i), fmt.Sprintf("value-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// BackupBundle makes an artifacts bundle holding only the etcdutl of the
// tools cache, the one binary a backup needs from it.
func BackupBundle(t *testing.T, withEtcdutl bool) string {
	t.Helper()
	dir := t.TempDir()
	manifest := fmt.Sprintf(`{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":%q}`, TestEtcdVersion)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "etcd", TestEtcdVersion, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if withEtcdutl {
		assets, err := testenv.AssetsDir()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(assets, "etcdutl"), filepath.Join(bin, "etcdutl")); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// NewBackup creates an EtcdBackup of a deployment with a Local destination
// unless dest is given.
func NewBackup(t *testing.T, ns, name, deployment, schedule string, retention int32, dest *kaov1.BackupDestination) *kaov1.EtcdBackup {
	t.Helper()
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.EtcdBackupSpec{DeploymentName: deployment, Schedule: schedule,
			Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if retention > 0 {
		eb.Spec.Retention = &retention
	}
	if dest != nil {
		eb.Spec.Destination = *dest
	}
	if err := K8s.Create(context.Background(), eb); err != nil {
		t.Fatal(err)
	}
	return eb
}
