package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestJinjaCacheRendersWhatAnsibleRenders runs a playbook that renders the
// same templates in many tasks, with Jinja's delimiters and with others set
// by a template's header, through the runner (kao_jinja_cache on) and
// through ansible-playbook with no cache, and compares every file rendered
// but each host's random number, which must differ between the hosts.
// The cache must be in use during the run and gone after it.
func TestJinjaCacheRendersWhatAnsibleRenders(t *testing.T) {
	spec := newSpec(t, "jinjacache/render.yml")
	cached, plain := t.TempDir(), t.TempDir()
	spec.ExtraVars = map[string]any{"out_dir": cached}
	cacheDir := filepath.Join(spec.Dir, JinjaCacheDir)
	var mu sync.Mutex
	entries := 0
	spec.OnProgress = func(Progress) {
		des, _ := os.ReadDir(cacheDir)
		mu.Lock()
		entries = max(entries, len(des))
		mu.Unlock()
	}
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("the run with the cache failed: %s\n%s", res.Message, res.Log)
	}
	if entries == 0 {
		t.Errorf("no compiled template reached %s during the run: kao_jinja_cache did not load\n%s", cacheDir, res.Log)
	}
	if _, err := os.Stat(cacheDir); !os.IsNotExist(err) {
		t.Errorf("the cache must be removed after the run: %v", err)
	}

	// The same playbook and inventory, without kao's ansible.cfg.
	dir := t.TempDir()
	inv := filepath.Join(dir, "hosts.json")
	cfg := filepath.Join(dir, "ansible.cfg")
	if err := os.WriteFile(inv, spec.Inventory, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("[defaults]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ansible-playbook", "-i", inv, "-e", "out_dir="+plain, spec.Playbook)
	cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+cfg, "ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ansible-playbook without the cache: %v\n%s", err, out)
	}

	files, err := os.ReadDir(plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 8 {
		t.Fatalf("the run without the cache wrote %d files, want 4 for each of 2 hosts", len(files))
	}
	for _, f := range files {
		if filepath.Ext(f.Name()) == ".random" {
			continue
		}
		want, err := os.ReadFile(filepath.Join(plain, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(cached, f.Name()))
		if err != nil {
			t.Errorf("the run with the cache did not write %s: %v", f.Name(), err)
			continue
		}
		if string(got) != string(want) {
			t.Errorf("%s differs with the cache:\n%s\nwithout it:\n%s", f.Name(), got, want)
		}
	}
	// The two templates have the same text after the header: each was
	// rendered with its own delimiters.
	for name, want := range map[string]string{"h1.header": "h1-base {{ base }}\n", "h1.plain": "[% base %] h1-base\n"} {
		if got, _ := os.ReadFile(filepath.Join(cached, name)); string(got) != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
	// Each host drew its own number, as without the cache: the draw is
	// compiled into the code, which the cache must then not share.
	h1, _ := os.ReadFile(filepath.Join(cached, "h1.random"))
	h2, _ := os.ReadFile(filepath.Join(cached, "h2.random"))
	if len(h1) == 0 || string(h1) == string(h2) {
		t.Errorf("the hosts drew %q and %q: one compilation's random number served both", h1, h2)
	}
	if got, _ := os.ReadFile(filepath.Join(cached, "h2.facts")); !strings.Contains(string(got), "h2-base/H2-BASE/3 17 ") ||
		!strings.Contains(string(got), `{"n": 5, "l": [0, 1, 2, 3, 4], "b": true} int bool`) {
		t.Errorf("h2.facts does not hold what the tasks rendered:\n%s", got)
	}
}

// TestJinjaCacheKeepsWhatCompilingDecides runs, in Ansible's Python, the
// cases where compiling a template decides what it does
// (testdata/jinjacache/compile_cases.py): a filter folded into the code
// while compiling, a filter whose calling convention the compiler looked up,
// autoescaping and delimiters. Each must render as Jinja alone renders it,
// and a template compiled once must be loaded, not compiled, the next time.
func TestJinjaCacheKeepsWhatCompilingDecides(t *testing.T) {
	// The Python that ansible-playbook runs in, which has Ansible and Jinja.
	playbook, err := exec.LookPath("ansible-playbook")
	if err != nil {
		t.Fatal("ansible-playbook is not installed: install Debian's ansible package (.ci/run does)")
	}
	data, err := os.ReadFile(playbook)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	python, ok := strings.CutPrefix(line, "#!")
	python = strings.TrimSpace(python)
	if !ok || strings.ContainsAny(python, " \t") {
		t.Fatalf("%s does not start with a #! line naming its Python: %q", playbook, line)
	}
	plugins := t.TempDir()
	if err := os.WriteFile(filepath.Join(plugins, jinjaCachePlugin), jinjaCacheSource, 0o600); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, testdata("jinjacache/compile_cases.py"), plugins, cache).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("compile_cases.py: %v\n%s", err, out)
	}
}
