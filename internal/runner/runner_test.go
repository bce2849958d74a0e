package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// localInventory returns an inventory of hosts that Ansible runs on this
// machine (connection local), and its groups.
func localInventory(hosts ...string) ([]byte, map[string][]string) {
	hv := map[string]any{}
	for _, h := range hosts {
		hv[h] = map[string]any{
			"ansible_connection":         "local",
			"ansible_python_interpreter": "{{ ansible_playbook_python }}",
		}
	}
	inv, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": hv}})
	return inv, map[string][]string{"all": hosts}
}

func testdata(name string) string {
	abs, _ := filepath.Abs(filepath.Join("testdata", name))
	return abs
}

// newSpec returns a spec for a playbook in testdata run on local hosts h1 and h2.
func newSpec(t *testing.T, playbook string) Spec {
	t.Helper()
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		t.Fatal("ansible-playbook is not installed: install Debian's ansible package (.ci/run does)")
	}
	inv, groups := localInventory("h1", "h2")
	base := t.TempDir()
	return Spec{
		ID:        "test",
		Dir:       filepath.Join(base, "run"),
		Playbook:  testdata(playbook),
		Inventory: inv,
		Groups:    groups,
		RolesPath: []string{testdata("roles")},
	}
}

func TestProgressMovesAndReachesTheEnd(t *testing.T) {
	spec := newSpec(t, "progress.yml")
	var mu sync.Mutex
	seen := []Progress{}
	spec.OnProgress = func(p Progress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("outcome %s: %s\n%s", res.Outcome, res.Message, res.Log)
	}
	if len(seen) < 10 {
		t.Fatalf("progress was reported %d times, want one report per task result", len(seen))
	}
	first := seen[0]
	if first.TasksTotal == 0 {
		t.Fatal("the first progress report has no total: the estimate must be known before the run starts")
	}
	// The estimate must be exact for a playbook without failures.
	last := seen[len(seen)-1]
	if last.TasksDone != first.TasksTotal {
		t.Errorf("estimated %d task results, the run produced %d", first.TasksTotal, last.TasksDone)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i].TasksDone < seen[i-1].TasksDone || seen[i].Percent() < seen[i-1].Percent() {
			t.Fatalf("progress went backwards: %+v then %+v", seen[i-1], seen[i])
		}
	}
	if p := res.Progress; p.TasksDone != p.TasksTotal || p.TasksTotal == 0 {
		t.Errorf("a finished run must end at 100%%, got %d/%d", p.TasksDone, p.TasksTotal)
	}
	if got := res.Hosts["h1"]; got.OK == 0 || got.Changed == 0 || got.Skipped == 0 {
		t.Errorf("stats for h1 lack ok/changed/skipped counts: %+v", got)
	}
	if !strings.Contains(string(res.Log), "Greeter | Say hello") {
		t.Errorf("the log lacks task names:\n%s", res.Log)
	}
}

