package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/members"
	"github.com/kao-io/kao/test/node"
)

// podsKeyPrefix is the key prefix of the external etcd's deployment.
const podsKeyPrefix = "/karmada-pods"

// TestContainerizedEtcdChoicesOnRealPods installs, on the real node of
// test/node through a remote host cluster kubeconfig, the etcd choices that
// TestContainerizedOnRealPods does not take, one after the other in the same
// host cluster namespace, each a small control plane behind a NodePort
// (managed etcd on an EmptyDir is test/incluster's Containerized install):
//
//   - managed etcd on a HostPath: its data lands in the node's directory,
//     and stays there when the deployment is deleted;
//   - an external etcd (a real etcd with TLS that the test runs on this
//     machine, which the pods reach at the machine's address on the node's
//     route): kao makes no etcd objects, both API servers keep Karmada's
//     keys under spec.etcd.external.keyPrefix, an EtcdBackup snapshots it,
//     and the keys stay when the deployment is deleted.
func TestContainerizedEtcdChoicesOnRealPods(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	start := time.Now()
	ctx := context.Background()
	c := node.Start(t, node.Options{})
	importComponentImages(t, c)
	client := podsClient(t, c)
	hostPathDir := "/var/lib/karmada-etcd/" + podsNamespace // the role's path: on this machine, which is the node
	// Only this test writes there; a run that was killed before its cleanup
	// (a CI timeout) leaves it behind, and the HostPath check below needs it
	// to start empty.
	if _, err := os.Stat(hostPathDir); err == nil {
		t.Logf("%s is left from an earlier run that did not clean up: removing it", hostPathDir)
		if err := os.RemoveAll(hostPathDir); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = os.RemoveAll(hostPathDir)
		_ = os.Remove(filepath.Dir(hostPathDir)) // only if nothing else is in it
	})
	ext := startExternalEtcd(t, testenv.ToolDir(t, "etcd"), c.HostIP())

	ns := newNamespace(t)
	startOperator(t, ns)
	createSecret(t, ns, "host-cluster", map[string][]byte{"kubeconfig": serviceAccountKubeconfig(t, client, flatKubeconfig(t, c))})
	createSecret(t, ns, "their-etcd-ca", map[string][]byte{"ca.crt": ext.ca})
	if err := k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "their-etcd-client", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: ext.clientCert, corev1.TLSPrivateKeyKey: ext.clientKey},
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("STEP %-50s %6.1fs", "node up, images imported, external etcd up", time.Since(start).Seconds())

	// install creates a one-replica control plane on etcd and waits for it
	// to be Ready on real pods, reached at the node port.
	install := func(name string, etcd kaov1.EtcdSpec) (*kaov1.KarmadaDeployment, func(...string) string) {
		t.Helper()
		phase := time.Now()
		kd := podsDeployment(ns, name, "v1.18.1")
		kd.Spec.Etcd = etcd
		if err := k8s.Create(ctx, kd); err != nil {
			t.Fatal(err)
		}
		if done := waitForRun(t, kd, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
			t.Fatalf("the install of %s failed: %+v", name, done.Status.LastRun)
		}
		ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
		t.Logf("STEP %-50s %6.1fs", name+": created to Ready", time.Since(phase).Seconds())
		images := podImages("v1.18.1")
		etcdPods := map[string]int{"karmada-etcd": 1}
		if etcd.External != nil {
			delete(images, "karmada-etcd")
			etcdPods = nil
		}
		checkRealPods(t, client, images, etcdPods)
		svc, err := client.CoreV1().Services(podsNamespace).Get(ctx, "karmada-apiserver", metav1.GetOptions{})
		if err != nil || svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
			t.Fatalf("the karmada-apiserver Service of %s: %v %+v", name, err, svc)
		}
		checkKubeconfigServer(t, ready, net.JoinHostPort(c.NodeIP(), strconv.Itoa(int(svc.Spec.Ports[0].NodePort))))
		kubectl := karmadaKubectl(t, ready)
		if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
			t.Errorf("/readyz of %s through the exported kubeconfig: %s", name, out)
		}
		return ready, kubectl
	}
	remove := func(kd *kaov1.KarmadaDeployment) {
		t.Helper()
		phase := time.Now()
		deleteAndWait(t, kd)
		checkNamespaceEmpty(t, c, client, kd)
		t.Logf("STEP %-50s %6.1fs", kd.Name+": deleted", time.Since(phase).Seconds())
	}

	ready, kubectl := install("hostpath", kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
		Replicas: ptr.To(int32(1)), Storage: kaov1.EtcdStorage{Type: kaov1.HostPathStorage},
	}})
	if v := etcdDataVolume(t, client); v.HostPath == nil || v.HostPath.Path != hostPathDir {
		t.Errorf("etcd's data volume is %+v, want the hostPath %s", v, hostPathDir)
	}
	db, _ := filepath.Glob(filepath.Join(hostPathDir, "*", "member", "snap", "db"))
	if len(db) != 1 {
		t.Errorf("etcd keeps no data in the node's %s: %v", hostPathDir, db)
	}
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=on-hostpath")
	remove(ready)
	for _, f := range db {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("etcd's data left the node's directory with the deletion: %v", err)
		}
	}

	ready, kubectl = install("external", kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{
		Endpoints:            []string{ext.endpoint},
		CASecretRef:          kaov1.SecretKeyReference{Name: "their-etcd-ca", Key: "ca.crt"},
		ClientCertSecretName: "their-etcd-client",
		KeyPrefix:            podsKeyPrefix,
	}})
	if msg := conditionMessage(ready, kaov1.EtcdHealthyCondition); !strings.HasPrefix(msg, "1/1 members healthy") {
		t.Errorf("EtcdHealthy of the external etcd: %q", msg)
	}
	if ready.Status.Etcd == nil || len(ready.Status.Etcd.Members) != 1 || ready.Status.Etcd.Members[0].ClientURL != ext.endpoint {
		t.Errorf("status.etcd does not list the external etcd at %s: %+v", ext.endpoint, ready.Status.Etcd)
	}
	if sets, err := client.AppsV1().StatefulSets(podsNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(sets.Items) != 0 {
		t.Errorf("kao made StatefulSets for an external etcd: %v %d", err, len(sets.Items))
	}
	checkExternalEtcdFlags(t, client, podsNamespace, ext, podsKeyPrefix)
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=external")
	keys := ext.keys(t, "/")
	if !slices.Contains(keys, podsKeyPrefix+"/configmaps/default/kao-e2e-marker") {
		t.Errorf("the external etcd has no key %s/configmaps/default/kao-e2e-marker", podsKeyPrefix)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, podsKeyPrefix+"/") {
			t.Errorf("the external etcd has key %s outside the prefix %s", k, podsKeyPrefix)
		}
	}
	// A backup of the external etcd: kao reaches it where its API servers
	// do, with the client certificate of spec.etcd.external.
	if snap := localBackup(t, ready, "external"); snap.Member != strings.TrimPrefix(ext.endpoint, "https://") {
		t.Errorf("the snapshot of the external etcd comes from member %q", snap.Member)
	}
	remove(ready)
	if left := ext.keys(t, podsKeyPrefix+"/configmaps/default/"); !slices.Contains(left, podsKeyPrefix+"/configmaps/default/kao-e2e-marker") {
		t.Errorf("Karmada's data left the external etcd with the deletion: %v", left)
	}
	t.Logf("TestContainerizedEtcdChoicesOnRealPods took %s", time.Since(start).Round(time.Second))
}

