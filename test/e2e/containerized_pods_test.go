package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/members"
	"github.com/kao-io/kao/test/node"
)

// Settings of the control plane on real pods.
const (
	// podsRegistry is spec.artifacts.imageRegistry: `make images` names the
	// images under it when they are loaded into the node's containerd, as
	// an air-gapped data centre's registry would serve them.
	podsRegistry  = "registry.kao.test"
	podsNamespace = "karmada-pods"
	// podsStorageClass holds static local volumes, as a data centre without
	// a dynamic provisioner has (localVolumes).
	podsStorageClass = "kao-local"
)

// TestContainerizedOnRealPods installs a Containerized control plane on
// Karmada v1.17.1 whose every component runs as a real container on a real
// node (test/node: a kubelet with containerd and runc, kube-proxy, CoreDNS),
// from the images `make images` builds out of the offline bundle, with
// nothing pulled, etcd on claims bound to static local volumes; and then,
// as a platform team would: upgrades it to v1.18.1; uses it with stock
// clients only (`karmadactl join` of a member outside kao, a Deployment
// propagated to it by a PropagationPolicy, an invalid policy refused by
// karmada-webhook, `karmadactl unjoin`); rotates every certificate; joins a
// member through kao with every addon enabled, then disabled; deletes it,
// keeping etcd's claims; creates a new deployment behind a LoadBalancer,
// which kao refuses to start on those claims until kao.io/take-over-from
// names the deleted one, and which then takes them over with Karmada's data;
// and deletes that one with its data.
func TestContainerizedOnRealPods(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	start := time.Now()
	ctx := context.Background()
	c := node.Start(t, node.Options{})
	t.Logf("STEP %-50s %6.1fs", "node up", time.Since(start).Seconds())
	phase := time.Now()
	importComponentImages(t, c)
	t.Logf("STEP %-50s %6.1fs", "images built and imported", time.Since(phase).Seconds())
	client := podsClient(t, c)

	ns := newNamespace(t)
	stateDir := startOperator(t, ns)
	hostKubeconfig := serviceAccountKubeconfig(t, client, flatKubeconfig(t, c))
	createSecret(t, ns, "host-cluster", map[string][]byte{"kubeconfig": hostKubeconfig})
	localVolumes(t, c, client, podsStorageClass, 3)
	kd := podsDeployment(ns, "pods", "v1.17.1")
	phase = time.Now()
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	t.Logf("STEP %-50s %6.1fs", "install run", time.Since(phase).Seconds())
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("STEP %-50s %6.1fs", "created to Ready", time.Since(phase).Seconds())

	// Every component is a container that containerd runs from the image
	// kao named, Ready by its own probes.
	checkRealPods(t, client, podImages("v1.17.1"), map[string]int{"karmada-etcd": 3})

	// The upgrades to v1.18.1, karmada-scheduler first and then the rest,
	// roll real Deployments onto the v1.18.1 images one after the other,
	// each gated by its new pods' probes. The host cluster is remote, so
	// the first upgrade's snapshot comes through port-forwards to etcd's
	// pods; the second goes without one, as kao.io/upgrade-without-backup
	// asks.
	phase = time.Now()
	ready = upgradeContainerized(t, client, ready, stateDir, "v1.18.1")
	t.Logf("STEP %-50s %6.1fs", "two upgrades to v1.18.1", time.Since(phase).Seconds())

	// An EtcdBackup of the same etcd, through the same port-forwards.
	phase = time.Now()
	if snap := localBackup(t, ready, "pods"); !strings.HasPrefix(snap.Member, "karmada-etcd-") {
		t.Errorf("the snapshot of a remote host cluster's etcd comes from member %q, not an etcd pod", snap.Member)
	}
	t.Logf("STEP %-50s %6.1fs", "EtcdBackup through port-forwards", time.Since(phase).Seconds())
	checkRealPods(t, client, podImages("v1.18.1"), map[string]int{"karmada-etcd": 3})
	if msg := conditionMessage(ready, kaov1.EtcdHealthyCondition); !strings.Contains(msg, "3/3 members") {
		t.Errorf("EtcdHealthy: %q", msg)
	}

	// karmada-apiserver behind a NodePort: the exported kubeconfig names the
	// node's address and the node port, which kube-proxy serves.
	svc, err := client.CoreV1().Services(podsNamespace).Get(ctx, "karmada-apiserver", metav1.GetOptions{})
	if err != nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("the karmada-apiserver Service: %v %+v", err, svc)
	}
	checkKubeconfigServer(t, ready, c.NodeIP()+":"+strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	kubectl := karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz through the exported kubeconfig: %s", out)
	}

	phase = time.Now()
	stockClientCheck(t, c, ready, kubectl)
	t.Logf("STEP %-50s %6.1fs", "karmadactl join, propagation, webhook, unjoin", time.Since(phase).Seconds())

	// A certificate rotation re-issues every leaf; the Secrets change, and
	// with them each pod template's hash: every pod is replaced, and
	// karmada-apiserver serves its new certificate at the node port.
	phase = time.Now()
	servedBefore := servedSerial(t, ready)
	podsBefore := podUIDs(t, client)
	prev := get(t, kd).Status.LastRun.ID
	changeDeployment(t, kd, func(kd *kaov1.KarmadaDeployment) {
		metav1.SetMetaDataAnnotation(&kd.ObjectMeta, kaov1.RotateCertificatesAnnotation, "pods-rotation")
	})
	rotated := waitForNextRun(t, kd, prev)
	if rotated.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the rotation's run failed: %+v", rotated.Status.LastRun)
	}
	ready = waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	if r := ready.Status.CertificateRenewal; r == nil || r.RotationRequest != "pods-rotation" {
		t.Errorf("status.certificateRenewal does not record the rotation: %+v", r)
	}
	if servedSerial(t, ready) == servedBefore {
		t.Error("karmada-apiserver serves the same certificate after the rotation")
	}
	for name, uids := range podUIDs(t, client) {
		for _, uid := range uids {
			if slices.Contains(podsBefore[name], uid) {
				t.Errorf("%s's pod %s was not replaced by the rotation", name, uid)
			}
		}
	}
	kubectl = karmadaKubectl(t, ready)
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz with the rotated kubeconfig: %s", out)
	}
	t.Logf("STEP %-50s %6.1fs", "certificate rotation, every pod replaced", time.Since(phase).Seconds())

	// A member joins through kao and every addon is enabled, then
	// disabled: the addons' pods run from their images and pass their
	// probes, karmada-scheduler reaches the member's estimator.
	phase = time.Now()
	containerizedAddons(t, addonTarget{
		client: client, namespace: podsNamespace, memberAddress: c.HostIP(),
		schedulerLogs: func() string { return podLogs(t, client, podsNamespace, "karmada-scheduler") },
		diagnose:      func() string { logPods(t, client, podsNamespace); return "(the pods are logged above)" },
	}, kd, kubectl)
	t.Logf("STEP %-50s %6.1fs", "addons enabled, then disabled", time.Since(phase).Seconds())

	checkNoSecretsLeaked(t, ns, get(t, kd), stateDir, hostKubeconfig)

	// Deletion removes every pod and object but etcd's claims, which keep
	// the data on their volumes; a deployment that takes them over finds
	// what Karmada stored; deleted with purgeDataOnDelete, it leaves
	// nothing.
	kubectl("create", "configmap", "kao-e2e-marker", "-n", "default", "--from-literal=written=before-delete")
	final := get(t, kd)
	claims := claimUIDs(t, client)
	if len(claims) != 3 {
		t.Fatalf("etcd has %d claims, want 3", len(claims))
	}
	phase = time.Now()
	deleteAndWait(t, final)
	t.Logf("STEP %-50s %6.1fs", "deletion", time.Since(phase).Seconds())
	checkNamespaceEmpty(t, c, client, final)
	if left := claimUIDs(t, client); !maps.Equal(left, claims) {
		t.Errorf("deletion without purgeDataOnDelete must keep etcd's claims %v; left %v", claims, left)
	}

	// A deployment created again in the namespace does not start on the
	// deleted one's etcd data by accident: it is refused, naming the claims'
	// owner and the annotation that takes them over, and runs nothing. With
	// kao.io/take-over-from naming the deleted deployment it takes the
	// claims over. It is exposed by a LoadBalancer this time: the node's
	// allocator gives the Service an address of its pool, which kube-proxy
	// serves.
	retaken := podsDeployment(ns, "pods-again", "v1.18.1")
	retaken.Spec.Etcd.Managed.PurgeDataOnDelete = true
	retaken.Spec.APIServer.ServiceType = kaov1.LoadBalancerService
	phase = time.Now()
	if err := k8s.Create(ctx, retaken); err != nil {
		t.Fatal(err)
	}
	refused := waitForCondition(t, retaken, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, kaov1.PrerequisitesMissingReason, 2*time.Minute)
	if msg := conditionMessage(refused, kaov1.PlaybookSucceededCondition); !strings.Contains(msg, "holds the etcd data of another KarmadaDeployment (uid "+string(final.UID)+")") ||
		!strings.Contains(msg, kaov1.TakeOverFromAnnotation) {
		t.Errorf("the refusal does not name the claims' owner and the way out: %q", msg)
	}
	if refused.Status.LastRun != nil {
		t.Errorf("a run started on another deployment's claims: %+v", refused.Status.LastRun)
	}
	t.Logf("STEP %-50s %6.1fs", "created over the kept claims: refused", time.Since(phase).Seconds())
	changeDeployment(t, retaken, func(kd *kaov1.KarmadaDeployment) {
		kd.Annotations[kaov1.TakeOverFromAnnotation] = string(final.UID)
	})
	phase = time.Now()
	if done := waitForRun(t, retaken, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install over etcd's claims failed: %+v", done.Status.LastRun)
	}
	reinstalled := waitForCondition(t, retaken, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("STEP %-50s %6.1fs", "taken over with the annotation, to Ready", time.Since(phase).Seconds())
	lb, err := client.CoreV1().Services(podsNamespace).Get(ctx, "karmada-apiserver", metav1.GetOptions{})
	if err != nil || len(lb.Status.LoadBalancer.Ingress) != 1 {
		t.Fatalf("the karmada-apiserver LoadBalancer: %v %+v", err, lb.Status)
	}
	lbIP := lb.Status.LoadBalancer.Ingress[0].IP
	if pool := netip.MustParsePrefix(c.LoadBalancerCIDR()); !pool.Contains(netip.MustParseAddr(lbIP)) {
		t.Errorf("the load balancer's address %s is not in the node's pool %s", lbIP, pool)
	}
	checkKubeconfigServer(t, reinstalled, lbIP+":5443")
	if out := karmadaKubectl(t, reinstalled)("get", "configmap", "kao-e2e-marker", "-n", "default", "-o", "jsonpath={.data.written}"); out != "before-delete" {
		t.Errorf("the deployment over the kept claims does not hold what Karmada stored before: %q", out)
	}
	if now := claimUIDs(t, client); !maps.Equal(now, claims) {
		t.Errorf("the re-created deployment uses claims %v, not etcd's old claims %v", now, claims)
	}
	deleteAndWait(t, get(t, retaken))
	checkNamespaceEmpty(t, c, client, reinstalled)
	if left := claimUIDs(t, client); len(left) != 0 {
		t.Errorf("deletion with purgeDataOnDelete left claims %v", left)
	}
	t.Logf("TestContainerizedOnRealPods took %s", time.Since(start).Round(time.Second))
}

