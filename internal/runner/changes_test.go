package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChangesAreReportedWithTheirDiffs runs a playbook on a local host in
// check mode with diffs, for real, in check mode again, and once more
// relayed as a Job's pod relays it: the check run changes nothing and lists
// what the real run then changes, file by file with its diff; a hidden
// task's result, a forgotten key and a secret value never show; a check run
// after the real run lists nothing.
func TestChangesAreReportedWithTheirDiffs(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cr3t-v4lue-0123456789"
	write := func(name, content string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	before := "[Service]\nExecStart=/usr/local/bin/etcd --name=node1\nRestart=always\n"
	write("unit.service", before, 0o644)
	write("config.yaml", "a: b\n", 0o644)
	write("same.flags", "--same\n", 0o644)
	write("token.txt", "value=old\n", 0o600)

	run := func(check bool, relay *bytes.Buffer) *Result {
		t.Helper()
		spec := newSpec(t, "changes.yml")
		if relay != nil {
			spec.Relay = relay
		}
		return runWithDiffs(t, spec, check, dir, secret)
	}
	byItem := func(res *Result) map[string]Change {
		out := map[string]Change{}
		for _, c := range res.Changes {
			if c.Host != "h1" {
				t.Errorf("a change on %s: only h1 runs the play", c.Host)
			}
			key := c.Item
			if c.Hidden {
				key = "hidden:" + c.Task
			}
			out[key] = c
		}
		return out
	}

	var relayed bytes.Buffer
	plan := run(true, &relayed)
	if got, _ := os.ReadFile(filepath.Join(dir, "unit.service")); string(got) != before {
		t.Fatalf("the check run changed unit.service:\n%s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.flags")); err == nil {
		t.Fatal("the check run wrote new.flags")
	}
	changes := byItem(plan)
	t.Logf("changes of the check run: %+v", plan.Changes)
	unit := changes[filepath.Join(dir, "unit.service")]
	if unit.Task != "Changes | Write the unit" || unit.Action != "ansible.builtin.copy" ||
		!strings.Contains(unit.Diff, "-ExecStart=/usr/local/bin/etcd --name=node1\n+ExecStart=/usr/local/bin/etcd --name=node1 --quota-backend-bytes=8589934592") {
		t.Errorf("the unit's change: %+v", unit)
	}
	if strings.Contains(unit.Diff, "Restart=always") && !strings.Contains(unit.Diff, " Restart=always") {
		t.Errorf("context lines must be marked unchanged: %q", unit.Diff)
	}
	if mode := changes[filepath.Join(dir, "config.yaml")]; !strings.Contains(mode.Diff, "mode: 0644 -> 0600") || mode.State != "file" {
		t.Errorf("the mode change (with the state its task asked for): %+v", mode)
	}
	if unit.State != "" {
		t.Errorf("a copy task asks for no state, the unit's change says %q", unit.State)
	}
	if hidden, ok := changes["hidden:Changes | Write the key without showing it"]; !ok || hidden.Item != "" || hidden.Diff != "" {
		t.Errorf("a no_log task's change shows only its task: %+v (found %v)", hidden, ok)
	}
	if forgotten := changes[filepath.Join(dir, "forgotten.key")]; !strings.Contains(forgotten.Diff, "not shown") {
		t.Errorf("a key's content must not show: %+v", forgotten)
	}
	if token := changes[filepath.Join(dir, "token.txt")]; !strings.Contains(token.Diff, "-value=old") || strings.Contains(token.Diff, secret) {
		t.Errorf("a secret value in a diff must be redacted: %+v", token)
	}
	if _, ok := changes[filepath.Join(dir, "new.flags")]; !ok {
		t.Error("the loop item that changes is not listed")
	}
	if _, ok := changes[filepath.Join(dir, "same.flags")]; ok {
		t.Error("the loop item that does not change is listed")
	}
	if len(plan.Changes) != 6 {
		t.Errorf("%d changes, want 6: the unit, the mode, the hidden key, the forgotten key, the token and the new flags", len(plan.Changes))
	}

	// The relayed stream gives the same changes to the operator following it.
	followed, ended, err := Follow(Spec{ID: "test", Dir: filepath.Join(t.TempDir(), "followed"), Playbook: "changes.yml"}, time.Now(), &relayed)
	if err != nil || !ended {
		t.Fatalf("following the relayed run: %v %v", err, ended)
	}
	if len(followed.Changes) != len(plan.Changes) {
		t.Fatalf("followed %d changes, the run had %d", len(followed.Changes), len(plan.Changes))
	}
	for i := range plan.Changes {
		if followed.Changes[i] != plan.Changes[i] {
			t.Errorf("change %d: followed %+v, the run had %+v", i, followed.Changes[i], plan.Changes[i])
		}
	}
	if strings.Contains(relayed.String(), secret) || strings.Contains(relayed.String(), "not-a-real-key") {
		t.Error("the relayed stream holds secret content")
	}

	applied := run(false, nil)
	if len(applied.Changes) != len(plan.Changes) {
		t.Errorf("the real run changed %d things, the check run listed %d", len(applied.Changes), len(plan.Changes))
	}
	if again := run(true, nil); len(again.Changes) != 0 {
		t.Errorf("a check run after the real run lists changes: %+v", again.Changes)
	}
}

// runWithDiffs runs spec with diffs, in check mode or for real, on the
// files in dir, with secret as a value to redact; the run must succeed.
func runWithDiffs(t *testing.T, spec Spec, check bool, dir, secret string) *Result {
	t.Helper()
	spec.Check, spec.Diff = check, true
	spec.ExtraVars = map[string]any{"dir": dir, "secret_value": secret}
	spec.Redact = [][]byte{[]byte(secret)}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("outcome %s: %s\n%s", res.Outcome, res.Message, res.Log)
	}
	return res
}

