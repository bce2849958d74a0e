package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/runner"
)

// writeRequest writes a run's request as the operator puts it in the run's
// Secret: a playbook of the runner's testdata on two local hosts.
func writeRequest(t *testing.T, playbook string) string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join("..", "..", "internal", "runner", "testdata", playbook))
	if err != nil {
		t.Fatal(err)
	}
	local := map[string]any{"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
	inv, _ := json.Marshal(map[string]any{"all": map[string]any{"hosts": map[string]any{"h1": local, "h2": local}}})
	dir := t.TempDir()
	req, _ := json.Marshal(map[string]any{
		"id": "cmd-test", "dir": filepath.Join(dir, "run"), "playbook": abs, "inventory": inv,
		"groups": map[string][]string{"all": {"h1", "h2"}}, "timeout": int64(5 * time.Minute),
	})
	path := filepath.Join(dir, "request.json")
	if err := os.WriteFile(path, req, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunCommandRelaysTheRunAndExitsWithItsOutcome runs `kao-manager run` as
// a Job's pod does, and follows its output as the operator does.
func TestRunCommandRelaysTheRunAndExitsWithItsOutcome(t *testing.T) {
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		t.Fatal("ansible-playbook is not installed: install Debian's ansible package (.ci/run does)")
	}
	for playbook, want := range map[string]struct {
		code    int
		outcome runner.Outcome
	}{"progress.yml": {0, runner.Succeeded}, "fail.yml": {1, runner.Failed}} {
		var out bytes.Buffer
		code := runCommand([]string{"--request=" + writeRequest(t, playbook)}, &out)
		if code != want.code {
			t.Errorf("%s: exit code %d, want %d\n%s", playbook, code, want.code, out.String())
		}
		res, ended, err := runner.Follow(runner.Spec{ID: "cmd-test", Dir: filepath.Join(t.TempDir(), "followed"), Playbook: playbook}, time.Now(), &out)
		if err != nil || !ended || res.Outcome != want.outcome {
			t.Errorf("%s: following the output gave %v %v %+v", playbook, err, ended, res)
		}
	}
	var out bytes.Buffer
	if code := runCommand([]string{"--request=/nonexistent/request.json"}, &out); code != 3 || !strings.Contains(out.String(), "reading the run's request") {
		t.Errorf("a missing request: exit code %d, output %q", code, out.String())
	}
}
