package controllers

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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
	"github.com/kao-io/kao/internal/testenv"
)

// testEtcdVersion is the etcd the tools cache holds (hack/tools.sh).
const testEtcdVersion = "v3.6.6"

// etcdCluster is a real etcd cluster on loopback addresses with kao's own
// PKI: the etcd hosts of a Binary deployment, each member on its own
// address at the ports kao's roles use.
type etcdCluster struct {
	// hosts are the deployment's hosts; the first also runs the API server and controllers.
	hosts []kaov1.Host
	// bundle is the deployment's PKI, as kao stores it in <name>-pki.
	bundle pki.Bundle
	// clientTLS is etcd-healthcheck-client's, the identity kao snapshots with.
	clientTLS *tls.Config
	// bin holds etcd, etcdctl and etcdutl.
	bin string
	// args and cmds are each member's command line and running process.
	args map[string][]string
	cmds map[string]*exec.Cmd
	dir  string
}

// startEtcdCluster starts n TLS etcd members on 127.x.y.1..n, ports 2379 and
// 2380, and waits until they elect a leader.
func startEtcdCluster(t *testing.T, n int) *etcdCluster {
	requireEnv(t) // its binaries come from the API server's assets
	t.Helper()
	bin, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	c := &etcdCluster{bin: bin, args: map[string][]string{}, cmds: map[string]*exec.Cmd{}, dir: t.TempDir()}
	base := freeLoopbackNet(t, n)
	for i := range n {
		c.hosts = append(c.hosts, kaov1.Host{
			Name: fmt.Sprintf("etcd-%d", i+1), Address: fmt.Sprintf("%s.%d", base, i+1),
			Roles: []kaov1.HostRole{kaov1.EtcdRole},
		})
	}
	c.hosts[0].Roles = append(c.hosts[0].Roles, kaov1.APIServerRole, kaov1.ControlPlaneRole)
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Hosts: c.hosts,
		Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}}}}
	c.bundle, _, _, err = pki.Ensure(nil, pkiRequest(kd), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range c.bundle {
		if err := os.WriteFile(filepath.Join(c.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if c.clientTLS, err = clientTLS(c.bundle, "etcd-ca.crt", "etcd-healthcheck-client"); err != nil {
		t.Fatal(err)
	}
	initial := []string{}
	for _, h := range c.hosts {
		initial = append(initial, h.Name+"=https://"+h.Address+":2380")
	}
	for _, h := range c.hosts {
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
		c.start(t, h.Name)
	}
	t.Cleanup(func() {
		for name := range c.cmds {
			c.stop(name)
		}
	})
	c.waitHealthy(t)
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

// start starts (or restarts, on its data) one member.
func (c *etcdCluster) start(t *testing.T, name string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, "etcd"), c.args[name]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.cmds[name] = cmd
}

// stop kills one member.
func (c *etcdCluster) stop(name string) {
	if cmd := c.cmds[name]; cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		delete(c.cmds, name)
	}
}

// members maps member names to client URLs.
func (c *etcdCluster) members() map[string]string {
	out := map[string]string{}
	for _, h := range c.hosts {
		out[h.Name] = "https://" + h.Address + ":2379"
	}
	return out
}

// waitHealthy waits until every member answers and there is a leader.
func (c *etcdCluster) waitHealthy(t *testing.T) probe.EtcdHealth {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		h := probe.Etcd{}.Etcd(context.Background(), c.members(), c.clientTLS)
		if h.Healthy == len(c.hosts) && h.Leader != "" {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster not healthy: %s %s", h.Summary(), h.Problems())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client connects to every member.
func (c *etcdCluster) client(t *testing.T) *clientv3.Client {
	t.Helper()
	eps := []string{}
	for _, u := range c.members() {
		eps = append(eps, u)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: c.clientTLS, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// putKeys writes n keys under prefix and returns etcd's revision after them.
func (c *etcdCluster) putKeys(t *testing.T, prefix string, n int) int64 {
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

// backupBundle makes an artifacts bundle holding only the etcdutl of the
// tools cache, the one binary a backup needs from it.
func backupBundle(t *testing.T, withEtcdutl bool) string {
	t.Helper()
	dir := t.TempDir()
	manifest := fmt.Sprintf(`{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":%q}`, testEtcdVersion)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "etcd", testEtcdVersion, "bin")
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

// tenantBundle makes a bundle like backupBundle's whose etcdutl is a
// program that writes marker and fails: what a tenant's bundle could hold.
func tenantBundle(t *testing.T, marker string) string {
	t.Helper()
	dir := backupBundle(t, false)
	script := "#!/bin/sh\ntouch " + marker + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "etcd", testEtcdVersion, "bin", "etcdutl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// binaryDeployment creates a Binary KarmadaDeployment on the cluster's
// hosts with its PKI Secret, as kao leaves them after an install;
// installed says whether status.observedGeneration shows a finished install.
func binaryDeployment(t *testing.T, ns, name string, c *etcdCluster, bundleDir string, installed bool) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode: kaov1.BinaryMode, Version: "v1.18.1", Hosts: c.hosts,
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "id"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "ssh", Key: "known_hosts"},
			},
			Artifacts: kaov1.ArtifactsSpec{LocalPath: bundleDir},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{Version: testEtcdVersion}},
		},
	}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pkiSecretName(kd), Namespace: ns}, Data: c.bundle}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if installed {
		markInstalled(t, kd)
	}
	return kd
}

