package docs

import (
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	p := Parse("x.md", strings.Join([]string{
		"# Title",
		"",
		"Text with `make demo` and",
		"a [link](docs/a.md#b) that `wraps",
		"over` lines.",
		"",
		"- item:",
		"",
		"  ```sh runnable",
		"  make help",
		"  ```",
		"",
		"```yaml",
		"kind: X",
		"```",
		"",
		"```",
		"plain text",
		"```",
	}, "\n"))
	if len(p.Blocks) != 3 {
		t.Fatalf("blocks: %+v", p.Blocks)
	}
	if b := p.Blocks[0]; b.Lang != "sh" || !b.Runnable || b.Body != "make help\n" || b.Line != 9 {
		t.Errorf("first block: %+v", b)
	}
	if b := p.Blocks[1]; b.Lang != "yaml" || b.Runnable || b.Body != "kind: X\n" {
		t.Errorf("second block: %+v", b)
	}
	if b := p.Blocks[2]; b.Lang != "" || b.Runnable || b.Body != "plain text\n" {
		t.Errorf("a block without an info string: %+v", b)
	}
	if len(p.Paragraphs) != 3 || p.Paragraphs[1].N != 3 {
		t.Fatalf("paragraphs: %+v", p.Paragraphs)
	}
	if got := CodeSpans(p.Paragraphs[1].Text); !reflect.DeepEqual(got, []string{"make demo", "wraps over"}) {
		t.Errorf("code spans: %q", got)
	}
	if got := Links(p.Paragraphs[1].Text); !reflect.DeepEqual(got, []string{"docs/a.md#b"}) {
		t.Errorf("links: %q", got)
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The manager's flags":                              "the-managers-flags",
		"Faults: what was broken on purpose and what held": "faults-what-was-broken-on-purpose-and-what-held",
		"Status, changes and deletion":                     "status-changes-and-deletion",
		"kao — the Karmada Ansible Operator":               "kao--the-karmada-ansible-operator",
		"`make tools` and KAO_TOOLS_JOBS":                  "make-tools-and-kao_tools_jobs",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
	p := Parse("x.md", "# A\n## A\n## B\n")
	if got := sortedKeys(Anchors(p)); !reflect.DeepEqual(got, []string{"a", "a-1", "b"}) {
		t.Errorf("anchors: %q", got)
	}
}

func TestCommandsAndMakeTargets(t *testing.T) {
	cmds := Commands("sudo make demo    # comment\nmake test GOTESTFLAGS='-count=1 -run X' && make -n lint\nkubectl get kd \\\n  dc1 | grep x\n")
	var targets []string
	for _, c := range cmds {
		targets = append(targets, MakeTargets(c)...)
	}
	if !reflect.DeepEqual(targets, []string{"demo", "test", "lint"}) {
		t.Errorf("targets: %q (commands %q)", targets, cmds)
	}
	if len(cmds) != 5 || !reflect.DeepEqual(cmds[3], []string{"kubectl", "get", "kd", "dc1"}) {
		t.Errorf("commands: %q", cmds)
	}
}

func TestRepoPath(t *testing.T) {
	top := map[string]bool{"config": true, "test": true, "hack": true}
	for word, want := range map[string]string{
		"config/default":        "config/default",
		"./test/e2e/":           "test/e2e",
		"./hack/testhosts":      "hack/testhosts",
		"./test/...":            "test",
		"karmada/<version>/bin": "",
		"_out/artifacts":        "",
		"/etc/hosts":            "",
		"config":                "",
		"--from-file=a=./b":     "",
		"hack/tools/<module>/":  "",
	} {
		got, ok := RepoPath(word, top)
		if got != want || ok != (want != "") {
			t.Errorf("RepoPath(%q) = %q, %v; want %q", word, got, ok, want)
		}
	}
}
