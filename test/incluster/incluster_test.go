// Package incluster tests kao as its users run it: the image `make image`
// builds, installed with `helm install` into a real single-node cluster
// (test/node: a real kubelet and containerd), installs a Binary control plane
// on SSH test hosts from inside its pod, survives its pod being deleted in the
// middle of the install, joins a Push member and a Pull member whose
// karmada-agent is a real pod, takes a backup onto its state volume,
// installs, backs up and deletes a Containerized control plane in its own
// cluster on real pods, and uninstalls.
package incluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
	"github.com/kao-io/kao/test/node"
)

const (
	image     = "kao-manager:e2e"
	namespace = "kao-system"
	// agentRegistry is the deployment's spec.artifacts.imageRegistry: kao
	// names the agent's image <registry>/karmada/karmada-agent:<version>.
	agentRegistry = "kao.test"
	agentImage    = agentRegistry + "/karmada/karmada-agent:v1.18.1"
	// inClusterNamespace holds the Containerized control plane that the
	// operator installs into its own cluster.
	inClusterNamespace = "karmada-incluster"
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
	testenv.Lane(t)
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
	stateDir := statePV(t, k8s, "kao-state-helm")
	helmInstall(t, cluster, "hostClusterRBAC=true", "security.allowedInClusterNamespaces[0]="+inClusterNamespace)
	manager := waitForManager(t, k8s, "")
	steps.done("helm install: the manager pod Ready")

	// A tenant's namespace with its SSH material and a one-host deployment.
	ns := "team-a"
	tenant(t, k8s, ns, dc)
	h := dc.Hosts()[0]
	kd := oneHostDeployment(ns, "dc1", "dc-ssh", h)
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
	waitForManager(t, k8s, manager.Name)
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

	// Members, joined from the pod: a Push member (an API server on the
	// hosts' gateway, which Karmada's controllers on the host reach) and a
	// Pull member, the real node's own cluster, whose karmada-agent kao
	// creates as a Deployment there: a real pod from an image in the node's
	// containerd, reaching karmada-apiserver on the host.
	push := members.Start(t, 1, members.Options{Address: dc.Gateway()})[0]
	importComponentImages(t, cluster)
	pull, err := cluster.FlatKubeconfig() // kao refuses kubeconfigs that name files
	if err != nil {
		t.Fatal(err)
	}
	create(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "members", Namespace: ns},
		Data: map[string][]byte{"push": push.Kubeconfig, "pull": pull}})
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return err
		}
		cur.Spec.Artifacts.ImageRegistry = agentRegistry
		cur.Spec.Members = []kaov1.MemberSpec{
			{Name: "push", SyncMode: kaov1.PushSyncMode, KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "members", Key: "push"}},
			{Name: "pull", SyncMode: kaov1.PullSyncMode, KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "members", Key: "pull"}},
		}
		return k8s.Update(ctx, cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A run joins them: on CI's 2-core machine, loaded, the install before
	// it took 7m28s and the join ran past 5 minutes.
	waitFor(t, 10*time.Minute, "both members joined and Ready", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		if last := cur.Status.LastRun; last != nil && last.Generation == cur.Generation && last.Result == kaov1.RunFailed {
			return false, fmt.Errorf("the run joining the members failed: %s", last.Message)
		}
		ready := 0
		for _, m := range cur.Status.Members {
			if m.Joined && m.Ready {
				ready++
			}
		}
		return ready == 2, nil
	})
	agents := &corev1.PodList{}
	if err := k8s.List(ctx, agents, client.InNamespace("karmada-system")); err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, p := range agents.Items {
		if p.Status.Phase == corev1.PodRunning && len(p.Spec.Containers) > 0 && p.Spec.Containers[0].Image == agentImage {
			running++
		}
	}
	if running == 0 {
		t.Errorf("no karmada-agent pod of %s runs on the node: %d pods in karmada-system", agentImage, len(agents.Items))
	}
	steps.done("a Push member and a Pull member (its agent a real pod) joined and Ready")

	// A backup onto the state volume.
	eb := backUp(t, k8s, kd, "dc1-now")
	snapshots := findFiles(t, stateDir, ".db")
	if len(snapshots) == 0 {
		t.Fatalf("no snapshot on the state volume %s", stateDir)
	}
	steps.done("backup written to the state volume")

	containerizedInCluster(t, k8s, ns)
	steps.done("a Containerized control plane in the operator's cluster: Ready, backed up, deleted")

	// Prometheus' view, read from the manager pod's metrics port through
	// the chart's Service, as a scrape through the API server's proxy.
	scrapeManager(t, cluster, kd, eb)
	steps.done("metrics read from the pod")

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

	// The same image from config/default instead of the chart: helm
	// uninstall keeps the CRDs and the state claim, kubectl apply -k puts the
	// manager back, and it acts on a new object at once.
	helm(t, cluster, "uninstall", "kao", "--namespace", namespace, "--wait")
	statePV(t, k8s, "kao-state-kustomize")
	applyKustomize(t, cluster)
	waitForManager(t, k8s, "")
	probe := oneHostDeployment(ns, "dc2", "no-such-secret", h)
	create(t, k8s, probe)
	waitFor(t, 2*time.Minute, "the kustomize-installed manager to report the missing Secret", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(probe), cur); err != nil {
			return false, err
		}
		for _, c := range cur.Status.Conditions {
			if c.Reason == kaov1.PrerequisitesMissingReason && strings.Contains(c.Message, "no-such-secret") {
				return true, nil
			}
		}
		return false, nil
	})
	steps.done("kubectl apply -k config/default: the manager back, acting on a new object")
}

