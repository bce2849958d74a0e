package incluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/procfs"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/node"
)

// benchDeployments is how many deployments, each on a test host of its
// own, BenchmarkExecutors creates at once: ten, or KAO_BENCH_DEPLOYMENTS.
var benchDeployments = func() int {
	if n, err := strconv.Atoi(os.Getenv("KAO_BENCH_DEPLOYMENTS")); err == nil && n > 0 {
		return n
	}
	return 10
}()

// benchManagerMemory is the manager container's memory limit in both
// rounds. In-process, every run's ansible-playbook and forks count against
// it (about 160 MiB a run): ten at once would pass the chart's 1 GiB, and
// the kernel would kill the manager. The Job round does not need it; the
// same limit keeps the rounds alike.
const benchManagerMemory = "4Gi"

// executorRound is what one executor showed for benchDeployments
// deployments created at once.
type executorRound struct {
	executor string
	allReady time.Duration
	// peak is the manager container's highest memory use (its cgroup's
	// max_usage_in_bytes): in-process runs' ansible-playbook and forks
	// count there, a Job's do not.
	peak int64
	// latencies are how long the manager took to report a missing Secret on
	// a new deployment, created every few seconds while the runs went on.
	latencies []time.Duration
}

// BenchmarkExecutors installs the chart on a real node, once with the
// in-process executor (the baseline) and once with executor.type=job,
// creates benchDeployments Binary deployments on their own SSH test hosts
// at once, and prints for each: the time until all are Ready, the manager
// container's peak memory, and its reconcile latency during the runs (a new
// deployment's missing Secret reported), with the ratios job to process.
func BenchmarkExecutors(b *testing.B) {
	if testing.Short() {
		b.Skip("in-cluster benchmark: skipped in -short mode")
	}
	archive := buildImage(b)
	cluster := node.Start(b, node.Options{})
	if err := cluster.ImportImage(archive); err != nil {
		b.Fatal(err)
	}
	dc := hosts.Start(b, benchDeployments)
	route(b, cluster, dc)
	k8s := newClient(b, cluster)
	// helm uninstall keeps the state claim: both rounds' managers use it.
	statePV(b, k8s, "kao-state-bench")
	tenant(b, k8s, "bench", dc)
	for range b.N {
		var rounds []executorRound
		for _, executor := range []string{"process", "job"} {
			rounds = append(rounds, executorBenchRound(b, cluster, k8s, dc, executor))
		}
		for _, r := range rounds {
			b.Logf("%-7s %d deployments all Ready in %s; manager peak memory %.0f MiB; reconcile latency during the runs: median %s, max %s (%d samples)",
				r.executor, benchDeployments, r.allReady.Round(100*time.Millisecond), float64(r.peak)/(1<<20),
				median(r.latencies).Round(time.Millisecond), slices.Max(r.latencies).Round(time.Millisecond), len(r.latencies))
		}
		p, j := rounds[0], rounds[1]
		b.Logf("ratio job/process: all Ready %.2f, manager peak memory %.2f, median reconcile latency %.2f",
			j.allReady.Seconds()/p.allReady.Seconds(), float64(j.peak)/float64(p.peak),
			median(j.latencies).Seconds()/median(p.latencies).Seconds())
	}
}

