// Package incluster tests kao as its users run it: the image `make image`
// builds, installed with `helm install` into a real single-node cluster
// (test/node: a real kubelet and containerd), installs a Binary control plane
// on SSH test hosts from inside its pod, survives its pod being deleted in the
// middle of the install, takes a backup onto its state volume and uninstalls.
package incluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/node"
)

const (
	image     = "kao-manager:e2e"
	namespace = "kao-system"
)

// step logs how long each step took, for the note and docs/benchmarks.md.
type timer struct {
	t     *testing.T
	start time.Time
}

func (s *timer) done(what string) {
	s.t.Logf("STEP %-55s %6.1fs", what, time.Since(s.start).Seconds())
	s.start = time.Now()
}

func TestOperatorInCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("in-cluster test: skipped in -short mode (builds the image, starts a real node and test hosts)")
	}
	steps := &timer{t: t, start: time.Now()}
	ctx := context.Background()

	archive := buildImage(t)
	steps.done("make image (layers cached)")

	cluster := node.Start(t, node.Options{})
	steps.done(fmt.Sprintf("real node up (startup %s)", cluster.StartupDuration().Round(time.Second)))
	if err := cluster.ImportImage(archive); err != nil {
		t.Fatal(err)
	}
	steps.done("image imported into containerd")

	dc := hosts.Start(t, 1)
	route(t, cluster, dc)
	steps.done("one SSH test host up, reachable from pods")

	k8s := newClient(t, cluster)
	stateDir := statePV(t, k8s)
	helmInstall(t, cluster)
	manager := waitForManager(t, k8s, "", 5*time.Minute)
	steps.done("helm install: the manager pod Ready")

	// A tenant's namespace with its SSH material and a one-host deployment.
	ns := "team-a"
	create(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	sshData, err := dc.SSHSecretData()
	if err != nil {
		t.Fatal(err)
	}
	create(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dc-ssh", Namespace: ns}, Data: sshData})
	h := dc.Hosts()[0]
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dc1", Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: "v1.18.1",
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "dc-ssh", Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "dc-ssh", Key: "known_hosts"},
			},
			APIServer: kaov1.APIServerSpec{Endpoint: h.Address + ":5443"},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			Hosts: []kaov1.Host{{Name: h.Name, Address: h.Address, Port: int32(h.Port), User: h.User,
				Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}}},
		},
	}
	create(t, k8s, kd)

	// The operator pod dies in the middle of the install.
	waitFor(t, 5*time.Minute, "the install's first tasks", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		return cur.Status.Progress != nil && cur.Status.Progress.TasksDone >= 5, nil
	})
	steps.done("install under way in the operator pod")
	if err := k8s.Delete(ctx, manager); err != nil {
		t.Fatal(err)
	}
	waitForManager(t, k8s, manager.Name, 5*time.Minute)
	steps.done("operator pod deleted mid-install; a new one Ready")

	waitFor(t, 10*time.Minute, "a successful install of the current generation", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		last := cur.Status.LastRun
		return last != nil && cur.Status.Progress == nil && last.Generation == cur.Generation && last.Result == kaov1.RunSucceeded, nil
	})
	steps.done("the new pod completed the install")
	waitFor(t, 3*time.Minute, "condition Ready", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur)
		return err == nil && meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition), err
	})
	if !interruptedRunRecorded(t, k8s, kd) {
		t.Error("no run of the deployment was recorded as cancelled or interrupted by the operator's restart")
	}
	steps.done("control plane Ready")

	// A backup onto the state volume.
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "dc1-now", Namespace: ns},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	create(t, k8s, eb)
	waitFor(t, 5*time.Minute, "the backup", func() (bool, error) {
		cur := &kaov1.EtcdBackup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(eb), cur); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.BackupSucceededCondition)
		if c != nil && c.Status == metav1.ConditionFalse {
			return false, fmt.Errorf("backup failed: %s", c.Message)
		}
		return c != nil && c.Status == metav1.ConditionTrue && cur.Status.LastSnapshot != nil, nil
	})
	snapshots := findFiles(t, stateDir, ".db")
	if len(snapshots) == 0 {
		t.Fatalf("no snapshot on the state volume %s", stateDir)
	}
	steps.done("backup written to the state volume")

	// Uninstall: the finalizer runs the uninstall playbook from the pod.
	if err := k8s.Delete(ctx, kd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "the uninstall", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if out, err := dc.Run(ctx, h.Name, "systemctl list-unit-files 'karmada*' 'etcd*' --no-legend | wc -l"); err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("units left on %s after the uninstall: %q %v", h.Name, out, err)
	}
	steps.done("uninstalled")
}

