package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchTasks is the size of the benchmark playbook.
const benchTasks = 200

// writeBenchPlaybook writes a local playbook of benchTasks quick tasks.
func writeBenchPlaybook(dir string) (string, error) {
	var b strings.Builder
	b.WriteString("- name: Benchmark\n  hosts: all\n  gather_facts: false\n  tasks:\n")
	for i := 0; i < benchTasks; i++ {
		fmt.Fprintf(&b, "    - name: Bench | Task %d\n      ansible.builtin.debug:\n        msg: %d\n", i, i)
	}
	path := filepath.Join(dir, "bench.yml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// BenchmarkRunnerOverhead runs a 200-task local playbook through the runner and
// through ansible-playbook directly, alternating, and reports the wall-time
// ratio runner/direct (goal: at most 1.05).
//
//	go test -run '^$' -bench RunnerOverhead -benchtime 3x ./internal/runner/
func BenchmarkRunnerOverhead(b *testing.B) {
	base, err := os.MkdirTemp("/tmp", "kao-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(base) }()
	pb, err := writeBenchPlaybook(base)
	if err != nil {
		b.Fatal(err)
	}
	inv, groups := localInventory("h1")
	invPath := filepath.Join(base, "hosts.json")
	if err := os.WriteFile(invPath, inv, 0o600); err != nil {
		b.Fatal(err)
	}
	var direct, viaRunner time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cmd := exec.Command("ansible-playbook", "-i", invPath, pb)
		cmd.Env = append(os.Environ(), "ANSIBLE_GATHERING=explicit", "ANSIBLE_PIPELINING=True", "ANSIBLE_HOST_KEY_CHECKING=True")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ansible-playbook: %v\n%s", err, out)
		}
		direct += time.Since(start)

		start = time.Now()
		res, err := Run(context.Background(), Spec{
			ID: fmt.Sprintf("bench-%d", i), Dir: filepath.Join(base, fmt.Sprintf("run-%d", i)),
			Playbook: pb, Inventory: inv, Groups: groups,
		})
		if err != nil {
			b.Fatal(err)
		}
		if res.Outcome != Succeeded || res.Progress.TasksDone != benchTasks {
			b.Fatalf("runner: %s %d/%d: %s", res.Outcome, res.Progress.TasksDone, res.Progress.TasksTotal, res.Message)
		}
		viaRunner += time.Since(start)
	}
	ratio := float64(viaRunner) / float64(direct)
	b.ReportMetric(ratio, "runner/direct")
	b.ReportMetric(direct.Seconds()/float64(b.N), "direct-s/run")
	b.ReportMetric(viaRunner.Seconds()/float64(b.N), "runner-s/run")
	fmt.Printf("runner overhead: direct %.2fs/run, runner %.2fs/run, ratio %.3f (goal <= 1.05)\n",
		direct.Seconds()/float64(b.N), viaRunner.Seconds()/float64(b.N), ratio)
}