// executorBenchRound installs the chart with one executor, runs the round
// and uninstalls everything, so the next round finds the hosts bare.
func executorBenchRound(b *testing.B, cluster *node.Cluster, k8s client.Client, dc *hosts.Cluster, executor string) executorRound {
	ctx := context.Background()
	helmInstall(b, cluster, "executor.type="+executor, "resources.limits.memory="+benchManagerMemory)
	manager := waitForManager(b, k8s, "")
	// The same namespace and names in both rounds: an uninstall keeps
	// etcd's data directory, which only a deployment of that namespace and
	// name may take over.
	ns := "bench"
	cgroup := managerMemoryCgroup(b, manager)
	resetPeak(b, cgroup)

	round := executorRound{executor: executor}
	var kds []*kaov1.KarmadaDeployment
	start := time.Now()
	for i, h := range dc.Hosts() {
		kd := oneHostDeployment(ns, fmt.Sprintf("dc%d", i), "dc-ssh", h)
		create(b, k8s, kd)
		kds = append(kds, kd)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Second):
			}
			if d, ok := reconcileLatency(b, k8s, ns, fmt.Sprintf("probe%d", i), dc.Hosts()[0]); ok {
				round.latencies = append(round.latencies, d)
			}
		}
	}()
	waitFor(b, 15*time.Minute, fmt.Sprintf("%d deployments Ready", len(kds)), func() (bool, error) {
		for _, kd := range kds {
			cur := &kaov1.KarmadaDeployment{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
				return false, err
			}
			if last := cur.Status.LastRun; last != nil && last.Result == kaov1.RunFailed {
				return false, fmt.Errorf("%s: run %s failed: %s", kd.Name, last.ID, last.Message)
			}
			if !meta.IsStatusConditionTrue(cur.Status.Conditions, kaov1.ReadyCondition) {
				return false, nil
			}
		}
		return true, nil
	})
	round.allReady = time.Since(start)
	close(stop)
	wg.Wait()
	round.peak = readCgroupInt(b, filepath.Join(cgroup, "memory.max_usage_in_bytes"))
	if len(round.latencies) == 0 {
		b.Fatal("no reconcile latency sample while the runs went on")
	}

	for _, kd := range kds {
		if err := k8s.Delete(ctx, kd); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 10*time.Minute, "the deployments uninstalled", func() (bool, error) {
		list := &kaov1.KarmadaDeploymentList{}
		err := k8s.List(ctx, list, client.InNamespace(ns))
		return err == nil && len(list.Items) == 0, err
	})
	// The uninstall keeps etcd's data and its owner mark: remove them, so
	// the next round's deployments (new objects) install afresh.
	for _, h := range dc.Hosts() {
		if out, err := dc.Run(ctx, h.Name, "rm -rf /var/lib/karmada-etcd /var/lib/karmada-etcd.kao-*"); err != nil {
			b.Fatalf("clearing etcd's data on %s: %v %s", h.Name, err, out)
		}
	}
	helm(b, cluster, "uninstall", "kao", "--namespace", namespace, "--wait")
	return round
}

// reconcileLatency creates a deployment whose SSH Secret is missing and
// times how long the manager takes to say so, then deletes it.
func reconcileLatency(b *testing.B, k8s client.Client, ns, name string, h hosts.Host) (time.Duration, bool) {
	ctx := context.Background()
	kd := oneHostDeployment(ns, name, "no-such-secret", h)
	start := time.Now()
	if err := k8s.Create(ctx, kd); err != nil {
		b.Error(err)
		return 0, false
	}
	defer func() {
		if err := k8s.Delete(ctx, kd); client.IgnoreNotFound(err) != nil {
			b.Error(err)
		}
	}()
	for time.Since(start) < 2*time.Minute {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil && !apierrors.IsNotFound(err) {
			b.Error(err)
			return 0, false
		}
		for _, c := range cur.Status.Conditions {
			if c.Reason == kaov1.PrerequisitesMissingReason {
				return time.Since(start), true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Errorf("%s: the missing Secret was not reported within 2 minutes", name)
	return 0, false
}

// managerMemoryCgroup is the memory cgroup directory of the manager pod's
// container, found from the manager process's /proc/<pid>/cgroup (one
// manager runs at a time).
func managerMemoryCgroup(b *testing.B, pod *corev1.Pod) string {
	pids, err := procfs.PIDs()
	if err != nil {
		b.Fatal(err)
	}
	for _, pid := range pids {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), "kao-manager\x00--leader-elect") {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue
		}
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			// hierarchy-ID:controllers:path
			parts := strings.SplitN(scanner.Text(), ":", 3)
			// The kubelet runs without per-QoS cgroups here: the container's
			// cgroup is any but the one this test runs in.
			if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") && parts[2] != ownMemoryCgroup(b) {
				_ = f.Close()
				dir := filepath.Join("/sys/fs/cgroup/memory", parts[2])
				b.Logf("manager pod %s: memory cgroup %s", pod.Name, dir)
				return dir
			}
		}
		_ = f.Close()
	}
	b.Fatalf("no memory cgroup of manager pod %s", pod.Name)
	return ""
}

// ownMemoryCgroup is the memory cgroup this process runs in.
func ownMemoryCgroup(b *testing.B) string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), "memory") {
			return parts[2]
		}
	}
	b.Fatal("no memory cgroup in /proc/self/cgroup")
	return ""
}

// resetPeak starts the cgroup's peak anew.
func resetPeak(b *testing.B, cgroup string) {
	if err := os.WriteFile(filepath.Join(cgroup, "memory.max_usage_in_bytes"), []byte("0"), 0o644); err != nil {
		b.Fatal(err)
	}
}

func readCgroupInt(b *testing.B, path string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
