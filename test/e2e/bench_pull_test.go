package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// Issue 28's goal for Pull members: 20 joined by one spec change are all
// Ready within about the time of two joined one at a time, that is at least
// 10 times faster than joining them one by one.
const (
	pullBenchMembers = 20
	pullJoinGoal     = 10.0
	// pullAgentPoll is how often the harness's kubelet asks each member
	// for kao's karmada-agent Deployment.
	pullAgentPoll = 150 * time.Millisecond
)

// BenchmarkPullMemberJoin joins Pull members (real kube-apiserver and
// kube-controller-manager each, over one shared etcd) to a one-host Karmada
// control plane twice in the same run, each time by one spec change, timed
// from the update until Karmada reports the new Clusters Ready:
//
//   - the baseline: one Pull member alone;
//   - then 20 more at once.
//
// The members have no kubelet, so the harness plays it for every member at
// once: it starts each member's karmada-agent as soon as kao's Deployment
// and kubeconfig Secret are in that member (members.RunAgentWhenDeployed,
// polling every 150 ms). That start is part of kao's time, as a real
// kubelet's would be; the benchmark prints when the last agent started.
//
// It prints both times and the speed-up 20 × t(one) / t(20), the parallel
// join against 20 single joins one after another, with the goal (10×),
// and where the time went. Run it with
//
//	go test ./test/e2e/ -run '^$' -bench PullMemberJoin -benchtime 1x -timeout 60m
//
// The 20 are added beside the baseline's member rather than in its place:
// removing it first would put an unjoin run and a stopped agent between the
// two measurements, and a Karmada with one Cluster already joined is what
// a fleet growing by 20 looks like. Only the 20 new members are in that
// run's join group (kao joins a member once), and only their Clusters are
// timed.
func BenchmarkPullMemberJoin(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ctx := context.Background()
		dc := hosts.Start(b, 1)
		ns := newNamespace(b)
		startOperator(b, ns)
		createSSHSecret(b, ns, "bench-ssh", dc)
		kd := binaryDeployment(ns, "bench", "bench-ssh", dc.Hosts())
		kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
		// Pull members need the registry of the agent's image. Set with the
		// install, so that the timed spec changes touch spec.members alone
		// and run members.yml, as they would on a running control plane.
		kd.Spec.Artifacts.ImageRegistry = e2eRegistry
		if err := k8s.Create(ctx, kd); err != nil {
			b.Fatal(err)
		}
		installed := waitForCondition(b, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 10*time.Minute)
		clusters := karmadaClusters(b, writeKarmadaKubeconfig(b, installed))

		memberClusters := members.Start(b, 1+pullBenchMembers, members.Options{Address: dc.Gateway()})
		names := make([]string, len(memberClusters))
		data := map[string][]byte{}
		for j, m := range memberClusters {
			names[j] = fmt.Sprintf("pull-%02d", j)
			data[names[j]] = m.Kubeconfig
		}
		createSecret(b, ns, "member-kubeconfigs", data)
		// The agents' kubeconfigs hold client keys and go with the test;
		// their logs stay for reading after the run.
		logDir, err := os.MkdirTemp("", "kao-bench-pull-agents-")
		if err != nil {
			b.Fatal(err)
		}
		agents := members.AgentOptions{
			Bin:      filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmada-agent"),
			Dir:      b.TempDir(),
			LogDir:   logDir,
			Interval: pullAgentPoll,
			Timeout:  memberBenchWait,
		}

		one := joinPull(b, "single join", kd, clusters, memberClusters[:1], names[:1], 1, agents)
		twenty := joinPull(b, fmt.Sprintf("%d-member join", pullBenchMembers), kd, clusters, memberClusters[1:], names[1:],
			1+pullBenchMembers, agents)

		speedup := float64(pullBenchMembers) * one.took.Seconds() / twenty.took.Seconds()
		b.ReportMetric(one.took.Seconds(), "one-s")
		b.ReportMetric(twenty.took.Seconds(), "twenty-s")
		b.ReportMetric(speedup, "speedup")
		b.ReportMetric(twenty.inStatus.Seconds(), "twenty-status-s")
		b.ReportMetric(twenty.run.Seconds(), "twenty-run-s")
		b.ReportMetric(twenty.lastAgent.Seconds(), "twenty-last-agent-s")
		fmt.Printf("\nPull members joined by one spec change, until Karmada reports their Clusters Ready\n")
		one.print()
		twenty.print()
		fmt.Printf("  speed-up %d × %s / %s = %.2fx, goal %.0fx (%d Ready within %s, two single joins): %s\n",
			pullBenchMembers, one.took.Round(100*time.Millisecond), twenty.took.Round(100*time.Millisecond), speedup,
			pullJoinGoal, pullBenchMembers, (2 * one.took).Round(100*time.Millisecond),
			map[bool]string{true: "met", false: "MISSED"}[speedup >= pullJoinGoal])
		lag := twenty.inStatus - twenty.took
		fmt.Printf("  status.readyMembers behind Karmada by %s, goal %s: %s\n", lag.Round(100*time.Millisecond), statusLagGoal,
			map[bool]string{true: "met", false: "MISSED"}[lag <= statusLagGoal])

		for _, j := range []pullJoinResult{one, twenty} {
			fmt.Printf("\nWhere the %s of %s went (from the spec change; Clusters polled every 200 ms)\n", j.took.Round(100*time.Millisecond), j.what)
			for _, m := range j.marks {
				fmt.Printf("  %7s  %s\n", m.at.Round(100*time.Millisecond), m.what)
			}
			printRunBreakdown(j.what, j.log)
		}
		printTaskTimeline(b, twenty.done, twenty.start)
		saveControllerManagerLog(b, dc, dc.Hosts()[0].Name, twenty.start)
		fmt.Printf("karmada-agent's logs, one per member: %s\n", logDir)
	}
}