// backUp takes a one-shot backup of kd onto the operator's state volume and
// waits for its snapshot.
func backUp(t *testing.T, k8s client.Client, kd *kaov1.KarmadaDeployment, name string) *kaov1.EtcdBackup {
	t.Helper()
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kd.Namespace},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	create(t, k8s, eb)
	waitFor(t, 5*time.Minute, "backup "+name, func() (bool, error) {
		cur := &kaov1.EtcdBackup{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(eb), cur); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.BackupSucceededCondition)
		if c != nil && c.Status == metav1.ConditionFalse {
			return false, fmt.Errorf("backup %s failed: %s", name, c.Message)
		}
		return c != nil && c.Status == metav1.ConditionTrue && cur.Status.LastSnapshot != nil, nil
	})
	return eb
}

// containerizedInCluster has the operator pod install a Containerized
// control plane into its own cluster (spec.hostCluster.inCluster, in
// inClusterNamespace, which the chart's values allow): every component a
// real container on the node from the images of importComponentImages,
// etcd on an EmptyDir, karmada-apiserver behind a ClusterIP Service that
// the operator pod reaches by its cluster DNS name, as it reaches etcd's
// pods by theirs for a backup. Then it deletes it.
func containerizedInCluster(t *testing.T, k8s client.Client, ns string) {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:        kaov1.ContainerizedMode,
			Version:     "v1.18.1",
			Artifacts:   kaov1.ArtifactsSpec{ImageRegistry: agentRegistry},
			HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: inClusterNamespace},
			APIServer:   kaov1.APIServerSpec{ServiceType: kaov1.ClusterIPService},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
				Replicas: ptr.To(int32(1)), Storage: kaov1.EtcdStorage{Type: kaov1.EmptyDirStorage},
			}},
		},
	}
	create(t, k8s, kd)
	var ready *kaov1.KarmadaDeployment
	waitFor(t, 12*time.Minute, "the Containerized control plane to be Ready", func() (bool, error) {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return false, err
		}
		if last := cur.Status.LastRun; last != nil && last.Result == kaov1.RunFailed {
			return false, fmt.Errorf("the Containerized install failed: %s (failed tasks %+v)", last.Message, last.FailedTasks)
		}
		ready = cur
		return meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition), nil
	})
	if ep := ready.Status.Endpoint; !strings.Contains(ep, "karmada-apiserver."+inClusterNamespace+".svc") {
		t.Errorf("status.endpoint %q is not karmada-apiserver's cluster DNS name", ep)
	}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(inClusterNamespace)); err != nil {
		t.Fatal(err)
	}
	images := map[string]bool{}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready && strings.HasPrefix(cs.ContainerID, "containerd://") {
				images[cs.Image] = true
			}
		}
	}
	for _, want := range []string{"etcd:3.6.6-0", "kube-apiserver:v1.35.4", "kube-controller-manager:v1.35.4",
		"karmada/karmada-aggregated-apiserver:v1.18.1", "karmada/karmada-controller-manager:v1.18.1",
		"karmada/karmada-scheduler:v1.18.1", "karmada/karmada-webhook:v1.18.1"} {
		if !images[agentRegistry+"/"+want] {
			t.Errorf("no Ready container of %s/%s runs in %s: %v", agentRegistry, want, inClusterNamespace, images)
		}
	}
	// etcd keeps its data in the pod's emptyDir, asking for no claim.
	sts := &appsv1.StatefulSet{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: inClusterNamespace, Name: "karmada-etcd"}, sts); err != nil {
		t.Fatal(err)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("the etcd StatefulSet of an EmptyDir etcd asks for claims: %+v", sts.Spec.VolumeClaimTemplates)
	}
	if i := slices.IndexFunc(sts.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" }); i < 0 {
		t.Errorf("the etcd StatefulSet has no data volume: %+v", sts.Spec.Template.Spec.Volumes)
	} else if v := sts.Spec.Template.Spec.Volumes[i]; v.EmptyDir == nil {
		t.Errorf("etcd's data volume is %+v, want an emptyDir", v)
	}
	backUp(t, k8s, ready, "pods-now")

	if err := k8s.Delete(ctx, kd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Minute, "the Containerized control plane's deletion", func() (bool, error) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		if !apierrors.IsNotFound(err) {
			return false, client.IgnoreNotFound(err)
		}
		left := &corev1.PodList{}
		err = k8s.List(ctx, left, client.InNamespace(inClusterNamespace))
		return err == nil && len(left.Items) == 0, err
	})
}