// buildImage runs hack/image with the default layer cache (shared with
// `make image`) into a temporary directory.
func buildImage(t *testing.T) string {
	t.Helper()
	if b, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "artifacts.sh")).CombinedOutput(); err != nil {
		t.Fatalf("hack/artifacts.sh: %v\n%s", err, b)
	}
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./hack/image", "-name", image, "-out", out)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	return filepath.Join(out, "kao-manager.oci.tar")
}

// route lets the node's pods reach the test hosts: the machine forwards
// between the node's network and the hosts' bridge, and traffic from the node
// to the hosts leaves with the bridge's address, the only one the hosts have
// a route back to.
func route(t *testing.T, c *node.Cluster, dc *hosts.Cluster) {
	t.Helper()
	prev, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	var rules [][]string
	for _, src := range []string{c.NodeIP() + "/32", c.PodCIDR()} {
		rules = append(rules, []string{"POSTROUTING", "-s", src, "-d", dc.Subnet(), "-j", "MASQUERADE",
			"-m", "comment", "--comment", "kao-incluster-" + c.NodeName()})
	}
	t.Cleanup(func() {
		for _, rule := range rules {
			if b, err := exec.Command("iptables", append([]string{"-t", "nat", "-D"}, rule...)...).CombinedOutput(); err != nil {
				t.Errorf("removing the NAT rule: %v: %s", err, b)
			}
		}
		_ = os.WriteFile("/proc/sys/net/ipv4/ip_forward", prev, 0o644)
	})
	for _, rule := range rules {
		if b, err := exec.Command("iptables", append([]string{"-t", "nat", "-A"}, rule...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables: %v: %s", err, b)
		}
	}
}

func newClient(t *testing.T, c *node.Cluster) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(c.Config(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return k8s
}

// statePV makes a hostPath volume for the manager's state claim and returns
// its directory on this machine. The claim of the chart binds to it: same
// size, no storage class. hostPath volumes get no fsGroup, so the directory
// belongs to the manager's user.
func statePV(t *testing.T, k8s client.Client) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "kao-state-e2e"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: state}},
		},
	}
	create(t, k8s, pv)
	return state
}

func helmInstall(t *testing.T, c *node.Cluster) {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "dir", "helm").Output()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(out)), "helm"), "install", "kao", filepath.Join(testenv.RepoRoot(), "charts", "kao"),
		"--kubeconfig", c.Kubeconfig(), "--namespace", namespace, "--create-namespace",
		"--set", "image.repository="+strings.Split(image, ":")[0], "--set", "image.tag="+strings.Split(image, ":")[1],
		"--set", "image.pullPolicy=Never", "--set", "state.size=20Gi",
		// Short runs: a restarted pod must not wait long for the lease of
		// the pod it replaces (the default lease is 15 s).
		"--set", "runTimeout=15m")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, b)
	}
}

// waitForManager waits for a Ready manager pod other than notName and
// returns it.
func waitForManager(t *testing.T, k8s client.Client, notName string, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	waitFor(t, timeout, "a Ready manager pod", func() (bool, error) {
		pods := &corev1.PodList{}
		if err := k8s.List(context.Background(), pods, client.InNamespace(namespace),
			client.MatchingLabels{"app.kubernetes.io/name": "kao", "app.kubernetes.io/component": "manager"}); err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Name == notName || p.DeletionTimestamp != nil {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = p
					return true, nil
				}
			}
		}
		return false, nil
	})
	return ready
}

// interruptedRunRecorded says whether an Event of the deployment tells that a
// run was cut short by the operator's restart: cancelled by the dying pod
// (SIGTERM, the usual case) or found interrupted by the new one (SIGKILL).
func interruptedRunRecorded(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment) bool {
	t.Helper()
	events := &corev1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(kd.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Name == kd.Name && (e.Reason == "PlaybookCancelled" || e.Reason == "PlaybookInterrupted") {
			return true
		}
	}
	return false
}

func create(t *testing.T, k8s client.Client, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every second until it is true, fails on its error, and
// fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, timeout)
		}
		time.Sleep(time.Second)
	}
}

func findFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && strings.HasSuffix(p, suffix) {
			out = append(out, p)
		}
		return nil
	})
	return out
}