// podsDeployment is a Containerized control plane on the real node: three
// etcd members on claims of podsStorageClass (localVolumes), karmada-apiserver
// behind a NodePort, the host cluster's kubeconfig in the Secret
// host-cluster.
func podsDeployment(ns, name, version string) *kaov1.KarmadaDeployment {
	return &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:      kaov1.ContainerizedMode,
			Version:   version,
			Artifacts: kaov1.ArtifactsSpec{ImageRegistry: podsRegistry},
			HostCluster: &kaov1.HostClusterSpec{
				KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: "host-cluster", Key: "kubeconfig"},
				Namespace:           podsNamespace,
			},
			APIServer: kaov1.APIServerSpec{ServiceType: kaov1.NodePortService},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{
				Replicas: ptr.To(int32(3)),
				Storage: kaov1.EtcdStorage{Type: kaov1.PVCStorage, Size: ptr.To(resource.MustParse("1Gi")),
					StorageClassName: podsStorageClass},
			}},
		},
	}
}

// localVolumes creates a StorageClass without a provisioner that binds
// when a pod is scheduled, and n local PersistentVolumes of 1Gi on the node,
// each a directory of the node's (removed with it): what an SRE sets up for
// etcd on the local disks of nodes without a storage system.
func localVolumes(t testing.TB, c *node.Cluster, client kubernetes.Interface, class string, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: class},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		dir := filepath.Join(c.Dir(), "volumes", fmt.Sprintf("%s-%d", class, i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		_, err := client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", class, i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{c.NodeName()}}},
				}}}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// claimUIDs maps the claims in podsNamespace to their UIDs.