// etcdDataVolume is the data volume of the etcd StatefulSet in
// podsNamespace, which must ask for no claims.
func etcdDataVolume(t testing.TB, client kubernetes.Interface) corev1.Volume {
	t.Helper()
	ctx := context.Background()
	sts, err := client.AppsV1().StatefulSets(podsNamespace).Get(ctx, "karmada-etcd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("the etcd StatefulSet asks for claims: %+v", sts.Spec.VolumeClaimTemplates)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			return v
		}
	}
	t.Fatal("the etcd StatefulSet has no data volume")
	return corev1.Volume{}
}

// checkExternalEtcdFlags checks that both API servers of the external
// etcd's deployment in host cluster namespace ns name its endpoint and the
// key prefix, and read the user's CA and client certificate from the files
// their Secret mounts.
func checkExternalEtcdFlags(t testing.TB, kc kubernetes.Interface, ns string, ext *externalEtcd, prefix string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range []string{"karmada-apiserver", "karmada-aggregated-apiserver"} {
		d, err := kc.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ctr := d.Spec.Template.Spec.Containers[0]
		flags := map[string]string{}
		for _, a := range ctr.Command {
			if k, v, ok := strings.Cut(a, "="); ok {
				flags[k] = v
			}
		}
		if flags["--etcd-servers"] != ext.endpoint || flags["--etcd-prefix"] != prefix {
			t.Errorf("%s runs with --etcd-servers=%s --etcd-prefix=%s, want %s and %s",
				name, flags["--etcd-servers"], flags["--etcd-prefix"], ext.endpoint, prefix)
		}
		files := map[string][]byte{
			flags["--etcd-cafile"]: ext.ca, flags["--etcd-certfile"]: ext.clientCert, flags["--etcd-keyfile"]: ext.clientKey,
		}
		for path, want := range files {
			got, ok := mountedFile(t, kc, d, path)
			if !ok {
				t.Errorf("%s reads %q, which no Secret of its pod holds", name, path)
				continue
			}
			if string(got) != string(want) {
				t.Errorf("%s's %s is not the external etcd's file from spec.etcd.external", name, path)
			}
		}
	}
}

