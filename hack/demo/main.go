// Command demo installs a Karmada control plane with kao on three local test
// hosts, as an SRE would on bare metal, and shows the run live:
//
//	sudo make demo
//
// It boots three systemd-nspawn hosts reachable over SSH (host keys pinned),
// starts a local management API server (kube-apiserver and etcd from
// `make tools`), runs the operator against it, applies a Binary
// KarmadaDeployment and prints progress until the run ends. The hosts stay up
// afterwards; `go run ./hack/testhosts -name kao-demo down` removes them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

const (
	namespace = "kao-demo"
	name      = "dc1"
)

func main() {
	keep := flag.Bool("keep", false, "keep the management API server and the operator running until interrupted")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*keep, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo failed: %v\n", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func run(keep bool, timeout time.Duration) error {
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if why := hosts.Unsupported(); why != "" {
		return errors.New(why)
	}
	root := testenv.RepoRoot()
	out := filepath.Join(root, "_out", "demo")
	if err := os.MkdirAll(out, 0o700); err != nil {
		return err
	}

	step("Building the offline artifacts bundle (make artifacts; builds missing tools first)")
	artifactsDir := filepath.Join(root, "_out", "artifacts")
	build := exec.CommandContext(ctx, filepath.Join(root, "hack", "artifacts.sh"))
	build.Env = append(os.Environ(), "KAO_ARTIFACTS_DIR="+artifactsDir)
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the artifacts bundle: %w", err)
	}

	step("Booting three test hosts (Debian bookworm, systemd, sshd; no route out)")
	dc, err := hosts.Up(ctx, hosts.Config{Name: "kao-demo", Logf: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }}, 3)
	if err != nil {
		return fmt.Errorf("booting test hosts: %w", err)
	}
	for _, h := range dc.Hosts() {
		fmt.Printf("    %-6s %s (ssh %s@%s, host key pinned in %s)\n", h.Name, h.Address, h.User, h.Address, dc.KnownHostsPath())
	}

	step("Starting the management API server (kube-apiserver %s and etcd from make tools)", "v1.35.4")
	ctrl.SetLogger(zap.New(zap.WriteTo(mustCreate(filepath.Join(out, "operator.log")))))
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	mgmtKubeconfig := filepath.Join(out, "management.kubeconfig")
	if err := env.Kubeconfig(mgmtKubeconfig); err != nil {
		return err
	}
	fmt.Printf("    kubeconfig: %s\n", mgmtKubeconfig)

	step("Starting the kao operator (log: %s)", filepath.Join(out, "operator.log"))
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = kaov1.AddToScheme(scheme)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	stateDir := filepath.Join(out, "state")
	_ = os.RemoveAll(stateDir)
	err = controller.SetupAll(mgr, controller.Options{
		StateDir:                stateDir,
		PlaybookDir:             filepath.Join(root, "playbooks"),
		RolesPath:               []string{filepath.Join(root, "roles")},
		ArtifactsDir:            artifactsDir,
		RunTimeout:              timeout,
		MaxConcurrentReconciles: 2,
		ProbeInterval:           5 * time.Second,
	})
	if err != nil {
		return err
	}
	mgrCtx, stopMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	defer func() { stopMgr(); <-mgrDone }()

	k8s, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	step("Applying KarmadaDeployment %s/%s: etcd on all three hosts, karmada-apiserver on two, the rest on two", namespace, name)
	kd, err := applyDeployment(ctx, k8s, dc)
	if err != nil {
		return err
	}
	final, err := follow(ctx, k8s, kd)
	if err != nil {
		return err
	}
	report(ctx, k8s, final, mgmtKubeconfig, dc, out)
	fmt.Printf("\nDemo finished in %s.\n", time.Since(start).Round(time.Second))
	if keep {
		step("Keeping the management API server and the operator running; press Ctrl-C to stop")
		<-ctx.Done()
	}
	return nil
}

func mustCreate(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return f
}

// applyDeployment creates the SSH Secret and the KarmadaDeployment.
func applyDeployment(ctx context.Context, k8s client.Client, dc *hosts.Cluster) (*kaov1.KarmadaDeployment, error) {
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	data, err := dc.SSHSecretData()
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-ssh", Namespace: namespace}, Data: data}
	if err := k8s.Create(ctx, secret); err != nil {
		return nil, err
	}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: "v1.18.1",
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: "known_hosts"},
			},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
	}
	for i, h := range dc.Hosts() {
		port, err := strconv.ParseInt(strconv.Itoa(h.Port), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("test host %s: SSH port %d: %w", h.Name, h.Port, err)
		}
		// etcd everywhere; karmada-apiserver on the first two; the rest on the last two.
		hostRoles := []kaov1.HostRole{kaov1.EtcdRole}
		if i < 2 {
			hostRoles = append(hostRoles, kaov1.APIServerRole)
		}
		if i > 0 {
			hostRoles = append(hostRoles, kaov1.ControlPlaneRole)
		}
		if i == 0 {
			// No VIP on the demo network: the first API server is the endpoint.
			kd.Spec.APIServer.Endpoint = h.Address + ":5443"
		}
		kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: h.Name, Address: h.Address, Port: int32(port), User: h.User, Roles: hostRoles})
	}
	return kd, k8s.Create(ctx, kd)
}

