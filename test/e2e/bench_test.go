package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
)

// Goals of issue 5 on the 2-core reference machine, and issue 28's for the
// install's playbook run.
const (
	installGoal    = 4 * time.Minute
	noopGoal       = 40 * time.Second
	installRunGoal = time.Minute
	// driftCheckGoal is issue 27's: a drift check of an unchanged 3-host HA
	// control plane.
	driftCheckGoal = 15 * time.Second
)

// BenchmarkBinaryInstall measures what an SRE waits for, through the
// operator on fresh test hosts: from applying a KarmadaDeployment on empty
// hosts to Ready (every component and etcd member probed healthy), and a
// re-run of the unchanged spec. The baseline in the same run is the
// ansible-playbook run inside each (status.lastRun's start and end): the
// ratio is what the operator adds around Ansible (PKI, Secrets, inventory,
// probes, status). Last, drift checks are turned on: the first check of
// the unchanged hosts is timed against the no-op re-run's playbook. Run it
// with
//
//	go test ./test/e2e/ -run '^$' -bench BinaryInstall -benchtime 1x -timeout 30m
func BenchmarkBinaryInstall(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dc := hosts.Start(b, 3)
		ns := newNamespace(b)
		startOperator(b, ns)
		createSSHSecret(b, ns, "dc-ssh", dc)
		kd := binaryDeployment(ns, "bench", "dc-ssh", dc.Hosts())
		b.StartTimer()

		start := time.Now()
		if err := k8s.Create(context.Background(), kd); err != nil {
			b.Fatal(err)
		}
		ready := waitForCondition(b, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 10*time.Minute)
		install := time.Since(start)
		installRun := runDuration(b, ready)

		installLog := lastRunLog(b, ready)

		start = time.Now()
		again := rerun(b, kd)
		noop := time.Since(start)
		noopRun := runDuration(b, again)
		b.StopTimer()
		if again.Status.LastRun.Result != kaov1.RunSucceeded {
			b.Fatalf("the re-run failed: %+v", again.Status.LastRun)
		}
		check := timeDriftCheck(b, kd)

		b.ReportMetric(install.Seconds(), "install-s")
		b.ReportMetric(install.Seconds()/installRun.Seconds(), "install/playbook")
		b.ReportMetric(noop.Seconds(), "noop-s")
		b.ReportMetric(noop.Seconds()/noopRun.Seconds(), "noop/playbook")
		fmt.Printf("\n%-36s %10s %10s %8s %10s\n", "", "operator", "playbook", "ratio", "goal")
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s\n", "empty hosts to Ready", install.Round(time.Second), installRun.Round(time.Second),
			install.Seconds()/installRun.Seconds(), installGoal, verdict(install, installGoal))
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s\n", "no-op re-run", noop.Round(time.Second), noopRun.Round(time.Second),
			noop.Seconds()/noopRun.Seconds(), noopGoal, verdict(noop, noopGoal))
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s\n", "the install's playbook run", "", installRun.Round(time.Second),
			installRun.Seconds()/noopRun.Seconds(), installRunGoal, verdict(installRun, installRunGoal))
		b.ReportMetric(check.Seconds(), "driftcheck-s")
		b.ReportMetric(check.Seconds()/noopRun.Seconds(), "driftcheck/noop")
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s  (ratio: to the no-op re-run's playbook)\n", "drift check of the unchanged hosts", check.Round(100*time.Millisecond),
			noopRun.Round(time.Second), check.Seconds()/noopRun.Seconds(), driftCheckGoal, verdict(check, driftCheckGoal))
		printRunBreakdown("install", installLog)
		printRunBreakdown("no-op re-run", lastRunLog(b, again))
	}
}