// tenant makes a tenant's namespace with the Secret dc-ssh: the SSH key and
// known_hosts of the test hosts dc.
func tenant(t testing.TB, k8s client.Client, ns string, dc *hosts.Cluster) {
	t.Helper()
	create(t, k8s, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	sshData, err := dc.SSHSecretData()
	if err != nil {
		t.Fatal(err)
	}
	create(t, k8s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "dc-ssh", Namespace: ns}, Data: sshData})
}

// oneHostDeployment is a Binary control plane on one test host whose SSH key
// and known_hosts are in the Secret sshSecret.
func oneHostDeployment(ns, name, sshSecret string, h hosts.Host) *kaov1.KarmadaDeployment {
	return &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: "v1.18.1",
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "known_hosts"},
			},
			APIServer: kaov1.APIServerSpec{Endpoint: h.Address + ":5443"},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			Hosts: []kaov1.Host{{Name: h.Name, Address: h.Address, Port: int32(h.Port), User: h.User,
				Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}}},
		},
	}
}

// importComponentImages builds the images of Karmada's components with
// `make images`' program under agentRegistry and imports them into the
// node's containerd: the Pull member's karmada-agent and the Containerized
// control plane run from them.
func importComponentImages(t *testing.T, c *node.Cluster) {
	t.Helper()
	if err := c.ImportImage(testenv.ComponentImages(t, agentRegistry)); err != nil {
		t.Fatal(err)
	}
}

