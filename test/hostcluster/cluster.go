package hostcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/members"
)

// Options configure Start.
type Options struct {
	// Nodes is how many simulated nodes kwok manages. Zero means 3.
	Nodes int
	// StorageClass is the name of a StorageClass without a provisioner whose
	// claims bind at once to the cluster's volumes. Empty means "kao-local".
	StorageClass string
	// Volumes is how many PersistentVolumes of StorageClass Start makes,
	// each a directory of the test's, 10Gi. Zero means 3.
	Volumes int
}

// controllers are what a cluster with workloads and volumes needs of
// kube-controller-manager: Deployments through ReplicaSets to Pods,
// StatefulSets with their claims, claims bound to volumes, service
// accounts, and deletion.
var controllers = []string{
	"serviceaccount", "serviceaccount-token", "namespace", "garbagecollector", "root-ca-cert-publisher",
	"deployment", "replicaset", "statefulset", "endpointslice",
	"persistentvolume-binder", "pv-protection", "pvc-protection",
}

// Cluster is a running host cluster.
type Cluster struct {
	// Member is its API server: server URL, admin kubeconfig, files.
	*members.Member
	// Client is an admin client.
	Client kubernetes.Interface
	// Nodes are the simulated nodes' names.
	Nodes []string
	// StorageClass names the class whose claims bind to the volumes.
	StorageClass string
	// VolumeDir holds the PersistentVolumes' directories (hostPath).
	VolumeDir string
	// NodeAddresses are the nodes' InternalIP addresses, by node name: a
	// loopback address of this machine each (127.B.0.1 and up, in an
	// address block of the cluster's own), where a Kubelet serves the
	// node ports of its Services.
	NodeAddresses map[string]string
}

// nodeAnnotation marks the nodes kwok manages.
const nodeAnnotation = "kwok.x-k8s.io/node"

// startTimeout bounds each step of Start.
const startTimeout = 2 * time.Minute

// Start starts a host cluster and stops it in t.Cleanup. It skips t in
// -short mode and fails it when a binary is missing.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("host cluster: skipped in -short mode (it runs kube-apiserver, kube-controller-manager, etcd and kwok)")
	}
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.StorageClass == "" {
		opts.StorageClass = "kao-local"
	}
	if opts.Volumes == 0 {
		opts.Volumes = 3
	}
	kwok := testenv.ToolPath(t, "kwok", "kwok")
	m := members.Start(t, 1, members.Options{Controllers: controllers})[0]
	cfg, err := clientcmd.RESTConfigFromKubeConfig(m.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Member: m, Client: cs, StorageClass: opts.StorageClass, VolumeDir: filepath.Join(m.Dir, "volumes")}

	// The nodes' addresses: a block of loopback addresses of the cluster's
	// own, so that node ports of several clusters and kubelets never meet.
	block, release, err := addressBlock()
	if err != nil {
		t.Fatalf("host cluster: %v", err)
	}
	t.Cleanup(release)
	c.NodeAddresses = map[string]string{}

	kubeconfig := filepath.Join(m.Dir, "admin.kubeconfig")
	startKwok(t, kwok, kubeconfig, m.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for i := range opts.Nodes {
		name := "kwok-node-" + strconv.Itoa(i)
		addr := fmt.Sprintf("127.%d.0.%d", block, i+1)
		// kwok keeps the addresses a node is created with (its
		// node-initialize stage writes --node-ip only when there are none).
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{nodeAnnotation: "fake"},
				Labels:      map[string]string{"kubernetes.io/hostname": name, "type": "kwok"},
			},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: addr},
				{Type: corev1.NodeHostName, Address: name},
			}},
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("host cluster: creating node %s: %v", name, err)
		}
		c.Nodes = append(c.Nodes, name)
		c.NodeAddresses[name] = addr
	}
	if err := c.waitNodesReady(ctx); err != nil {
		t.Fatalf("host cluster: %v; the end of kwok's log:\n%s", err, tail(filepath.Join(m.Dir, "kwok.log"), 30))
	}
	c.makeStorage(ctx, t, opts.Volumes)
	c.startBinder(t)
	return c
}

// startKwok runs kwok for the nodes with nodeAnnotation, with its default
// stages: nodes become Ready, and their pods Running and Ready at once.
func startKwok(t testing.TB, bin, kubeconfig, dir string) {
	t.Helper()
	logPath := filepath.Join(dir, "kwok.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kubeconfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+nodeAnnotation+"=fake",
		"--cidr=10.244.0.0/16",
		"--node-ip=10.240.0.1",
		// Its kubelet-like server is not used; a free loopback port keeps it
		// out of the way.
		"--server-address=127.0.0.1:0",
	)
	// Its default stages only: no ~/.kwok/kwok.yaml of the machine's.
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.Stdout, cmd.Stderr = log, log
	proc, err := startGroup(cmd)
	if err != nil {
		_ = log.Close()
		t.Fatalf("host cluster: starting kwok: %v", err)
	}
	t.Cleanup(func() {
		proc.stop()
		_ = log.Close()
	})
}

// waitNodesReady waits until kwok reports every node Ready.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	for {
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range nodes.Items {
				for _, cond := range n.Status.Conditions {
					if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if ready == len(c.Nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d/%d nodes Ready after %s: %w", ready, len(c.Nodes), startTimeout, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// makeStorage makes a StorageClass without a provisioner that binds claims
// as soon as they are made (there is no scheduler to wait for), and n
// hostPath volumes of it: kube-controller-manager binds each claim to one.
func (c *Cluster) makeStorage(ctx context.Context, t testing.TB, n int) {
	t.Helper()
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: c.StorageClass},
		Provisioner:       "kubernetes.io/no-provisioner",
		VolumeBindingMode: &immediate,
	}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("host cluster: creating StorageClass %s: %v", c.StorageClass, err)
	}
	for i := range n {
		name := c.StorageClass + "-" + strconv.Itoa(i)
		dir := filepath.Join(c.VolumeDir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				StorageClassName:              c.StorageClass,
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
				},
			},
		}
		if _, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatalf("host cluster: creating PersistentVolume %s: %v", name, err)
		}
	}
}

// startBinder binds every pod without a node to the simulated nodes in
// turn: the cluster has no kube-scheduler (the tools build none), so
// affinity, tolerations and requests are not weighed. kwok then runs the
// pod's lifecycle on that node.
func (c *Cluster) startBinder(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	go func() {
		defer wg.Done()
		next := 0
		for {
			pods, err := c.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName="})
			if err == nil {
				for _, p := range pods.Items {
					if p.DeletionTimestamp != nil {
						continue
					}
					b := &corev1.Binding{
						ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
						Target:     corev1.ObjectReference{Kind: "Node", Name: c.Nodes[next%len(c.Nodes)]},
					}
					if err := c.Client.CoreV1().Pods(p.Namespace).Bind(ctx, b, metav1.CreateOptions{}); err == nil || apierrors.IsConflict(err) {
						next++
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
