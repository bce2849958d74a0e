package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// The goals: issue 28's, 20 Push members joined at least 20 times faster
// than 20 karmadactl join commands one after another (one join takes about
// 4 s here: 20 members in about the time of one), status in step with
// Karmada within 2 s, and 100 members Ready within 30 s.
const (
	memberJoinGoal   = 20.0
	statusLagGoal    = 2 * time.Second
	memberScaleGoal  = 30 * time.Second
	memberBenchWait  = 10 * time.Minute
	memberScaleCount = 100
)

// memberJoinBench is one member join benchmark.
type memberJoinBench struct {
	// members are joined by kao with one spec change.
	members int
	// baseline members (the first ones) are joined first with karmadactl
	// join, one after another, then unjoined. When fewer than members, the
	// baseline for all of them is extrapolated: members × the mean time of
	// one join.
	baseline int
	// lean starts Lean members (members.Options.Lean), for a hundred.
	lean bool
	// goal is the speed-up to reach; readyGoal, when set, the time to all
	// Ready.
	goal      float64
	readyGoal time.Duration
}

// BenchmarkMemberJoin joins 20 real member clusters (kube-apiserver and
// kube-controller-manager each, over one shared etcd) to a one-host Karmada
// control plane twice in the same run:
//
//   - the baseline: `karmadactl join` for each member, one after the other,
//     as a hand-run script does, timed from the first command until Karmada
//     reports all 20 Clusters Ready; then `karmadactl unjoin` for each;
//   - kao: one spec change adding the 20 members, timed from the update
//     until Karmada reports all 20 Clusters Ready (and, reported beside it,
//     until status.readyMembers says 20/20).
//
// It prints both times, the speed-up against the goal, and the peak memory
// of the operator and of its run's processes. Run it with
//
//	go test ./test/e2e/ -run '^$' -bench 'MemberJoin$' -benchtime 1x -timeout 60m
func BenchmarkMemberJoin(b *testing.B) {
	for i := 0; i < b.N; i++ {
		memberJoinBench{members: 20, baseline: 20, goal: memberJoinGoal}.run(b)
	}
}

// BenchmarkMemberJoinAtScale joins 100 Lean member clusters with one spec
// change, timed until Karmada reports all 100 Clusters Ready, against a
// baseline of 10 `karmadactl join` commands one after another in the same
// run (extrapolated to 100: one join's mean time × 100). Run it with
//
//	go test ./test/e2e/ -run '^$' -bench MemberJoinAtScale -benchtime 1x -timeout 60m
func BenchmarkMemberJoinAtScale(b *testing.B) {
	for i := 0; i < b.N; i++ {
		memberJoinBench{members: memberScaleCount, baseline: 10, lean: true, readyGoal: memberScaleGoal}.run(b)
	}
}