// buildImage runs hack/image with the default layer cache (shared with
// `make image`) into a temporary directory.
func buildImage(t testing.TB) string {
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
func route(t testing.TB, c *node.Cluster, dc *hosts.Cluster) {
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

func newClient(t testing.TB, c *node.Cluster) client.Client {
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
func statePV(t testing.TB, k8s client.Client, name string) string {
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
		ObjectMeta: metav1.ObjectMeta{Name: name},
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

// helmInstall installs the chart with the test's image, and the values of
// extra (--set pairs).
func helmInstall(t testing.TB, c *node.Cluster, extra ...string) {
	t.Helper()
	args := []string{"install", "kao", filepath.Join(testenv.RepoRoot(), "charts", "kao"),
		"--namespace", namespace, "--create-namespace",
		"--set", "image.repository=" + strings.Split(image, ":")[0], "--set", "image.tag=" + strings.Split(image, ":")[1],
		"--set", "image.pullPolicy=Never", "--set", "state.size=20Gi", "--set", "runTimeout=15m"}
	for _, v := range extra {
		args = append(args, "--set", v)
	}
	helm(t, c, args...)
}

// helm runs the helm of make tools against the node with a home of its own.
func helm(t testing.TB, c *node.Cluster, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "dir", "helm").Output()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(strings.TrimSpace(string(out)), "helm"), append(args, "--kubeconfig", c.Kubeconfig())...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v\n%s", args[0], err, b)
	}
}

// applyKustomize applies config/default with the test's image, as a user
// would after `kustomize edit set image`.
func applyKustomize(t *testing.T, c *node.Cluster) {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes a relative path only.
	base, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), "config", "default"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf("resources:\n  - %s\nimages:\n  - name: kao-manager\n    newTag: %s\n", base, strings.Split(image, ":")[1])
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(assets, "kubectl")
	var stderr strings.Builder
	render := exec.Command(kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", dir)
	render.Stderr = &stderr
	rendered, err := render.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v: %s", err, stderr.String())
	}
	apply := exec.Command(kubectl, "--kubeconfig", c.Kubeconfig(), "apply", "--server-side", "--force-conflicts", "-f", "-")
	apply.Stdin = strings.NewReader(string(rendered))
	if b, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, b)
	}
}

// waitForManager waits, at most five minutes, for a Ready manager pod other
// than notName and returns it.
func waitForManager(t testing.TB, k8s client.Client, notName string) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	waitFor(t, 5*time.Minute, "a Ready manager pod", func() (bool, error) {
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

// interruptedRunRecorded says whether the run the operator's restart cut
// short was recorded: found interrupted by the new pod (a PlaybookInterrupted
// Event), or cancelled by the dying pod, which writes the run's log and then
// its status (Events are best effort: one sent as a process exits can be
// lost). A cancelled run leaves its own run log, so the deployment then has
// two: the cancelled one and the one that succeeded.
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
	cur := &kaov1.KarmadaDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kd), cur); err != nil {
		t.Fatal(err)
	}
	logs := &corev1.ConfigMapList{}
	if err := k8s.List(context.Background(), logs, client.InNamespace(kd.Namespace),
		client.MatchingLabels{kaov1.DeploymentUIDLabel: string(cur.UID)}); err != nil {
		t.Fatal(err)
	}
	return len(logs.Items) >= 2
}

func create(t testing.TB, k8s client.Client, obj client.Object) {
	t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every second until it is true, fails on its error, and
// fails the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
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

// scrapeManager reads the manager's /metrics through its Service until it
// shows the install, the members, etcd and the backup that the test saw
// in status.
func scrapeManager(t *testing.T, c *node.Cluster, kd *kaov1.KarmadaDeployment, eb *kaov1.EtcdBackup) {
	t.Helper()
	dep := map[string]string{"namespace": kd.Namespace, "deployment": kd.Name}
	var last testenv.Samples
	waitFor(t, 2*time.Minute, "the metrics of the install, the members and the backup", func() (bool, error) {
		out, err := c.Kubectl(context.Background(), "get", "--raw",
			"/api/v1/namespaces/"+namespace+"/services/kao-manager-metrics:metrics/proxy/metrics").Output()
		if err != nil {
			return false, nil // the proxy may not reach a pod that just started
		}
		if last, err = testenv.ParseMetrics(bytes.NewReader(out)); err != nil {
			return false, err
		}
		return last.Sum(metrics.RunsFinished, testenv.Labels(dep, "playbook", "install.yml", "result", "Succeeded")) >= 1 &&
			last.Sum(metrics.EtcdHealthy, dep) == 1 &&
			last.Sum(metrics.MembersReady, dep) == 2 &&
			last.Sum(metrics.BackupSnapshots, map[string]string{"namespace": eb.Namespace, "backup": eb.Name, "result": "Succeeded"}) == 1 &&
			last.Sum(metrics.BackupLastSize, map[string]string{"namespace": eb.Namespace, "backup": eb.Name}) > 0 &&
			len(last.Match(metrics.CertExpiry, dep)) > 10, nil
	})
	t.Logf("the manager exports %d series of kao's own", strings.Count(last.Dump("kao_"), "\n"))
}