// markInstalled records a finished install in the deployment's status.
func markInstalled(t *testing.T, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	cur := get(t, kd)
	cur.Status.ObservedGeneration = cur.Generation
	if err := k8s.Status().Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
}

// newBackup creates an EtcdBackup of a deployment with a Local destination
// unless dest is given.
func newBackup(t *testing.T, ns, name, deployment, schedule string, retention int32, dest *kaov1.BackupDestination) *kaov1.EtcdBackup {
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
	if err := k8s.Create(context.Background(), eb); err != nil {
		t.Fatal(err)
	}
	return eb
}

// getBackup reads the latest version of a backup.
func getBackup(t *testing.T, eb *kaov1.EtcdBackup) *kaov1.EtcdBackup {
	t.Helper()
	cur := &kaov1.EtcdBackup{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(eb), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// waitForBackup polls a backup until cond holds or the timeout passes.
func waitForBackup(t *testing.T, eb *kaov1.EtcdBackup, timeout time.Duration, what string, cond func(*kaov1.EtcdBackup) bool) *kaov1.EtcdBackup {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := getBackup(t, eb)
		if cond(cur) {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; status: %+v", timeout, what, cur.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// backupConditionIs matches a backup whose condition has the status and reason.
func backupConditionIs(t string, status metav1.ConditionStatus, reason string) func(*kaov1.EtcdBackup) bool {
	return func(eb *kaov1.EtcdBackup) bool {
		for _, c := range eb.Status.Conditions {
			if c.Type == t {
				return c.Status == status && c.Reason == reason && c.ObservedGeneration == eb.Generation
			}
		}
		return false
	}
}

// backupCondition returns one condition of a backup, or an empty one.
func backupCondition(eb *kaov1.EtcdBackup, t string) metav1.Condition {
	for _, c := range eb.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return metav1.Condition{}
}

// startBackupOperator starts a manager with only the EtcdBackup controller.
// The operator's own bundle (--artifacts-dir) gives etcdutl unless o names one.
func startBackupOperator(t *testing.T, ns string, o Options) {
	t.Helper()
	requireEnv(t)
	if o.ArtifactsDir == "" {
		o.ArtifactsDir = backupBundle(t, true)
	}
	env.StartManager(t, scheme, ns, func(mgr ctrl.Manager) error { return SetupEtcdBackupController(mgr, o) })
}

// backupEvents lists the reasons and notes of the Events about a backup.
func backupEvents(t *testing.T, eb *kaov1.EtcdBackup) []string {
	t.Helper()
	out := []string{}
	for _, e := range deploymentEvents(t, &kaov1.KarmadaDeployment{ObjectMeta: eb.ObjectMeta}) {
		if e.Regarding.Kind == "EtcdBackup" {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}