func claimUIDs(t testing.TB, client kubernetes.Interface) map[string]string {
	t.Helper()
	list, err := client.CoreV1().PersistentVolumeClaims(podsNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pvc := range list.Items {
		out[pvc.Name] = string(pvc.UID)
	}
	return out
}

// podUIDs maps each workload of podsNamespace (app.kubernetes.io/name) to
// the UIDs of its pods.
func podUIDs(t testing.TB, client kubernetes.Interface) map[string][]string {
	t.Helper()
	list, err := client.CoreV1().Pods(podsNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			name := p.Labels["app.kubernetes.io/name"]
			out[name] = append(out[name], string(p.UID))
		}
	}
	return out
}

// checkNamespaceEmpty waits for kd's pods to go and checks that none of
// its objects but etcd's claims is left in podsNamespace.
func checkNamespaceEmpty(t *testing.T, c *node.Cluster, client kubernetes.Interface, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 2*time.Minute, "the control plane's pods to go", func() bool {
		pods, err := client.CoreV1().Pods(podsNamespace).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	for _, kind := range []string{"deployments", "statefulsets", "services", "secrets", "configmaps"} {
		out, err := c.Kubectl(ctx, "-n", podsNamespace, "get", kind, "-l", "kao.io/deployment-uid="+string(kd.UID), "-o", "name").Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("after deletion, %s of the deployment are left: %v %s", kind, err, out)
		}
	}
}