// mountedFile finds the Secret key a Deployment's container sees at path.
func mountedFile(t testing.TB, kc kubernetes.Interface, d *appsv1.Deployment, path string) ([]byte, bool) {
	t.Helper()
	spec := d.Spec.Template.Spec
	for _, m := range spec.Containers[0].VolumeMounts {
		key, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, err := kc.CoreV1().Secrets(d.Namespace).Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data, ok := s.Data[key]
			return data, ok
		}
	}
	return nil, false
}

// externalEtcd is an etcd with TLS that kao does not manage.
type externalEtcd struct {
	// endpoint is its client URL.
	endpoint string
	// ca, clientCert and clientKey are the PEM files a client needs.
	ca, clientCert, clientKey []byte
	// dir holds those files, its data and its log.
	dir     string
	etcdctl string
}

// startExternalEtcd starts etcd from the tools cache with certificates of
// its own (from kao's PKI package, as any CA would issue them) on a free
// port of address (an address of this machine), and stops it in t.Cleanup.
func startExternalEtcd(t testing.TB, etcdDir, address string) *externalEtcd {
	t.Helper()
	b, _, _, err := pki.Ensure(nil, pki.Request{EtcdHosts: []pki.Host{{Name: "external", Address: address}}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &externalEtcd{
		ca: b[pki.CertFile(pki.EtcdCA)], clientCert: b[pki.CertFile(pki.EtcdHealthcheckClient)], clientKey: b[pki.KeyFile(pki.EtcdHealthcheckClient)],
		dir: dir, etcdctl: filepath.Join(etcdDir, "etcdctl"),
	}
	files := map[string][]byte{
		"ca.crt": e.ca, "client.crt": e.clientCert, "client.key": e.clientKey,
		"server.crt": b[pki.CertFile(pki.EtcdServer("external"))], "server.key": b[pki.KeyFile(pki.EtcdServer("external"))],
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	client := "https://" + net.JoinHostPort(address, strconv.Itoa(members.FreePort(t, address)))
	peer := "http://" + net.JoinHostPort(address, strconv.Itoa(members.FreePort(t, address)))
	e.endpoint = client
	log, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(etcdDir, "etcd"), "--name=external", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=external="+peer,
		"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
		"--trusted-ca-file="+filepath.Join(dir, "ca.crt"), "--client-cert-auth")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
	})
	waitFor(t, time.Minute, "the external etcd to answer", func() bool {
		return e.etcdctlErr("endpoint", "health") == nil
	})
	return e
}

// keys lists the etcd's keys under prefix.
func (e *externalEtcd) keys(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := e.etcdctlOut("get", prefix, "--prefix", "--keys-only")
	if err != nil {
		t.Fatalf("listing the external etcd's keys: %v: %s", err, out)
	}
	var keys []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keys = append(keys, l)
		}
	}
	return keys
}

func (e *externalEtcd) etcdctlErr(args ...string) error {
	_, err := e.etcdctlOut(args...)
	return err
}

func (e *externalEtcd) etcdctlOut(args ...string) (string, error) {
	cmd := exec.Command(e.etcdctl, append([]string{"--endpoints=" + e.endpoint, "--cacert=" + filepath.Join(e.dir, "ca.crt"),
		"--cert=" + filepath.Join(e.dir, "client.crt"), "--key=" + filepath.Join(e.dir, "client.key"), "--command-timeout=5s"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