func TestFailedTaskIsReportedWithHostAndTask(t *testing.T) {
	res, err := Run(context.Background(), newSpec(t, "fail.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed {
		t.Fatalf("outcome %s, want Failed", res.Outcome)
	}
	if res.ExitCode != 2 {
		t.Errorf("exit code %d, want 2 (a failed task)", res.ExitCode)
	}
	if len(res.FailedTasks) != 1 {
		t.Fatalf("want exactly the one real failure (the ignored one must not count), got %+v", res.FailedTasks)
	}
	f := res.FailedTasks[0]
	if f.Host != "h2" || f.Task != "Fail | Break on h2" || !strings.Contains(f.Message, "disk full") || !strings.Contains(f.Message, "rc=3") {
		t.Errorf("failed task lacks its host, task or message: %+v", f)
	}
	if !strings.Contains(res.Message, `task "Fail | Break on h2" on h2`) {
		t.Errorf("message does not name the task and host: %s", res.Message)
	}
	if res.Hosts["h1"].Failures != 0 || res.Hosts["h2"].Failures != 1 || res.Hosts["h1"].Ignored != 1 {
		t.Errorf("stats are wrong: %+v", res.Hosts)
	}
	if f.Role != "" {
		t.Errorf("a play's own task is counted under role %q", f.Role)
	}
}

// TestAFailedTaskNamesItsRole checks that a failure in a role names the
// role, which the metrics of failed tasks are labelled with.
func TestAFailedTaskNamesItsRole(t *testing.T) {
	res, err := Run(context.Background(), newSpec(t, "role-fail.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FailedTasks) != 1 {
		t.Fatalf("want one failure, got %s %+v", res.Outcome, res.FailedTasks)
	}
	if f := res.FailedTasks[0]; f.Host != "h1" || f.Role != "breaker" || f.Task != "breaker : Breaker | Fail on h1" {
		t.Errorf("the failure does not name its role: %+v", f)
	}
}

func TestCustomStatsAndThePlayOfAFailureAreReported(t *testing.T) {
	res, err := Run(context.Background(), newSpec(t, "stats.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || len(res.FailedTasks) != 1 {
		t.Fatalf("want a failed run with one failure, got %s %+v", res.Outcome, res.FailedTasks)
	}
	if f := res.FailedTasks[0]; f.Host != "h2" || f.Play != "Stats | Report again, then fail on h2" {
		t.Errorf("the failure does not name its play: %+v", f)
	}
	for _, h := range []string{"h1", "h2"} {
		got := struct {
			Versions map[string]string `json:"kao_versions"`
		}{}
		if err := json.Unmarshal(res.CustomStats[h], &got); err != nil {
			t.Fatalf("custom stats of %s: %v (%s)", h, err, res.CustomStats[h])
		}
		if got.Versions["a"] != "v1.0.0-"+h || got.Versions["b"] != "v0.2.0" {
			t.Errorf("custom stats of %s: %+v, want a from the first report and b from the second", h, got.Versions)
		}
	}
}

func TestUnreachableHostIsReportedFromTheStats(t *testing.T) {
	spec := newSpec(t, "progress.yml")
	// Nothing listens on loopback port 1, so SSH is refused at once.
	inv, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": map[string]any{
		"h1": map[string]any{"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "root"},
	}}})
	spec.Inventory, spec.Groups = inv, map[string][]string{"all": {"h1"}}
	spec.SSHPrivateKey = []byte("not a key, never used: the connection is refused first\n")
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || res.Hosts["h1"].Unreachable == 0 {
		t.Fatalf("want Failed with h1 unreachable, got %s %+v", res.Outcome, res.Hosts)
	}
	if res.ExitCode != 4 {
		t.Errorf("exit code %d, want 4", res.ExitCode)
	}
	if !strings.HasPrefix(res.Message, "unreachable: h1") || len(res.FailedTasks) != 1 || !res.FailedTasks[0].Unreachable {
		t.Errorf("the result does not say h1 was unreachable: %s %+v", res.Message, res.FailedTasks)
	}
}