// servedSerial is the serial number of the certificate karmada-apiserver
// serves at the endpoint of kd's exported kubeconfig, verified against the
// CA that kubeconfig names.
func servedSerial(t testing.TB, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(writeKarmadaKubeconfig(t, kd))
	if err != nil {
		t.Fatal(err)
	}
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	u, err := url.Parse(cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cluster.CertificateAuthorityData) {
		t.Fatal("the exported kubeconfig names no CA")
	}
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: pool, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS to karmada-apiserver at %s: %v", u.Host, err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// podImages are the images of a Containerized control plane on Karmada
// version, by workload.
func podImages(version string) map[string]string {
	return map[string]string{
		"karmada-etcd":                 podsRegistry + "/etcd:3.6.6-0",
		"karmada-apiserver":            podsRegistry + "/kube-apiserver:v1.35.4",
		"kube-controller-manager":      podsRegistry + "/kube-controller-manager:v1.35.4",
		"karmada-aggregated-apiserver": podsRegistry + "/karmada/karmada-aggregated-apiserver:" + version,
		"karmada-controller-manager":   podsRegistry + "/karmada/karmada-controller-manager:" + version,
		"karmada-scheduler":            podsRegistry + "/karmada/karmada-scheduler:" + version,
		"karmada-webhook":              podsRegistry + "/karmada/karmada-webhook:" + version,
	}
}

// localBackup takes a one-shot EtcdBackup of kd onto the operator's state
// directory, waits for its snapshot, checks the file against the SHA-256 in
// status and returns the snapshot.
func localBackup(t *testing.T, kd *kaov1.KarmadaDeployment, name string) *kaov1.Snapshot {
	t.Helper()
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kd.Namespace},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if err := k8s.Create(context.Background(), eb); err != nil {
		t.Fatal(err)
	}
	snap := waitForBackup(t, eb).Status.LastSnapshot
	if snap.Revision == 0 {
		t.Errorf("snapshot %s holds revision 0: %+v", snap.Name, snap)
	}
	if sum, _, err := etcdsnapshot.FileSHA256(snap.Location); err != nil || sum != snap.SHA256 {
		t.Errorf("the snapshot %s: sha256 %s (%v), status says %s", snap.Location, sum, err, snap.SHA256)
	}
	return snap
}

// importComponentImages builds the control plane's images with `hack/image
// -components` (the layer cache is `make images`'s) and loads the archive
// into the node's containerd.
func importComponentImages(t testing.TB, c *node.Cluster) {
	t.Helper()
	if err := c.ImportImage(testenv.ComponentImages(t, podsRegistry)); err != nil {
		t.Fatal(err)
	}
}