func (mb memberJoinBench) run(b *testing.B) {
	b.StopTimer()
	ctx := context.Background()
	dc := hosts.Start(b, 1)
	ns := newNamespace(b)
	stateDir := testenv.StateDir(b)
	// The operator runs as its own process, so that its memory and its
	// runs' are its own and not the test's.
	operator := startOperatorProcess(b, ns, stateDir, "operator")
	createSSHSecret(b, ns, "bench-ssh", dc)
	kd := binaryDeployment(ns, "bench", "bench-ssh", dc.Hosts())
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	if err := k8s.Create(ctx, kd); err != nil {
		b.Fatal(err)
	}
	installed := waitForCondition(b, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 10*time.Minute)
	karmadaKubeconfig := writeKarmadaKubeconfig(b, installed)
	clusters := karmadaClusters(b, karmadaKubeconfig)

	memberClusters := members.Start(b, mb.members, members.Options{Address: dc.Gateway(), Lean: mb.lean})
	dir := b.TempDir()
	names := make([]string, len(memberClusters))
	data := map[string][]byte{}
	for j, m := range memberClusters {
		names[j] = fmt.Sprintf("m%03d", j+1)
		data[names[j]] = m.Kubeconfig
		if err := os.WriteFile(filepath.Join(dir, names[j]+".kubeconfig"), m.Kubeconfig, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	karmadactl := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmadactl")
	run := func(args ...string) {
		b.Helper()
		out, err := exec.Command(karmadactl, args...).CombinedOutput()
		if err != nil {
			b.Fatalf("karmadactl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	memberArgs := func(j int) []string {
		return []string{"--kubeconfig", karmadaKubeconfig, "--cluster-kubeconfig", filepath.Join(dir, names[j]+".kubeconfig"),
			"--cluster-context", memberClusters[j].Name}
	}

	b.StartTimer()
	start := time.Now()
	for j := range names[:mb.baseline] {
		run(append([]string{"join", names[j]}, memberArgs(j)...)...)
	}
	commandsDone := time.Since(start)
	waitForReadyClusters(b, clusters, names[:mb.baseline], memberBenchWait)
	measured := time.Since(start)
	b.StopTimer()
	baseline := time.Duration(float64(measured) * float64(mb.members) / float64(mb.baseline))

	for j := range names[:mb.baseline] {
		run(append([]string{"unjoin", names[j]}, memberArgs(j)...)...)
	}
	waitForNoClusters(b, clusters, memberBenchWait)
	// karmadactl unjoin does not wait for the members' karmada-cluster
	// namespaces to go; kao starts, like karmadactl did, on members
	// with nothing of Karmada's left (it would wait for them).
	for j := range names[:mb.baseline] {
		waitForNamespaceGone(b, memberClusters[j], "karmada-cluster", memberBenchWait)
	}

	createSecret(b, ns, "member-kubeconfigs", data)
	peak := samplePeakMemory(b, operator.cmd.Process.Pid)
	cpuBefore := readCPUTimes(b)
	b.StartTimer()
	start = time.Now()
	updateSpec(b, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		for _, n := range names {
			s.Members = append(s.Members, kaov1.MemberSpec{Name: n, SyncMode: kaov1.PushSyncMode,
				KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "member-kubeconfigs", Key: n}})
		}
	})
	marks := watchJoin(b, kd, clusters, names, start, memberBenchWait)
	joined := time.Since(start)
	b.StopTimer()
	busy := readCPUTimes(b).busySince(cpuBefore)
	// Read as often as Karmada's Clusters are above, so the lag is not the poll's.
	for want := fmt.Sprintf("%d/%d", mb.members, mb.members); get(b, kd).Status.ReadyMembers != want; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > memberBenchWait {
			b.Fatalf("status.readyMembers is not %s within %s", want, memberBenchWait)
		}
	}
	inStatus := time.Since(start)
	done := waitForRun(b, kd, memberBenchWait)
	if last := done.Status.LastRun; last.Result != kaov1.RunSucceeded {
		b.Fatalf("the run joining the members failed: %+v", last)
	}
	mem := peak()

	speedup := baseline.Seconds() / joined.Seconds()
	b.ReportMetric(baseline.Seconds(), "karmadactl-s")
	b.ReportMetric(joined.Seconds(), "kao-s")
	b.ReportMetric(speedup, "speedup")
	b.ReportMetric(float64(mem.operator)/(1<<20), "operator-MiB")
	b.ReportMetric(float64(mem.run)/(1<<20), "run-MiB")
	met := map[bool]string{true: "met", false: "MISSED"}
	fmt.Printf("\n%d Push members joined, until Karmada reports every Cluster Ready\n", mb.members)
	if mb.baseline == mb.members {
		fmt.Printf("  karmadactl join, one after another  %8s (commands alone %s)\n", baseline.Round(100*time.Millisecond), commandsDone.Round(100*time.Millisecond))
	} else {
		fmt.Printf("  karmadactl join, one after another  %8s (extrapolated: %d joins took %s, commands alone %s)\n",
			baseline.Round(100*time.Millisecond), mb.baseline, measured.Round(100*time.Millisecond), commandsDone.Round(100*time.Millisecond))
	}
	fmt.Printf("  kao, one spec change                %8s (%s in status.readyMembers; playbook %s, run %s)\n",
		joined.Round(100*time.Millisecond), inStatus.Round(100*time.Millisecond), done.Status.LastRun.Playbook,
		runDuration(b, done).Round(100*time.Millisecond))
	if mb.goal > 0 {
		fmt.Printf("  speed-up %.2fx, goal %.0fx: %s\n", speedup, mb.goal, met[speedup >= mb.goal])
	} else {
		fmt.Printf("  speed-up %.2fx\n", speedup)
	}
	if mb.readyGoal > 0 {
		fmt.Printf("  all %d Ready in %s, goal %s: %s\n", mb.members, joined.Round(100*time.Millisecond), mb.readyGoal, met[joined <= mb.readyGoal])
	}
	lag := inStatus - joined
	b.ReportMetric(lag.Seconds(), "status-lag-s")
	fmt.Printf("  status.readyMembers behind Karmada by %s, goal %s: %s\n", lag.Round(100*time.Millisecond), statusLagGoal, met[lag <= statusLagGoal])
	fmt.Printf("  peak memory: the operator %s, its run's processes %s at once (ansible-playbook and its forks %s, the largest one %s)\n",
		mib(mem.operator), mib(mem.run), mib(mem.ansible), mib(mem.largest))
	fmt.Printf("  the machine's CPUs were %.0f%% busy from the spec change until all were Ready\n", 100*busy)
	fmt.Printf("\nWhere kao's %s went (from the spec change; polled every 200 ms)\n", joined.Round(100*time.Millisecond))
	for _, m := range marks {
		fmt.Printf("  %7s  %s\n", m.at.Round(100*time.Millisecond), m.what)
	}
	printTaskTimeline(b, done, start)
	saveControllerManagerLog(b, dc, dc.Hosts()[0].Name, start)
}

// saveControllerManagerLog keeps karmada-controller-manager's journal from
// start on in a file outside the test's temporary directories, for reading
// after the run how Karmada's cluster controllers took the new Clusters.
func saveControllerManagerLog(t testing.TB, dc *hosts.Cluster, host string, start time.Time) {
	t.Helper()
	out, err := dc.Run(context.Background(), host, fmt.Sprintf(
		"journalctl --no-pager -o short-precise -u karmada-controller-manager --since @%d", start.Unix()-1))
	if err != nil {
		fmt.Printf("karmada-controller-manager's journal: %v\n", err)
		return
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("kao-bench-controller-manager-%d.log", start.Unix()))
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("karmada-controller-manager's journal since the spec change: %s\n", path)
}

// writeKarmadaKubeconfig writes the deployment's exported admin kubeconfig
// to a file.
func writeKarmadaKubeconfig(t testing.TB, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	ref := kd.Status.KubeconfigSecretRef
	if ref == nil {
		t.Fatal("no exported kubeconfig in status")
		return ""
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: ref.Name}, secret); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "karmada.kubeconfig")
	if err := os.WriteFile(file, secret.Data[ref.Key], 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// karmadaClusters is a client of Karmada's Cluster API.
func karmadaClusters(t testing.TB, kubeconfig string) dynamic.NamespaceableResourceInterface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(schema.GroupVersionResource{Group: "cluster.karmada.io", Version: "v1alpha1", Resource: "clusters"})
}