// TestUnifiedDiff: changed lines with one line of context, "@@" between
// distant changes, a summary for contents too long to diff here.
func TestUnifiedDiff(t *testing.T) {
	long := strings.Repeat("x\n", maxDiffLines+1)
	for _, tc := range []struct {
		name          string
		before, after string
		want          string
	}{
		{"one line changed", "a\nb\nc\n", "a\nB\nc\n", " a\n-b\n+B\n c\n"},
		{"a new file", "", "a\nb\n", "+a\n+b\n"},
		{"two distant changes", "1\n2\n3\n4\n5\n6\n7\n", "0\n2\n3\n4\n5\n6\n8\n", "-1\n+0\n 2\n@@\n 6\n-7\n+8\n"},
		{"the same", "a\n", "a\n", ""},
		{"too long", long, "y\n", "content differs (601 lines before, 1 after)\n"},
	} {
		if got := unifiedDiff(tc.before, tc.after); got != tc.want {
			t.Errorf("%s: got\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

// TestChangesOfManyFilesAtOnce runs kao_files, which converges many files in
// one task, in check mode with diffs and then for real: each changed path is
// a change of its own with its part of the diff; a file only its owner may
// read shows its attributes, never its content; an unchanged file is not
// listed; the check run writes nothing.
func TestChangesOfManyFilesAtOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("kao_files sets root ownership: run the runner's tests as root, as .ci/run does")
	}
	dir := t.TempDir()
	const secret = "s3cr3t-kubeconfig-0123456789"
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"unit.service":         "[Service]\nExecStart=/usr/local/bin/etcd --name=node1\n",
		"same.conf":            "same\n",
		"pki/admin.kubeconfig": "token: old\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	roles, err := filepath.Abs(filepath.Join("..", "..", "roles"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(check bool) *Result {
		t.Helper()
		spec := newSpec(t, "changes_files.yml")
		spec.RolesPath = append(spec.RolesPath, roles)
		return runWithDiffs(t, spec, check, dir, secret)
	}
	plan := run(true)
	t.Logf("changes of the check run: %+v", plan.Changes)
	if got, _ := os.ReadFile(filepath.Join(dir, "unit.service")); !strings.Contains(string(got), "--name=node1\n") || strings.Contains(string(got), "quota") {
		t.Fatalf("the check run changed unit.service:\n%s", got)
	}
	byPath := map[string]Change{}
	for _, c := range plan.Changes {
		byPath[c.Item] = c
		if c.Task != "Changes | Install the certificates and the unit" || c.Action != "kao_files" {
			t.Errorf("a change names its task and module: %+v", c)
		}
	}
	unit := byPath[filepath.Join(dir, "unit.service")]
	if !strings.Contains(unit.Diff, "-ExecStart=/usr/local/bin/etcd --name=node1\n+ExecStart=/usr/local/bin/etcd --name=node1 --quota-backend-bytes=8589934592") {
		t.Errorf("the unit's change shows its content diff: %+v", unit)
	}
	if d := byPath[filepath.Join(dir, "pki")].Diff; !strings.Contains(d, "mode: 0700 -> 0755") {
		t.Errorf("the directory's change shows its mode: %q", d)
	}
	if crt := byPath[filepath.Join(dir, "pki", "server.crt")]; !strings.Contains(crt.Diff, "+new certificate") {
		t.Errorf("a new file others may read shows its content: %+v", crt)
	}
	kc := byPath[filepath.Join(dir, "pki", "admin.kubeconfig")]
	if strings.Contains(kc.Diff, "token") || !strings.Contains(kc.Diff, "mode: 0644 -> 0600") {
		t.Errorf("a file only its owner may read shows its attributes, not its content: %+v", kc)
	}
	if _, ok := byPath[filepath.Join(dir, "same.conf")]; ok || len(plan.Changes) != 4 {
		t.Errorf("%d changes, want 4: the directory, the unit, the certificate and the kubeconfig", len(plan.Changes))
	}
	for _, c := range plan.Changes {
		if strings.Contains(c.Diff, secret) {
			t.Errorf("a diff holds the secret: %+v", c)
		}
	}
	if applied := run(false); len(applied.Changes) != len(plan.Changes) {
		t.Errorf("the real run changed %d paths, the check run listed %d", len(applied.Changes), len(plan.Changes))
	}
	if again := run(true); len(again.Changes) != 0 {
		t.Errorf("a check run after the real run lists changes: %+v", again.Changes)
	}
}

// TestADelegatedChangeIsTheDelegatedHosts runs tasks delegated to other
// hosts in check mode, directly and relayed: a change is the host's the
// task was delegated to (a restart run once and delegated to each host in
// turn is each host's, hidden or not), and a change a host's task made on
// the controller is that host's.
func TestADelegatedChangeIsTheDelegatedHosts(t *testing.T) {
	dir := t.TempDir()
	const secret = "s3cr3t-delegated-0123456789"
	var relayed bytes.Buffer
	spec := newSpec(t, "delegated.yml")
	spec.Relay = &relayed
	plan := runWithDiffs(t, spec, true, dir, secret)
	followed, ended, err := Follow(Spec{ID: "test", Dir: filepath.Join(t.TempDir(), "followed"), Playbook: "delegated.yml"}, time.Now(), &relayed)
	if err != nil || !ended {
		t.Fatalf("following the relayed run: %v %v", err, ended)
	}
	want := map[string]string{
		filepath.Join(dir, "h2.restarted"): "h2",
		filepath.Join(dir, "h1.restarted"): "h1",
		"hidden:":                          "h2",
		filepath.Join(dir, "h1.issued"):    "h1",
		filepath.Join(dir, "h2.issued"):    "h2",
	}
	for name, res := range map[string]*Result{"the run": plan, "the relayed run": followed} {
		t.Logf("changes of %s: %+v", name, res.Changes)
		got := map[string]string{}
		for _, c := range res.Changes {
			key := c.Item
			if c.Hidden {
				key = "hidden:"
			}
			got[key] = c.Host
		}
		if len(got) != len(want) || len(res.Changes) != len(want) {
			t.Errorf("%s: %d changes, want %d", name, len(res.Changes), len(want))
		}
		for item, host := range want {
			if got[item] != host {
				t.Errorf("%s: the change of %s is %q's, want %s's", name, item, got[item], host)
			}
		}
	}
	if names, _ := os.ReadDir(dir); len(names) != 0 {
		t.Errorf("the check run wrote %d files", len(names))
	}
}