// checkRealPods checks that each workload's pods (by app.kubernetes.io/name)
// run on the node from the image named, as many as want says (default one),
// Ready, each container started by containerd. Pods on their way out (an
// old ReplicaSet's, after a rollout) are not counted.
func checkRealPods(t *testing.T, client kubernetes.Interface, images map[string]string, want map[string]int) {
	t.Helper()
	for name, image := range images {
		pods, err := client.CoreV1().Pods(podsNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		n := want[name]
		if n == 0 {
			n = 1
		}
		live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
		if len(live) != n {
			t.Errorf("%s has %d pods, want %d", name, len(live), n)
		}
		for _, p := range live {
			if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 {
				t.Errorf("pod %s: phase %s", p.Name, p.Status.Phase)
				continue
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.Image != image || !cs.Ready || cs.State.Running == nil ||
				!strings.HasPrefix(cs.ContainerID, "containerd://") || !strings.HasPrefix(cs.ImageID, "sha256:") {
				t.Errorf("pod %s: container %+v, want %s running and Ready", p.Name, cs, image)
			}
		}
	}
}

// stockClientCheck uses the control plane with stock clients only:
// karmadactl joins a member that kao does not manage (its API server on the
// machine, which the pods reach through the node's route), a Deployment with
// a PropagationPolicy lands in it, karmada-webhook refuses an invalid
// policy, and karmadactl unjoins the member.
func stockClientCheck(t *testing.T, c *node.Cluster, kd *kaov1.KarmadaDeployment, kubectl func(...string) string) {
	t.Helper()
	ctx := context.Background()
	m := members.Start(t, 1, members.Options{Address: c.HostIP()})[0]
	dir := t.TempDir()
	memberKubeconfig := filepath.Join(dir, "member.kubeconfig")
	if err := os.WriteFile(memberKubeconfig, m.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	memberCfg, err := clientcmd.Load(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	karmadactl := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmadactl")
	karmadaKubeconfig := writeKarmadaKubeconfig(t, kd)
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(karmadactl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("karmadactl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("join", "outside", "--kubeconfig", karmadaKubeconfig, "--cluster-kubeconfig", memberKubeconfig, "--cluster-context", memberCfg.CurrentContext)
	waitFor(t, 2*time.Minute, "Cluster outside Ready", func() bool {
		out, err := karmadaKubectlErr(t, kd, "get", "cluster", "outside", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return err == nil && out == "True"
	})

	manifest := filepath.Join(dir, "propagate.yaml")
	if err := os.WriteFile(manifest, []byte(propagation("pods-apps", "outside")), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	waitFor(t, 2*time.Minute, "the Deployment propagated to the member", func() bool {
		out, err := testenv.Kubectl(ctx, filepath.Join(env.AssetsDir, "kubectl"), memberKubeconfig,
			"-n", "pods-apps", "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		return err == nil && out == "registry.dc1.example:5000/web:1"
	})

	invalid := filepath.Join(dir, "invalid.yaml")
	if err := os.WriteFile(invalid, []byte("apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {name: invalid, namespace: default}\n"+
		"spec:\n  resourceSelectors: [{apiVersion: v1, kind: ConfigMap, namespace: elsewhere}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := karmadaKubectlErr(t, kd, "create", "-f", invalid); err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("karmada-webhook did not refuse an invalid PropagationPolicy: %v: %s", err, out)
	}

	run("unjoin", "outside", "--kubeconfig", karmadaKubeconfig, "--cluster-kubeconfig", memberKubeconfig, "--cluster-context", memberCfg.CurrentContext)
	if out, err := karmadaKubectlErr(t, kd, "get", "cluster", "outside", "-o", "name"); err == nil {
		t.Errorf("Cluster outside is still there after karmadactl unjoin: %s", out)
	}
}

// flatKubeconfig is the node cluster's admin kubeconfig with its
// certificates inline: kao refuses kubeconfigs that name files.
func flatKubeconfig(t testing.TB, c *node.Cluster) []byte {
	t.Helper()
	data, err := c.FlatKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// podLogs returns the logs of the pods of workload name in ns.
func podLogs(t testing.TB, client kubernetes.Interface, ns, name string) string {
	ctx := context.Background()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
	if err != nil {
		t.Logf("listing pods of %s: %v", name, err)
		return ""
	}
	var out strings.Builder
	for _, p := range pods.Items {
		logs, err := client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Logf("log of %s: %v", p.Name, err)
		}
		out.Write(logs)
	}
	return out.String()
}

// podsClient is a client of the node's cluster that, should the test
// fail, logs the pods of podsNamespace and their last log lines.
func podsClient(t *testing.T, c *node.Cluster) kubernetes.Interface {
	t.Helper()
	client, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logPods(t, client, podsNamespace)
		}
	})
	return client
}

// logPods logs the pods of ns with their containers' states and the last
// lines of each container's log, for a failed test.
func logPods(t testing.TB, client kubernetes.Interface, ns string) {
	ctx := context.Background()
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		t.Logf("pod %s: %s %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		for _, cs := range p.Spec.Containers {
			logs, err := client.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, TailLines: ptr.To(int64(20))}).DoRaw(ctx)
			t.Logf("log of %s/%s (%v):\n%s", p.Name, cs.Name, err, logs)
		}
	}
}