// waitForReadyClusters waits until every named Cluster has Ready=True.
func waitForReadyClusters(t testing.TB, clusters dynamic.NamespaceableResourceInterface, names []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list, err := clusters.List(context.Background(), metav1.ListOptions{})
		ready := map[string]bool{}
		if err == nil {
			for _, c := range list.Items {
				ready[c.GetName()] = clusterReady(c)
			}
		}
		missing := []string{}
		for _, n := range names {
			if !ready[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Clusters not Ready after %s: %v (%v)", timeout, missing, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitForNoClusters waits until Karmada has no Cluster left.
func waitForNoClusters(t testing.TB, clusters dynamic.NamespaceableResourceInterface, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		list, err := clusters.List(context.Background(), metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Clusters still there after %s (%v)", timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// waitForNamespaceGone waits until a member cluster has no namespace name.
func waitForNamespaceGone(t testing.TB, m *members.Member, name string, timeout time.Duration) {
	t.Helper()
	cs, err := m.Client()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := cs.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: namespace %s still there after %s (%v)", m.Name, name, timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func clusterReady(c unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// mark is a moment of the kao side of the benchmark, after the spec change.
type mark struct {
	at   time.Duration
	what string
}

// watchJoin waits until every named Cluster is Ready, noting when the run
// started and when the first and the last Cluster appeared and became Ready.
func watchJoin(t testing.TB, kd *kaov1.KarmadaDeployment, clusters dynamic.NamespaceableResourceInterface,
	names []string, start time.Time, timeout time.Duration) []mark {
	t.Helper()
	var marks []mark
	note := func(what string) { marks = append(marks, mark{time.Since(start), what}) }
	runSeen, created, ready := false, 0, 0
	seen := clusterMilestones{}
	deadline := time.Now().Add(timeout)
	for {
		if !runSeen {
			if cur := get(t, kd); cur.Status.Progress != nil && cur.Status.Progress.Playbook != "" {
				runSeen = true
				note("status.progress shows the run (" + cur.Status.Progress.Playbook + ")")
			}
		}
		list, err := clusters.List(context.Background(), metav1.ListOptions{})
		if err == nil {
			n, r := 0, 0
			for _, c := range list.Items {
				if !slices.Contains(names, c.GetName()) {
					continue
				}
				n++
				if clusterReady(c) {
					r++
				}
			}
			for _, c := range list.Items {
				if slices.Contains(names, c.GetName()) {
					seen.observe(c, time.Since(start))
				}
			}
			if created == 0 && n > 0 {
				note(fmt.Sprintf("first Cluster created (%d)", n))
			}
			if n == len(names) && created < len(names) {
				note("all Clusters created")
			}
			if ready == 0 && r > 0 {
				note(fmt.Sprintf("first Cluster Ready (%d)", r))
			}
			created, ready = n, r
			if r == len(names) {
				note("all Clusters Ready")
				return append(marks, seen.marks()...)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Clusters not all Ready after %s: %d created, %d Ready (%v)", timeout, created, ready, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// clusterMilestones keeps, per Cluster, when the poll first saw it, first
// saw Karmada's cluster controller finalizer on it (Karmada's cluster status
// controller waits for that finalizer before its first health check), and
// first saw a Ready condition and Ready=True, with the first Ready
// condition's reason: where Karmada itself spends the time after creation.
type clusterMilestones map[string]*clusterSeen

type clusterSeen struct {
	created, finalizer, condition, ready time.Duration
	firstReason                          string
}

func (m clusterMilestones) observe(c unstructured.Unstructured, at time.Duration) {
	s := m[c.GetName()]
	if s == nil {
		s = &clusterSeen{created: at, finalizer: -1, condition: -1, ready: -1}
		m[c.GetName()] = s
	}
	if s.finalizer < 0 && len(c.GetFinalizers()) > 0 {
		s.finalizer = at
	}
	conds, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, x := range conds {
		cond, _ := x.(map[string]any)
		if cond["type"] != "Ready" {
			continue
		}
		if s.condition < 0 {
			s.condition = at
			s.firstReason = fmt.Sprintf("%v/%v", cond["status"], cond["reason"])
		}
		if s.ready < 0 && cond["status"] == "True" {
			s.ready = at
		}
	}
}

// marks sums the milestones up: the latest of each across the Clusters,
// the largest gaps between them, and how many Clusters had each first
// Ready condition.
func (m clusterMilestones) marks() []mark {
	var out []mark
	latest := func(what string, f func(*clusterSeen) time.Duration) {
		var last time.Duration
		for _, s := range m {
			last = max(last, f(s))
		}
		out = append(out, mark{last, "latest " + what})
	}
	latest("Cluster with the cluster controller's finalizer", func(s *clusterSeen) time.Duration { return s.finalizer })
	latest("first Ready condition", func(s *clusterSeen) time.Duration { return s.condition })
	gap := func(what string, f func(*clusterSeen) time.Duration) {
		var worst time.Duration
		for _, s := range m {
			worst = max(worst, f(s))
		}
		out = append(out, mark{worst, "longest " + what + " (a gap, not a moment)"})
	}
	gap("created to finalizer", func(s *clusterSeen) time.Duration { return s.finalizer - s.created })
	gap("finalizer to first Ready condition", func(s *clusterSeen) time.Duration { return s.condition - s.finalizer })
	gap("first Ready condition to Ready=True", func(s *clusterSeen) time.Duration { return s.ready - s.condition })
	reasons := map[string]int{}
	for _, s := range m {
		reasons[s.firstReason]++
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, mark{0, fmt.Sprintf("first Ready condition %s on %d Clusters", k, reasons[k])})
	}
	return out
}

// printTaskTimeline prints, from the logs the operator kept of the runs
// that started after start (the spec change), each play, each failed
// result, and each result that came at least half a second after the line
// before it, counted from start, with that gap: where the runs waited.
func printTaskTimeline(t testing.TB, kd *kaov1.KarmadaDeployment, start time.Time) {
	t.Helper()
	list := &corev1.ConfigMapList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(kd.Namespace),
		client.MatchingLabels{kaov1.DeploymentUIDLabel: string(kd.UID)}); err != nil {
		t.Fatal(err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	lines := 0
	for _, cm := range list.Items {
		text, err := runLogText(&cm)
		if err != nil {
			continue
		}
		var out []string
		prev := start
		for _, l := range stampedLines(text) {
			if l.at.Before(start) {
				continue
			}
			lines++
			gap := l.at.Sub(prev)
			prev = l.at
			status := strings.Fields(l.rest)[0]
			if gap >= 500*time.Millisecond || slices.Contains([]string{"start", "play", "end", "failed", "unreachable"}, status) {
				out = append(out, fmt.Sprintf("  %7s %6s  %s", l.at.Sub(start).Round(10*time.Millisecond), gap.Round(10*time.Millisecond), truncate(l.rest, 160)))
			}
		}
		if len(out) > 0 {
			fmt.Printf("\nRun %s: plays, failures, and results 0.5 s or more after the line before (at, gap)\n%s\n",
				cm.Labels[kaov1.RunIDLabel], strings.Join(out, "\n"))
		}
	}
	if lines == 0 {
		t.Errorf("no time-stamped line in the logs of the runs since the spec change")
	}
}

// truncate shortens s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
