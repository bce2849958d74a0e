package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// TestInstallFaults breaks a Binary install the ways a data centre does and
// checks that kao fails safely and recovers:
//
//   - the operator's process group is killed (SIGKILL, as when its Pod is
//     evicted) in the middle of the install, twice, the second time in the
//     run the previous operator's successor started: each new operator
//     process records the run as interrupted and runs the install again, and
//     the last one completes with a consistent status;
//   - a host loses power in the middle of a run, silently (no connection of
//     its ends): the run fails naming that host unreachable and the other
//     host keeps its services running;
//   - once it is back, its network is cut in the middle of the next run: the
//     same, for a host that is up but cannot be reached; once the network is
//     restored the next run succeeds.
//
// The operator runs as its own process here (cmd/manager), so that killing
// it kills what a real operator's container holds: the manager and its
// ansible-playbook.
func TestInstallFaults(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	dc := hosts.Start(t, 2)
	ctx := context.Background()
	ns := newNamespace(t)
	stateDir := testenv.StateDir(t)
	nodes := dc.Hosts()
	createSSHSecret(t, ns, "faults-ssh", dc)

	kd := binaryDeployment(ns, "faults", "faults-ssh", nodes)
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	kd.Spec.Hosts[1].Roles = []kaov1.HostRole{kaov1.ControlPlaneRole}
	kd.Spec.SSH.ConnectTimeoutSeconds = 5

	operator := startOperatorProcess(t, ns, stateDir, "operator-1")
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	// Two kills, at about a quarter of the first run and half of the run
	// the first successor started.
	killed := []string{}
	for i, percent := range []int32{25, 50} {
		p := waitForProgressOfRun(t, kd, killed, percent, 5*time.Minute)
		operator.kill(t, stateDir)
		t.Logf("killed the operator at %d%% of run %s (%s)", p.Percent, p.RunID, p.CurrentTask)
		killed = append(killed, p.RunID)
		operator = startOperatorProcess(t, ns, stateDir, fmt.Sprintf("operator-%d", i+2))
	}
	done := waitForRunOtherThan(t, kd, killed[len(killed)-1], runWait)
	if last := done.Status.LastRun; last.Result != kaov1.RunSucceeded || done.Status.Progress != nil || slices.Contains(killed, last.ID) {
		t.Fatalf("the install after the operator was killed twice did not complete: %+v, progress %+v", last, done.Status.Progress)
	}
	for _, id := range killed {
		if !hasEvent(t, kd, "PlaybookInterrupted", id) {
			t.Errorf("no PlaybookInterrupted Event names the killed run %s", id)
		}
	}
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	apiserverPID := mainPID(t, dc, nodes[0].Name, "karmada-apiserver")
	// failingRun starts a run, breaks nodes[1] once the run is under way,
	// and checks that the run fails naming nodes[1] unreachable while
	// nodes[0] is not harmed.
	failingRun := func(t *testing.T, what string, breakHost func() error) {
		t.Helper()
		before := get(t, kd).Status.LastRun.ID
		for _, paused := range []bool{true, false} {
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				cur := get(t, kd)
				cur.Spec.Paused = paused
				return k8s.Update(ctx, cur)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		waitForProgressOfRunAfter(t, kd, before, 2*time.Minute)
		if err := breakHost(); err != nil {
			t.Fatal(err)
		}
		failed := waitForRunOtherThan(t, kd, before, runWait)
		last := failed.Status.LastRun
		if last.Result != kaov1.RunFailed {
			t.Fatalf("the run with %s %s did not fail: %+v", nodes[1].Name, what, last)
		}
		named := false
		for _, f := range last.FailedTasks {
			if f.Host != nodes[1].Name {
				t.Errorf("only %s is %s, but %s failed: %+v", nodes[1].Name, what, f.Host, f)
			}
			named = named || f.Unreachable
		}
		if !named {
			t.Errorf("the failed run does not say %s is unreachable: %+v", nodes[1].Name, last.FailedTasks)
		}
		if c := meta.FindStatusCondition(failed.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil ||
			c.Reason != kaov1.HostUnreachableReason || !strings.Contains(c.Message, nodes[1].Name) {
			t.Errorf("PlaybookSucceeded does not name %s unreachable: %+v", nodes[1].Name, c)
		}
		if pid := mainPID(t, dc, nodes[0].Name, "karmada-apiserver"); pid != apiserverPID {
			t.Errorf("karmada-apiserver on %s was restarted (PID %s, was %s) by a run that failed on %s", nodes[0].Name, pid, apiserverPID, nodes[1].Name)
		}
		t.Logf("with %s %s the run failed: %s", nodes[1].Name, what, last.Message)
	}

	// The host powered off comes back at once; the next run, whose network
	// cut follows, starts on it, and the run after the network is restored
	// must succeed on both hosts: one recovery run for the two faults.
	// The power loss is silent (hosts.Cluster.Fail): the run's SSH session
	// to the host hears no end, as from a real machine losing power, and
	// has only its keepalives to find out.
	t.Run("host powered off mid-run", func(t *testing.T) {
		failingRun(t, "powered off", func() error { return dc.Fail(ctx, nodes[1].Name) })
		if err := dc.Restore(ctx, nodes[1].Name); err != nil {
			t.Fatal(err)
		}
		if err := dc.Start(ctx, nodes[1].Name); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("host network cut mid-run", func(t *testing.T) {
		failingRun(t, "cut off the network", func() error { return dc.Cut(ctx, nodes[1].Name) })
		if err := dc.Restore(ctx, nodes[1].Name); err != nil {
			t.Fatal(err)
		}
		if again := rerun(t, kd); again.Status.LastRun.Result != kaov1.RunSucceeded {
			t.Fatalf("the run after %s was powered on and its network restored failed: %+v", nodes[1].Name, again.Status.LastRun)
		}
	})
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	t.Run("another deployment on the same host", func(t *testing.T) { intruder(t, dc, kd) })
	t.Run("three spec changes during one run", func(t *testing.T) { threeEditsInOneRun(t, dc, kd) })
	t.Run("deleted during a run and created again", func(t *testing.T) { deleteMidRunAndRecreate(t, dc, kd) })
}

// intruder creates a second deployment on a host the first one owns: its
// install is refused on that host before anything changes there, and its
// deletion leaves the host to its owner.
func intruder(t *testing.T, dc *hosts.Cluster, owner *kaov1.KarmadaDeployment) {
	ctx := context.Background()
	node := dc.Hosts()[0]
	pids := map[string]string{}
	for _, svc := range []string{"karmada-etcd", "karmada-apiserver"} {
		pids[svc] = mainPID(t, dc, node.Name, svc)
	}
	other := binaryDeployment(owner.Namespace, "intruder", owner.Spec.SSH.PrivateKeySecretRef.Name, []hosts.Host{node})
	other.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	other.Spec.SSH.ConnectTimeoutSeconds = 5
	other.Spec.Etcd.Managed.PurgeDataOnDelete = true
	if err := k8s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	refused := waitForRun(t, other, 3*time.Minute)
	last := refused.Status.LastRun
	named := false
	for _, f := range last.FailedTasks {
		named = named || f.Host == node.Name && strings.Contains(f.Message, "belongs to another KarmadaDeployment (uid "+string(owner.UID)+")")
	}
	if last.Result != kaov1.RunFailed || !named {
		t.Fatalf("a second deployment's install on %s was not refused naming the owner: %+v", node.Name, last)
	}
	for svc, was := range pids {
		if pid := mainPID(t, dc, node.Name, svc); pid != was {
			t.Errorf("the refused install restarted the owner's %s on %s (PID %s, was %s)", svc, node.Name, pid, was)
		}
	}
	if err := k8s.Delete(ctx, refused); err != nil {
		t.Fatal(err)
	}
	testenv.WaitReleased(t, k8s, other, 3*time.Minute)
	if out, _ := dc.Run(ctx, node.Name, "systemctl is-active karmada-etcd karmada-apiserver"); strings.Fields(out)[0] != "active" || strings.Fields(out)[1] != "active" {
		t.Errorf("deleting the refused deployment stopped the owner's services on %s: %q", node.Name, out)
	}
	if out, _ := dc.Run(ctx, node.Name, "cat /etc/kao/owner; test -d /var/lib/karmada-etcd/member && echo data-kept"); !strings.Contains(out, string(owner.UID)) || !strings.Contains(out, "data-kept") {
		t.Errorf("deleting the refused deployment took %s or its etcd data from its owner: %q", node.Name, out)
	}
	for svc, was := range pids {
		if pid := mainPID(t, dc, node.Name, svc); pid != was {
			t.Errorf("the refused deployment's uninstall restarted the owner's %s (PID %s, was %s)", svc, pid, was)
		}
	}
}

// threeEditsInOneRun changes the spec three times while one run is under
// way: the run finishes, then exactly one more run converges the last spec.
func threeEditsInOneRun(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	before := get(t, kd).Status.LastRun.ID
	since := time.Now()
	setVerbosity := func(v string) {
		updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
			s.Components.Scheduler.ExtraArgs = []kaov1.Arg{{Name: "v", Value: v}}
		})
	}
	setVerbosity("1")
	waitForProgressOfRunAfter(t, kd, before, 2*time.Minute)
	running := get(t, kd).Status.Progress.RunID
	setVerbosity("2")
	setVerbosity("3")
	final := get(t, kd).Generation
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded || done.Status.LastRun.ID == running {
		t.Fatalf("no successful run for the last spec after the edited run %s: %+v", running, done.Status.LastRun)
	}
	events := deploymentEvents(t, kd)
	slices.SortFunc(events, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	started := []string{}
	for _, e := range events {
		if e.Reason == "PlaybookStarted" && e.EventTime.After(since) {
			started = append(started, e.Note)
		}
	}
	if len(started) != 2 || !strings.Contains(started[1], fmt.Sprintf("for generation %d", final)) {
		t.Errorf("three edits during run %s started runs %q; want that run and one more, for generation %d", running, started, final)
	}
	for _, h := range dc.Hosts() {
		if out, _ := dc.Run(context.Background(), h.Name, "cat /etc/systemd/system/karmada-scheduler.service"); strings.Contains(out, "karmada-scheduler") && !strings.Contains(out, "--v=3") {
			t.Errorf("karmada-scheduler on %s does not run with the last spec's --v=3:\n%s", h.Name, out)
		}
	}
}

// deleteMidRunAndRecreate deletes the deployment while a run is under way:
// the run is cancelled, the uninstall follows and nothing of the deployment
// is left on its hosts; then a deployment of the same name, created as soon
// as the old one is gone, installs like a new one.
func deleteMidRunAndRecreate(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	ctx := context.Background()
	before := get(t, kd).Status.LastRun.ID
	// The uninstall's inventory is built from the spec at deletion, so the
	// purge asked for in the same edit as the run it interrupts applies.
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Etcd.Managed.PurgeDataOnDelete = true
		s.Components.Scheduler.ExtraArgs = []kaov1.Arg{{Name: "v", Value: "4"}}
	})
	waitForProgressOfRunAfter(t, kd, before, 2*time.Minute)
	old := get(t, kd)
	if err := k8s.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	testenv.WaitReleased(t, k8s, old, 5*time.Minute)
	checkNothingLeft(t, dc, old)

	again := old.DeepCopy()
	again.ObjectMeta = metav1.ObjectMeta{Name: old.Name, Namespace: old.Namespace}
	again.Status = kaov1.KarmadaDeploymentStatus{}
	if err := k8s.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	installed := waitForRun(t, again, runWait)
	if last := installed.Status.LastRun; last.Result != kaov1.RunSucceeded || last.Playbook != "install.yml" {
		t.Fatalf("the deployment created again under the same name did not install: %+v", last)
	}
	waitForCondition(t, again, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
}

// checkNothingLeft checks that a deleted deployment that asked for its data
// to be purged left nothing of kao's on its hosts: no service or unit, no
// configuration, certificates or data, no owner marker.
func checkNothingLeft(t testing.TB, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	for _, h := range kd.Spec.Hosts {
		// The binaries stay (a later deployment checks and reuses them);
		// everything kao configured goes.
		out, err := dc.Run(context.Background(), h.Name, "ls -d /etc/systemd/system/karmada-* /etc/systemd/system/kube-* /var/lib/karmada-etcd* /etc/kao/owner 2>/dev/null; "+
			"find /etc/karmada -type f 2>/dev/null; systemctl list-units --all --no-legend 'karmada-*' 'kube-*' | grep -v not-found || true")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after the deletion %s keeps %q (%v)", h.Name, out, err)
		}
	}
}

// mainPID is the main PID of a systemd service on a test host.
func mainPID(t testing.TB, dc *hosts.Cluster, host, service string) string {
	t.Helper()
	out, err := dc.Run(context.Background(), host, "systemctl show -p MainPID --value "+service)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(out)
	if pid == "" || pid == "0" {
		t.Fatalf("%s does not run on %s", service, host)
	}
	return pid
}

// waitForProgressOfRun waits until a run that is none of before is at
// least percent done.
func waitForProgressOfRun(t testing.TB, kd *kaov1.KarmadaDeployment, before []string, percent int32, timeout time.Duration) kaov1.RunProgress {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if p := cur.Status.Progress; p != nil && !slices.Contains(before, p.RunID) && p.Percent >= percent {
			return *p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new run reached %d%% within %s: %+v", percent, timeout, cur.Status)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitForProgressOfRunAfter waits until a run other than before shows
// progress with a task done.
func waitForProgressOfRunAfter(t testing.TB, kd *kaov1.KarmadaDeployment, before string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if p := cur.Status.Progress; p != nil && p.RunID != before && p.TasksDone > 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new run under way within %s: %+v", timeout, cur.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitForRunOtherThan waits until the deployment's last run is a finished
// run other than before.
func waitForRunOtherThan(t testing.TB, kd *kaov1.KarmadaDeployment, before string, timeout time.Duration) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if last := cur.Status.LastRun; last != nil && last.ID != before && cur.Status.Progress == nil &&
			last.Result != kaov1.RunCancelled {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run after %s finished within %s: %+v", before, timeout, cur.Status)
		}
		time.Sleep(time.Second)
	}
}

// hasEvent tells whether an Event of the deployment has the reason and
// mentions text.
func hasEvent(t testing.TB, kd *kaov1.KarmadaDeployment, reason, text string) bool {
	t.Helper()
	for _, e := range deploymentEvents(t, kd) {
		if e.Reason == reason && strings.Contains(e.Note, text) {
			return true
		}
	}
	return false
}

var (
	managerOnce sync.Once
	managerBin  string
	managerErr  error
)

// operatorProcess is cmd/manager running as its own process group.
type operatorProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startOperatorProcess builds cmd/manager once and runs it for one
// namespace with the repository's playbooks, roles and bundle; its log goes
// to the test's temporary directory under name. extra flags come last and
// win (--playbook-dir=... runs other playbooks).
func startOperatorProcess(t testing.TB, ns, stateDir, name string, extra ...string) *operatorProcess {
	t.Helper()
	root := testenv.RepoRoot()
	managerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kao-manager-")
		if err != nil {
			managerErr = err
			return
		}
		managerBin = filepath.Join(dir, "manager")
		build := exec.Command("go", append(append([]string{"build"}, testenv.BuildFlags...), "-o", managerBin, "./cmd/manager")...)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			managerErr = err
			t.Logf("go build ./cmd/manager: %s", out)
		}
	})
	if managerErr != nil {
		t.Fatalf("building cmd/manager: %v", managerErr)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(managerBin,
		"--watch-namespaces="+ns,
		"--state-dir="+stateDir,
		"--playbook-dir="+filepath.Join(root, "playbooks"),
		"--roles-path="+filepath.Join(root, "roles"),
		"--artifacts-dir="+artifactsDir,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--max-concurrent-reconciles=2",
		"--run-timeout=10m")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &operatorProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	t.Logf("%s: pid %d, log %s", name, cmd.Process.Pid, logFile.Name())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// kill sends SIGKILL to everything the operator's container would hold:
// the manager's process group and the runs it started (ansible-playbook
// runs in a process group of its own, with its SSH connections; their
// command lines name the state directory). It waits for the manager to be
// gone.
//
// A container runtime kills a whole cgroup at once; pkill cannot: an
// ansible-playbook that forks a worker while pkill walks /proc leaves that
// worker behind (CI saw one). So kill repeats until nothing that names the
// state directory is left, as the cgroup kill would have it.
func (p *operatorProcess) kill(t *testing.T, stateDir string) {
	t.Helper()
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	var left []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		_ = exec.Command("pkill", "-KILL", "-f", stateDir).Run()
		out, err := exec.Command("pgrep", "-f", stateDir).Output()
		if err != nil {
			return
		}
		left = out
	}
	t.Fatalf("processes of the killed operator survived 10s of SIGKILL: %s", left)
}
