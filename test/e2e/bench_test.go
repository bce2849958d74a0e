package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
)

// Goals of issue 5 on the 2-core reference machine.
const (
	installGoal = 4 * time.Minute
	noopGoal    = 40 * time.Second
)

// BenchmarkBinaryInstall measures what an SRE waits for, through the
// operator on fresh test hosts: from applying a KarmadaDeployment on empty
// hosts to Ready (every component and etcd member probed healthy), and a
// re-run of the unchanged spec. The baseline in the same run is the
// ansible-playbook run inside each (status.lastRun's start and end): the
// ratio is what the operator adds around Ansible (PKI, Secrets, inventory,
// probes, status). Run it with
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

		start = time.Now()
		again := rerun(b, kd)
		noop := time.Since(start)
		noopRun := runDuration(b, again)
		b.StopTimer()
		if again.Status.LastRun.Result != kaov1.RunSucceeded {
			b.Fatalf("the re-run failed: %+v", again.Status.LastRun)
		}

		b.ReportMetric(install.Seconds(), "install-s")
		b.ReportMetric(install.Seconds()/installRun.Seconds(), "install/playbook")
		b.ReportMetric(noop.Seconds(), "noop-s")
		b.ReportMetric(noop.Seconds()/noopRun.Seconds(), "noop/playbook")
		fmt.Printf("\n%-36s %10s %10s %8s %10s\n", "", "operator", "playbook", "ratio", "goal")
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s\n", "empty hosts to Ready", install.Round(time.Second), installRun.Round(time.Second),
			install.Seconds()/installRun.Seconds(), installGoal, verdict(install, installGoal))
		fmt.Printf("%-36s %10s %10s %8.2f %10s %s\n", "no-op re-run", noop.Round(time.Second), noopRun.Round(time.Second),
			noop.Seconds()/noopRun.Seconds(), noopGoal, verdict(noop, noopGoal))
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