func TestSyntaxErrorIsExplained(t *testing.T) {
	res, err := Run(context.Background(), newSpec(t, "syntax.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || !strings.Contains(res.Message, "ansible-playbook could not run: ERROR!") {
		t.Fatalf("want the ERROR! line from stderr in the message, got %s: %q", res.Outcome, res.Message)
	}
}

func TestHugeEventDoesNotStall(t *testing.T) {
	spec := newSpec(t, "big.yml")
	spec.Timeout = 2 * time.Minute
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded || res.Progress.TasksDone != 4 {
		t.Fatalf("want both tasks done on both hosts after a 200 KB event, got %s %d/%d: %s", res.Outcome,
			res.Progress.TasksDone, res.Progress.TasksTotal, res.Message)
	}
}

// processesWithArg lists the PIDs of processes whose command line has arg.
func processesWithArg(arg string) []int {
	pids := []int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cmdline), arg) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestCancelKillsTheWholeProcessTree(t *testing.T) {
	spec := newSpec(t, "sleep.yml")
	// A duration no other process on the machine uses, to find the children by.
	marker := fmt.Sprintf("%d.%d", 600+os.Getpid()%100, time.Now().Nanosecond()%1000)
	spec.ExtraVars = map[string]any{"kao_sleep_seconds": marker}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	spec.OnProgress = nil
	go func() {
		for ctx.Err() == nil {
			if len(processesWithArg("sleep\x00"+marker)) > 0 {
				once.Do(func() { close(started) })
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	go func() {
		select {
		case <-started:
		case <-time.After(60 * time.Second):
		}
		cancel()
	}()
	begin := time.Now()
	res, err := Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	default:
		t.Fatal("the sleeping children never started")
	}
	if res.Outcome != Cancelled {
		t.Fatalf("outcome %s, want Cancelled: %s", res.Outcome, res.Message)
	}
	if d := time.Since(begin); d > 45*time.Second {
		t.Errorf("cancel took %s", d)
	}
	if left := processesWithArg("sleep\x00" + marker); len(left) > 0 {
		t.Fatalf("processes survived the cancel: %v", left)
	}
}

func TestNoSecretReachesResultLogOrRunDirectory(t *testing.T) {
	spec := newSpec(t, "secret.yml")
	secret := "tok-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-very-secret-value"
	key := []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n")
	spec.Secrets = []File{{Path: "token", Data: []byte(secret)}}
	spec.SSHPrivateKey = key
	spec.Redact = [][]byte{[]byte(secret)}
	spec.ExtraVars = map[string]any{"kao_secret_file": filepath.Join(spec.Dir, SecretsDir, "token")}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || len(res.FailedTasks) == 0 || !strings.Contains(res.FailedTasks[0].Message, "bad token "+Redacted) {
		t.Fatalf("want the failure with its secret redacted, got %s %+v", res.Outcome, res.FailedTasks)
	}
	found := []string{}
	check := func(where string, data []byte) {
		for _, s := range []string{secret, "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"} {
			if strings.Contains(string(data), s) {
				found = append(found, where)
			}
		}
	}
	check("message", []byte(res.Message))
	check("log", res.Log)
	for _, f := range res.FailedTasks {
		check("failed task", []byte(f.Message))
	}
	_ = filepath.Walk(spec.Dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			check(path, data)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("secret material found in: %v", found)
	}
	if _, err := os.Stat(filepath.Join(spec.Dir, SecretsDir)); !os.IsNotExist(err) {
		t.Errorf("the secrets directory must be removed after the run: %v", err)
	}
}

func TestRunDirectoryIsPrivateAndConfigured(t *testing.T) {
	spec := newSpec(t, "progress.yml")
	spec.ExtraVars = map[string]any{"kao_example": "value"}
	var cfg, extra []byte
	var dirMode, extraMode os.FileMode
	spec.OnProgress = func(Progress) {
		if cfg != nil {
			return
		}
		cfg, _ = os.ReadFile(filepath.Join(spec.Dir, "ansible.cfg"))
		extra, _ = os.ReadFile(filepath.Join(spec.Dir, "extravars.json"))
		if st, err := os.Stat(spec.Dir); err == nil {
			dirMode = st.Mode().Perm()
		}
		if st, err := os.Stat(filepath.Join(spec.Dir, "extravars.json")); err == nil {
			extraMode = st.Mode().Perm()
		}
	}
	if _, err := Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if dirMode != 0o700 || extraMode != 0o600 {
		t.Errorf("run directory mode %o, extra vars mode %o; want 700 and 600", dirMode, extraMode)
	}
	for _, want := range []string{"host_key_checking = True", "StrictHostKeyChecking=yes", "pipelining = True", "internal_poll_interval = 0.01",
		"ControlPersist=60s", "control_path_dir = /tmp/kao-cp-", "forks = 2", "callbacks_enabled = kao_jinja_cache"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("ansible.cfg lacks %q:\n%s", want, cfg)
		}
	}
	if !strings.Contains(string(extra), `"kao_example":"value"`) {
		t.Errorf("extra vars file lacks the variable: %s", extra)
	}
}

// TestGeneratedPlaybookAndRolesInTheRunDirectory runs a playbook written into
// the run directory (Spec.Files) that imports an existing playbook by its
// absolute path and runs a role from the run directory: the estimate counts
// both, and the files stay with the run while refused paths never get there.
func TestGeneratedPlaybookAndRolesInTheRunDirectory(t *testing.T) {
	spec := newSpec(t, "progress.yml")
	spec.Playbook = filepath.Join(spec.Dir, "playbook", "site.yml")
	spec.RolesPath = append(spec.RolesPath, filepath.Join(spec.Dir, "extra-roles"))
	spec.Files = []File{
		{Path: "playbook/site.yml", Data: []byte("- ansible.builtin.import_playbook: " + testdata("progress.yml") +
			"\n- name: Extra\n  hosts: h1\n  gather_facts: false\n  roles:\n    - role: extra\n")},
		{Path: "extra-roles/extra/tasks/main.yml", Data: []byte("- name: Extra | Say hello\n  ansible.builtin.debug:\n    msg: extra\n")},
	}
	base := newSpec(t, "progress.yml")
	want, err := EstimateResults(base.Playbook, base.RolesPath, base.Groups, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("the run failed: %+v", res)
	}
	if res.Progress.TasksTotal != want+1 || res.Progress.TasksDone != res.Progress.TasksTotal {
		t.Errorf("progress %d/%d, want %d/%d: the imported playbook and the extra role both count",
			res.Progress.TasksDone, res.Progress.TasksTotal, want+1, want+1)
	}
	if s := res.Hosts["h1"]; s.OK == 0 || res.Hosts["h1"].OK != res.Hosts["h2"].OK+1 {
		t.Errorf("the extra role did not run on h1 alone: %+v", res.Hosts)
	}
	if st, err := os.Stat(filepath.Join(spec.Dir, "extra-roles", "extra", "tasks", "main.yml")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the role file is not kept private in the run directory: %v", err)
	}

	for _, bad := range []string{"../escape.yml", "/abs.yml", "secrets/x", "ansible.cfg", "a/../b", ""} {
		s := newSpec(t, "progress.yml")
		s.Files = []File{{Path: bad, Data: []byte("x")}}
		if _, err := Run(context.Background(), s); err == nil {
			t.Errorf("run file %q was accepted", bad)
		}
		if _, err := os.Stat(s.Dir); err == nil {
			t.Errorf("run file %q: the run directory was created", bad)
		}
	}
}

func TestLiveGroupMembersIgnoresZombies(t *testing.T) {
	c := exec.Command("sleep", "300")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := c.Process.Pid
	if n := liveGroupMembers(pgid); n != 1 {
		t.Fatalf("a running sleep in its own group: %d live members, want 1", n)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: the killed sleep stays a zombie until Wait below, and a
	// zombie no longer runs.
	awaitGroupGone(pgid, 10*time.Second)
	if n := liveGroupMembers(pgid); n != 0 {
		t.Errorf("after SIGKILL: %d live members, want 0", n)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pgid))); err != nil {
		t.Errorf("the killed sleep should still be an unreaped zombie here: %v", err)
	}
	_ = c.Wait()
}