// pullJoinResult is one timed Pull join.
type pullJoinResult struct {
	// what names the join in the output.
	what string
	// start is the spec change.
	start time.Time
	// took is until Karmada reported every new Cluster Ready; inStatus
	// until status.readyMembers said every member was; run is the
	// members.yml run's own duration.
	took, inStatus, run time.Duration
	// firstAgent and lastAgent are when the harness's kubelet started the
	// first and the last agent, from the spec change.
	firstAgent, lastAgent time.Duration
	// marks are watchJoin's moments, with the agents' starts.
	marks []mark
	// done is the deployment after the run; log is the run's log.
	done *kaov1.KarmadaDeployment
	log  string
}

// print writes one line of the summary.
func (r pullJoinResult) print() {
	fmt.Printf("  %-16s %8s (status.readyMembers %s; run %s; agents started %s to %s)\n", r.what,
		r.took.Round(100*time.Millisecond), r.inStatus.Round(100*time.Millisecond), r.run.Round(100*time.Millisecond),
		r.firstAgent.Round(100*time.Millisecond), r.lastAgent.Round(100*time.Millisecond))
}

// joinPull, the join called what, adds ms as Pull members named names by
// one spec change while
// the harness plays each member's kubelet, and times it until Karmada
// reports their Clusters Ready and until status.readyMembers says all
// total members are. It fails b when the run fails or an agent cannot be
// started.
func joinPull(b *testing.B, what string, kd *kaov1.KarmadaDeployment, clusters dynamic.NamespaceableResourceInterface,
	ms []*members.Member, names []string, total int, opts members.AgentOptions) pullJoinResult {
	b.Helper()
	agents := make([]*members.DeployedAgent, len(ms))
	for j, m := range ms {
		agents[j] = members.RunAgentWhenDeployed(b, m, opts)
		// watchJoin waits for the Clusters alone: say at once why one
		// will never come.
		go func(a *members.DeployedAgent) {
			if err := a.Err(); err != nil {
				fmt.Printf("karmada-agent not started: %v\n", err)
			}
		}(agents[j])
	}

	b.StartTimer()
	r := pullJoinResult{what: what, start: time.Now()}
	updateSpec(b, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		for _, n := range names {
			s.Members = append(s.Members, kaov1.MemberSpec{Name: n, SyncMode: kaov1.PullSyncMode,
				KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "member-kubeconfigs", Key: n}})
		}
	})
	r.marks = watchJoin(b, kd, clusters, names, r.start, memberBenchWait)
	r.took = time.Since(r.start)
	b.StopTimer()

	// Read as often as watchJoin reads the Clusters, so the lag is not the poll's.
	for want := fmt.Sprintf("%d/%d", total, total); get(b, kd).Status.ReadyMembers != want; time.Sleep(100 * time.Millisecond) {
		if time.Since(r.start) > memberBenchWait {
			b.Fatalf("status.readyMembers is not %s within %s", want, memberBenchWait)
		}
	}
	r.inStatus = time.Since(r.start)
	r.done = waitForRun(b, kd, memberBenchWait)
	if last := r.done.Status.LastRun; last.Result != kaov1.RunSucceeded || last.Playbook != "members.yml" {
		b.Fatalf("the run joining %d Pull members: %+v, want members.yml succeeded", len(names), last)
	}
	r.run = runDuration(b, r.done)
	r.log = lastRunLog(b, r.done)

	r.firstAgent = -1
	for _, a := range agents {
		if err := a.Err(); err != nil {
			b.Fatal(err)
		}
		if want := e2eRegistry + "/karmada/karmada-agent:v1.18.1"; a.Image() != want {
			b.Errorf("%s: karmada-agent's image is %q, want %q", a.Member, a.Image(), want)
		}
		at := a.StartedAt().Sub(r.start)
		if r.firstAgent < 0 || at < r.firstAgent {
			r.firstAgent = at
		}
		r.lastAgent = max(r.lastAgent, at)
	}
	// Among watchJoin's moments (up to all Clusters Ready), in time order;
	// its sums after them stay as they are.
	moments := slices.IndexFunc(r.marks, func(m mark) bool { return m.what == "all Clusters Ready" }) + 1
	r.marks = slices.Insert(r.marks, moments,
		mark{r.firstAgent, "first karmada-agent started (its Deployment and Secret seen in the member)"},
		mark{r.lastAgent, "last karmada-agent started"})
	sort.SliceStable(r.marks[:moments+2], func(x, y int) bool { return r.marks[x].at < r.marks[y].at })
	return r
}