// timeDriftCheck turns drift checks on (every minute; the spec change runs
// the install once more, changing nothing) and times the first check, from
// its start in status.progress to its end in status.drift, which must find
// the hosts in sync.
func timeDriftCheck(b *testing.B, kd *kaov1.KarmadaDeployment) time.Duration {
	b.Helper()
	updateSpec(b, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.DriftCheck = &kaov1.DriftCheckSpec{Interval: metav1.Duration{Duration: time.Minute}}
	})
	if r := waitForRun(b, kd, 5*time.Minute).Status.LastRun; r.Result != kaov1.RunSucceeded {
		b.Fatalf("the run that turned drift checks on failed: %+v", r)
	}
	var started *kaov1.RunProgress
	deadline := time.Now().Add(5 * time.Minute)
	for {
		cur := get(b, kd)
		if p := cur.Status.Progress; p != nil && p.Check {
			started = p
		}
		if d := cur.Status.Drift; started != nil && d != nil && d.RunID == started.RunID {
			if d.Result != kaov1.DriftInSync {
				b.Fatalf("the check of unchanged hosts found: %+v", d)
			}
			return d.CheckTime.Sub(started.StartTime.Time)
		}
		if time.Now().After(deadline) {
			b.Fatalf("no drift check within 5 minutes: %+v", cur.Status.Drift)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// breakdownTasks is how many of the slowest tasks a breakdown lists.
const breakdownTasks = 12

// printRunBreakdown prints where a run's time went, from its log: each
// play's duration, and the tasks that took longest. A task's time is the
// time from the line before its first result to its last result: what it
// kept the run waiting (its hosts run it in parallel).
func printRunBreakdown(what, log string) {
	lines := stampedLines(log)
	if len(lines) < 2 {
		fmt.Printf("\n%s: no time-stamped lines in its log\n", what)
		return
	}
	type span struct {
		name string
		took time.Duration
	}
	var plays []span
	tasks := map[string]time.Duration{}
	for i := 1; i < len(lines); i++ {
		l, gap := lines[i], lines[i].at.Sub(lines[i-1].at)
		fields := strings.Fields(l.rest)
		switch {
		case len(fields) == 0:
			continue
		case fields[0] == "play":
			plays = append(plays, span{name: strings.TrimSpace(strings.TrimPrefix(l.rest, "play"))})
			continue
		case len(plays) > 0:
			plays[len(plays)-1].took += gap
		}
		if len(fields) >= 3 && slices.Contains([]string{"ok", "changed", "skipped", "failed", "unreachable"}, fields[0]) {
			task := strings.Join(fields[2:], " ")
			task, _, _ = strings.Cut(task, " -- ")
			tasks[task] += gap
		}
	}
	total := lines[len(lines)-1].at.Sub(lines[0].at)
	fmt.Printf("\nWhere the %s run's %s went, by play\n", what, total.Round(100*time.Millisecond))
	for _, p := range plays {
		fmt.Printf("  %7s  %s\n", p.took.Round(100*time.Millisecond), truncate(p.name, 120))
	}
	slowest := make([]span, 0, len(tasks))
	for name, took := range tasks {
		slowest = append(slowest, span{name, took})
	}
	sort.Slice(slowest, func(i, j int) bool { return slowest[i].took > slowest[j].took })
	fmt.Printf("The %d slowest tasks\n", min(breakdownTasks, len(slowest)))
	for _, t := range slowest[:min(breakdownTasks, len(slowest))] {
		fmt.Printf("  %7s  %s\n", t.took.Round(100*time.Millisecond), truncate(t.name, 120))
	}
}

// runDuration is how long the last ansible-playbook run took.
func runDuration(b testing.TB, kd *kaov1.KarmadaDeployment) time.Duration {
	b.Helper()
	r := kd.Status.LastRun
	if r == nil || r.EndTime.IsZero() {
		b.Fatalf("no finished run in status: %+v", r)
	}
	return r.EndTime.Sub(r.StartTime.Time)
}

func verdict(got, goal time.Duration) string {
	if got <= goal {
		return "met"
	}
	return "MISSED"
}