// TestTagsRunOnlyTheirPlays runs a playbook with Tags: the tagged play and
// the one tagged always run, the untagged one does not, and the progress
// estimate counts exactly what ran.
func TestTagsRunOnlyTheirPlays(t *testing.T) {
	spec := newSpec(t, "tagged.yml")
	spec.Tags = []string{"hosts"}
	var (
		mu   sync.Mutex
		last Progress
	)
	spec.OnProgress = func(p Progress) {
		mu.Lock()
		last = p
		mu.Unlock()
	}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("outcome %s: %s\n%s", res.Outcome, res.Message, res.Log)
	}
	log := string(res.Log)
	for _, task := range []string{"Tagged | First host task", "Tagged | Second host task", "Tagged | Included host task", "Tagged | Always task"} {
		if !strings.Contains(log, task) {
			t.Errorf("%q did not run:\n%s", task, log)
		}
	}
	if strings.Contains(log, "Tagged | Untagged task") {
		t.Errorf("the untagged play ran:\n%s", log)
	}
	mu.Lock()
	defer mu.Unlock()
	// Three tasks, the include and the task it includes, on two hosts.
	if want := 5 * 2; last.TasksTotal != want || last.TasksDone != want {
		t.Errorf("progress %d/%d, want %d/%d", last.TasksDone, last.TasksTotal, want, want)
	}
}
