package runner

import (
	"bytes"
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

// BenchmarkControllerCPU runs a playbook whose three local hosts spend their
// time in their tasks (each sleeps), as a run's hosts do, under Ansible's
// default internal_poll_interval (1 ms) and under the ansible.cfg kao
// writes (10 ms, every other setting the same), alternating, and reports the ratio of the CPU time the runs cost
// (ansible-playbook and its workers and modules): kao's over the default.
//
//	go test -run '^$' -bench ControllerCPU -benchtime 3x ./internal/runner/
func BenchmarkControllerCPU(b *testing.B) {
	base, err := os.MkdirTemp("/tmp", "kao-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(base) }()
	var pb strings.Builder
	pb.WriteString("- name: Waiting hosts\n  hosts: all\n  gather_facts: false\n  tasks:\n")
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&pb, "    - name: Bench | Wait %d\n      ansible.builtin.command: sleep 2\n      changed_when: false\n", i)
	}
	pbPath := filepath.Join(base, "wait.yml")
	inv, groups := localInventory("h1", "h2", "h3")
	invPath := filepath.Join(base, "hosts.json")
	kaoCfg := filepath.Join(base, "kao.cfg")
	// The baseline is kao's ansible.cfg with Ansible's default interval.
	cfg := ansibleConfig(&Spec{ID: "bench", Groups: groups}, "", filepath.Join(base, "known_hosts"), base)
	if !bytes.Contains(cfg, []byte("internal_poll_interval = "+internalPollInterval)) {
		b.Fatalf("ansible.cfg does not set internal_poll_interval:\n%s", cfg)
	}
	defaultCfg := filepath.Join(base, "default.cfg")
	for path, data := range map[string][]byte{
		pbPath: []byte(pb.String()), invPath: inv,
		kaoCfg:     cfg,
		defaultCfg: bytes.Replace(cfg, []byte("internal_poll_interval = "+internalPollInterval), []byte("internal_poll_interval = 0.001"), 1),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	var withDefault, withKao time.Duration
	for i := 0; i < b.N; i++ {
		withDefault += playbookCPU(b, invPath, pbPath, "ANSIBLE_CONFIG="+defaultCfg)
		withKao += playbookCPU(b, invPath, pbPath, "ANSIBLE_CONFIG="+kaoCfg)
	}
	ratio := float64(withKao) / float64(withDefault)
	b.ReportMetric(ratio, "kao/default-cpu")
	fmt.Printf("CPU of a run whose hosts wait 10 s: Ansible's default %.2fs/run, kao's ansible.cfg %.2fs/run, ratio %.2f\n",
		withDefault.Seconds()/float64(b.N), withKao.Seconds()/float64(b.N), ratio)
}

// BenchmarkJinjaCache runs a playbook shaped like a kao role, on three local
// hosts: role variables built from other variables, read by many tasks.
// It runs under the ansible.cfg kao writes, with kao_jinja_cache given a
// cache directory and without one (then the plugin does nothing),
// alternating, and reports the ratio of the CPU time the runs cost: cached
// over uncached.
//
//	go test -run '^$' -bench JinjaCache -benchtime 3x ./internal/runner/
func BenchmarkJinjaCache(b *testing.B) {
	base, err := os.MkdirTemp("/tmp", "kao-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(base) }()
	var pb strings.Builder
	pb.WriteString("- name: Role-shaped play\n  hosts: all\n  gather_facts: false\n  vars:\n")
	pb.WriteString("    bench_0: \"{{ inventory_hostname }}\"\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&pb, "    bench_%d: \"{{ [bench_%d, '%d'] | join('-') | regex_replace('^x', 'y') }}\"\n", i, i-1, i)
	}
	pb.WriteString("    bench_flags: \"{{ {'a': bench_29, 'b': bench_15, 'c': bench_7} | dict2items | map(attribute='value') | list }}\"\n  tasks:\n")
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&pb, "    - name: Bench | Task %d\n      ansible.builtin.set_fact:\n        bench_out_%d: \"{{ bench_flags | length }} {{ bench_%d }}\"\n", i, i, i%30)
	}
	pbPath := filepath.Join(base, "role.yml")
	inv, groups := localInventory("h1", "h2", "h3")
	invPath := filepath.Join(base, "hosts.json")
	spec := &Spec{ID: "bench", Dir: filepath.Join(base, "run"), Groups: groups}
	cfg := ansibleConfig(spec, "", filepath.Join(base, "known_hosts"), base)
	enable := []byte("callbacks_enabled = " + jinjaCacheCallback + "\n")
	if !bytes.Contains(cfg, enable) {
		b.Fatalf("ansible.cfg does not enable %s:\n%s", jinjaCacheCallback, cfg)
	}
	cfgPath := filepath.Join(base, "ansible.cfg")
	for path, data := range map[string][]byte{
		pbPath: []byte(pb.String()), invPath: inv, cfgPath: cfg,
		filepath.Join(spec.Dir, pluginsDir, "callback", jinjaCachePlugin): jinjaCacheSource,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	var uncached, cached time.Duration
	for i := 0; i < b.N; i++ {
		uncached += playbookCPU(b, invPath, pbPath, "ANSIBLE_CONFIG="+cfgPath)
		// Each run starts with an empty cache, as each of kao's runs does.
		cache, err := os.MkdirTemp(base, "cache-")
		if err != nil {
			b.Fatal(err)
		}
		cached += playbookCPU(b, invPath, pbPath, "ANSIBLE_CONFIG="+cfgPath, JinjaCacheEnv+"="+cache)
	}
	ratio := float64(cached) / float64(uncached)
	b.ReportMetric(ratio, "cached/uncached-cpu")
	fmt.Printf("CPU of a role-shaped run on 3 hosts: without kao_jinja_cache %.2fs/run, with it %.2fs/run, ratio %.2f\n",
		uncached.Seconds()/float64(b.N), cached.Seconds()/float64(b.N), ratio)
}

// playbookCPU runs ansible-playbook on a playbook and an inventory with env
// added to this process's environment, and returns the CPU time it cost:
// its own and that of the workers and modules it waited for.
func playbookCPU(b *testing.B, inv, pb string, env ...string) time.Duration {
	b.Helper()
	cmd := exec.Command("ansible-playbook", "-i", inv, pb)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("ansible-playbook: %v\n%s", err, out)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}