// follow prints the run's progress as the operator writes it into status,
// until a run of the current generation has ended and health is known.
func follow(ctx context.Context, k8s client.Client, kd *kaov1.KarmadaDeployment) (*kaov1.KarmadaDeployment, error) {
	last := ""
	for {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return nil, err
		}
		line := fmt.Sprintf("    %-11s", cur.Status.Phase)
		if p := cur.Status.Progress; p != nil {
			line += fmt.Sprintf(" [%3d%%] %3d/%-3d %-8s %s", p.Percent, p.TasksDone, p.TasksTotal, p.CurrentHost, p.CurrentTask)
		}
		if line != last && cur.Status.Phase != "" {
			fmt.Println(line)
			last = line
		}
		if r := cur.Status.LastRun; r != nil && cur.Status.Progress == nil && r.Generation == cur.Generation {
			if r.Result != kaov1.RunSucceeded {
				return cur, fmt.Errorf("run %s %s: %s", r.ID, r.Result, r.Message)
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.EtcdHealthyCondition); c != nil && c.Reason != kaov1.WaitingForRunReason {
				return cur, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// report prints what the operator recorded and how to look further.
func report(ctx context.Context, k8s client.Client, kd *kaov1.KarmadaDeployment, mgmtKubeconfig string, dc *hosts.Cluster, out string) {
	r := kd.Status.LastRun
	step("Run %s of %s: %s in %s", r.ID, r.Playbook, r.Result, r.EndTime.Sub(r.StartTime.Time).Round(time.Second))
	fmt.Printf("    %-10s %4s %8s %7s %12s %8s\n", "HOST", "OK", "CHANGED", "FAILED", "UNREACHABLE", "SKIPPED")
	for _, h := range r.Hosts {
		fmt.Printf("    %-10s %4d %8d %7d %12d %8d\n", h.Name, h.OK, h.Changed, h.Failed, h.Unreachable, h.Skipped)
	}
	step("Conditions (from probes, not from the playbook's exit code)")
	conds := append([]metav1.Condition(nil), kd.Status.Conditions...)
	sort.Slice(conds, func(i, j int) bool { return conds[i].Type < conds[j].Type })
	for _, c := range conds {
		fmt.Printf("    %-18s %-8s %-20s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	if e := kd.Status.Etcd; e != nil {
		step("etcd: %s members healthy, leader %s", e.Healthy, e.Leader)
		for _, m := range e.Members {
			fmt.Printf("    %-8s %-28s id %-16s healthy=%v leader=%v\n", m.Name, m.ClientURL, m.ID, m.Healthy, m.Leader)
		}
	}
	step("%d certificates in Secret %s-pki; the first expires %s", len(kd.Status.Certificates), kd.Name,
		kd.Status.Certificates[0].NotAfter.UTC().Format(time.RFC3339))
	step("Look further")
	fmt.Printf("    kubectl --kubeconfig %s -n %s get kd %s\n", mgmtKubeconfig, namespace, kd.Name)
	fmt.Printf("    kubectl --kubeconfig %s -n %s get configmap %s -o jsonpath='{.binaryData.ansible\\.log\\.gz}' | base64 -d | gunzip\n",
		mgmtKubeconfig, namespace, r.LogConfigMapName)
	fmt.Printf("    ssh -F %s %s systemctl status karmada-etcd\n", dc.SSHConfigPath(), dc.Hosts()[0].Name)
	fmt.Printf("    (the management API server stops with this demo unless -keep is given; the hosts stay up)\n")
	fmt.Printf("    go run ./hack/testhosts -name kao-demo down    # remove the hosts\n")
	fmt.Println(strings.Repeat("-", 72))
	ref := kd.Status.KubeconfigSecretRef
	if ref == nil {
		fmt.Println("No admin kubeconfig was exported (status.kubeconfigSecretRef is empty).")
		return
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: kd.Namespace, Name: ref.Name}, secret); err != nil {
		fmt.Printf("Reading the exported kubeconfig: %v\n", err)
		return
	}
	path := filepath.Join(out, "karmada.kubeconfig")
	if err := os.WriteFile(path, secret.Data[ref.Key], 0o600); err != nil {
		fmt.Printf("Writing the exported kubeconfig: %v\n", err)
		return
	}
	step("Karmada kubeconfig (Secret %s/%s): %s", kd.Namespace, ref.Name, path)
	assets, err := testenv.AssetsDir()
	if err != nil {
		fmt.Println(err)
		return
	}
	cmd := exec.CommandContext(ctx, filepath.Join(assets, "kubectl"), "--kubeconfig", path, "get", "clusters")
	fmt.Printf("$ kubectl --kubeconfig %s get clusters\n", path)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		fmt.Printf("kubectl get clusters: %v\n", err)
	}
	fmt.Println("(no member clusters: add spec.members with kubeconfig Secrets to join some)")
}
