package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
)

// maxReadmeLines is the README's budget: a front page, not a manual.
const maxReadmeLines = 200

var root = testenv.RepoRoot()

var (
	pagesOnce sync.Once
	allPages  []Page
	pagesErr  error
)

func pages(t *testing.T) []Page {
	t.Helper()
	pagesOnce.Do(func() { allPages, pagesErr = LoadPages(root) })
	if pagesErr != nil {
		t.Fatal(pagesErr)
	}
	return allPages
}

// isShell says whether a block holds commands (not a console transcript).
func isShell(b Block) bool {
	return b.Lang == "sh" || b.Lang == "bash" || b.Lang == "shell"
}

func TestReadmeIsAFrontPage(t *testing.T) {
	p := pages(t)[0]
	if p.Rel != "README.md" {
		t.Fatalf("first page is %s, want README.md", p.Rel)
	}
	if n := len(p.Lines); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a page in docs/", n, maxReadmeLines)
	}
}

func TestLinksResolve(t *testing.T) {
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchorCache[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := Anchors(Parse(path, string(data)))
		anchorCache[path] = a
		return a, nil
	}
	checked := 0
	for _, p := range pages(t) {
		for _, l := range p.Paragraphs {
			for _, target := range Links(l.Text) {
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				where := fmt.Sprintf("%s:%d: link %q", p.Rel, l.N, target)
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Join(root, p.Rel)
				if path != "" {
					file = filepath.Join(root, filepath.Dir(p.Rel), filepath.FromSlash(path))
				}
				if rel, err := filepath.Rel(root, file); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: leaves the repository", where)
					continue
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: %s does not exist", where, file)
					continue
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s: an anchor into a file that is not Markdown", where)
					continue
				}
				anchors, err := anchorsOf(file)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				if !anchors[anchor] {
					t.Errorf("%s: no heading with anchor #%s in %s (anchors: %s)", where, anchor, file, strings.Join(sortedKeys(anchors), " "))
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: is the parser broken?")
	}
}

// topLevel returns the names at the top of the repository, but the
// directories .gitignore keeps out of it (/_out/, /bin/): what make targets
// write there, which docs name, exists only once a target ran, and the
// tests must not depend on which ran before them.
func topLevel(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	if data, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "/"); ok && strings.HasSuffix(name, "/") {
				ignored[strings.TrimSuffix(name, "/")] = true
			}
		}
	}
	names := map[string]bool{}
	for _, e := range entries {
		if !ignored[e.Name()] {
			names[e.Name()] = true
		}
	}
	return names
}

func TestRepoPathsExist(t *testing.T) {
	top := topLevel(t)
	checked := 0
	check := func(where, word string) {
		path, ok := RepoPath(word, top)
		if !ok {
			return
		}
		checked++
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path))); err != nil {
			t.Errorf("%s: %s does not exist in the repository", where, path)
		}
	}
	for _, p := range pages(t) {
		for _, l := range p.Paragraphs {
			for _, span := range CodeSpans(l.Text) {
				check(fmt.Sprintf("%s:%d", p.Rel, l.N), span)
			}
		}
		for _, b := range p.Blocks {
			if !isShell(b) {
				continue
			}
			for _, cmd := range Commands(b.Body) {
				for _, w := range cmd {
					check(fmt.Sprintf("%s:%d (block)", p.Rel, b.Line), w)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no repository paths found: is the parser broken?")
	}
}

func TestMakeTargetsExist(t *testing.T) {
	where := map[string][]string{}
	for _, p := range pages(t) {
		for _, l := range p.Paragraphs {
			for _, span := range CodeSpans(l.Text) {
				for _, target := range MakeTargets(Words(span)) {
					where[target] = append(where[target], fmt.Sprintf("%s:%d", p.Rel, l.N))
				}
			}
		}
		for _, b := range p.Blocks {
			if !isShell(b) {
				continue
			}
			for _, cmd := range Commands(b.Body) {
				for _, target := range MakeTargets(cmd) {
					where[target] = append(where[target], fmt.Sprintf("%s:%d (block)", p.Rel, b.Line))
				}
			}
		}
	}
	for _, want := range []string{"demo", "check"} {
		if where[want] == nil {
			t.Errorf("the docs never name make %s, one of the README's two commands", want)
		}
	}
	for _, target := range sortedKeys(where) {
		cmd := exec.Command("make", "-n", target)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("make %s (named at %s): make -n %s failed: %v\n%s", target, strings.Join(where[target], ", "), target, err, out)
		}
	}
}

func TestCodeSpansClose(t *testing.T) {
	for _, p := range pages(t) {
		for _, l := range p.Paragraphs {
			if strings.Count(l.Text, "`")%2 != 0 {
				t.Errorf("%s:%d: an odd number of backquotes: a code span is not closed", p.Rel, l.N)
			}
		}
	}
}

func TestShellBlocksParse(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range p.Blocks {
			if !isShell(b) {
				continue
			}
			cmd := exec.Command("bash", "-n")
			cmd.Stdin = strings.NewReader(b.Body)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s:%d: bash -n: %v\n%s", p.Rel, b.Line, err, out)
			}
		}
	}
}

// otherFlags are flags the docs name of programs other than the manager. A
// flag in backquotes that is neither the manager's nor listed here fails
// TestFlagsAreTheManagers: add it here when it belongs to another program.
var otherFlags = map[string]string{
	"enable-aggregator-routing":       "kube-apiserver",
	"etcd-servers":                    "kube-apiserver",
	"etcd-prefix":                     "kube-apiserver",
	"kubelet-preferred-address-types": "kube-apiserver",
	"cluster-success-threshold":       "karmada-controller-manager",
	"enable-scheduler-estimator":      "karmada-scheduler",
	"initial-cluster-state":           "etcd",
	"cluster-zones":                   "karmada-agent",
	"list":                            "kao-inventory",
	"host":                            "kao-inventory",
	"file":                            "kao-inventory",
	"namespace":                       "kao-inventory",
	"name":                            "kao-inventory",
	"member-kubeconfig-dir":           "kao-inventory",
	"private-key":                     "ansible-playbook",
}

var (
	helpFlagRE = regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)`)
	flagSpanRE = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)(=.*)?$`)
)

// managerFlags builds the manager and reads its flags from --help.
func managerFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager")
	build := exec.Command("go", append(append([]string{"build"}, testenv.BuildFlags...), "-o", bin, "./cmd/manager")...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["state-dir"] {
		t.Fatalf("no --state-dir in the manager's --help: is the parser broken?\n%s", out)
	}
	return flags
}

func TestFlagsAreTheManagers(t *testing.T) {
	flags := managerFlags(t)
	table := map[string]bool{}
	for _, p := range pages(t) {
		for _, l := range p.Paragraphs {
			for _, span := range CodeSpans(l.Text) {
				m := flagSpanRE.FindStringSubmatch(span)
				if m == nil {
					continue
				}
				if p.Rel == "docs/install.md" && strings.HasPrefix(l.Text, "| `--") {
					first := strings.SplitN(strings.TrimPrefix(l.Text, "|"), "|", 2)[0]
					if strings.Contains(first, "`"+span+"`") {
						table[m[1]] = true
					}
				}
				if !flags[m[1]] && otherFlags[m[1]] == "" {
					t.Errorf("%s:%d: `%s` is not a flag of the manager (go run ./cmd/manager --help); if it is another program's, add it to otherFlags", p.Rel, l.N, span)
				}
			}
		}
	}
	for _, f := range sortedKeys(flags) {
		if !table[f] {
			t.Errorf("docs/install.md, the manager's flags: --%s is missing from the table", f)
		}
	}
	for _, f := range sortedKeys(table) {
		if !flags[f] {
			t.Errorf("docs/install.md, the manager's flags: --%s is in the table but not a flag of the manager", f)
		}
	}
}

// example is one object of a YAML block.
type example struct {
	where string
	obj   client.Object
}

// examples decodes every YAML block that holds objects into kao's types or
// core types, refusing unknown fields.
func examples(t *testing.T) []example {
	t.Helper()
	var out []example
	for _, p := range pages(t) {
		for _, b := range p.Blocks {
			if b.Lang != "yaml" || !regexp.MustCompile(`(?m)^kind:`).MatchString(b.Body) {
				continue
			}
			for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(b.Body, -1) {
				where := fmt.Sprintf("%s:%d (document %d)", p.Rel, b.Line, i+1)
				var meta metav1.TypeMeta
				if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				var obj client.Object
				switch meta.Kind {
				case "KarmadaDeployment":
					obj = &kaov1.KarmadaDeployment{}
				case "EtcdBackup":
					obj = &kaov1.EtcdBackup{}
				case "EtcdRestore":
					obj = &kaov1.EtcdRestore{}
				case "ConfigMap":
					obj = &corev1.ConfigMap{}
				default:
					t.Errorf("%s: kind %q: add its type to this test", where, meta.Kind)
					continue
				}
				if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
					t.Errorf("%s: %s does not decode into kao's type: %v", where, meta.Kind, err)
					continue
				}
				out = append(out, example{where: where, obj: obj})
			}
		}
	}
	return out
}

func TestYAMLExamplesDecode(t *testing.T) {
	found := false
	for _, e := range examples(t) {
		if _, ok := e.obj.(*kaov1.KarmadaDeployment); ok && strings.HasPrefix(e.where, "README.md:") {
			found = true
		}
	}
	if !found {
		t.Error("README.md has no KarmadaDeployment example that decodes")
	}
}

// TestExamplesAreAccepted creates every kao object of the examples in a real
// API server with kao's CRDs (server-side dry run), so the CRDs' validation
// rules apply.
func TestExamplesAreAccepted(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs kube-apiserver and etcd from make tools")
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "docs-examples"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	for _, e := range examples(t) {
		if _, ok := e.obj.(*corev1.ConfigMap); ok {
			continue
		}
		e.obj.SetNamespace(ns)
		if err := c.Create(ctx, e.obj, client.DryRunAll); err != nil {
			t.Errorf("%s: the API server rejects it: %v", e.where, err)
		}
	}
}

// copyRepo copies the repository's files (tracked and untracked, not
// ignored) into a new temporary directory.
func copyRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	out, err := ls.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, rel)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := copyFile(src, filepath.Join(dst, rel), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyFile(src, dst string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// searchPath is PATH plus the kubernetes tool set's bin directory (kubectl),
// when it is built.
func searchPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("PATH")
	out, err := exec.Command(filepath.Join(root, "hack", "tools.sh"), "dir", "kubernetes").Output()
	if err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil {
			path += string(os.PathListSeparator) + dir
		}
	}
	return path
}

// missingCommands returns the programs a block runs that bash cannot find.
func missingCommands(t *testing.T, body, dir, path string) []string {
	t.Helper()
	seen := map[string]bool{}
	var names []string
	for _, cmd := range Commands(body) {
		i := 0
		for i < len(cmd) && strings.Contains(cmd[i], "=") && !strings.HasPrefix(cmd[i], "-") {
			i++
		}
		if i < len(cmd) && !seen[cmd[i]] {
			seen[cmd[i]] = true
			names = append(names, cmd[i])
		}
	}
	var missing []string
	for _, name := range names {
		probe := exec.Command("bash", "-c", `command -v "$1" >/dev/null`, "bash", name)
		probe.Dir = dir
		probe.Env = append(os.Environ(), "PATH="+path)
		if probe.Run() != nil {
			missing = append(missing, name)
		}
	}
	return missing
}

func TestRunnableBlocks(t *testing.T) {
	var blocks []struct {
		name string
		b    Block
	}
	for _, p := range pages(t) {
		for _, b := range p.Blocks {
			if !b.Runnable {
				continue
			}
			if !isShell(b) {
				t.Errorf("%s:%d: only sh blocks can be %s, not %q", p.Rel, b.Line, RunnableMarker, b.Lang)
				continue
			}
			blocks = append(blocks, struct {
				name string
				b    Block
			}{fmt.Sprintf("%s:%d", p.Rel, b.Line), b})
		}
	}
	if len(blocks) == 0 {
		t.Fatalf("no block is marked %q", RunnableMarker)
	}
	dir := copyRepo(t)
	path := searchPath(t)
	for _, rb := range blocks {
		t.Run(rb.name, func(t *testing.T) {
			if missing := missingCommands(t, rb.b.Body, dir, path); len(missing) > 0 {
				msg := fmt.Sprintf("%s not found (in PATH or the tools cache)", strings.Join(missing, ", "))
				if testing.Short() {
					t.Skip(msg)
				}
				t.Fatal(msg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", rb.b.Body)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PATH="+path)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\n--- block ---\n%s--- output (last 4 KiB) ---\n%s", err, rb.b.Body, tail(out.Bytes(), 4096))
			}
			if out.Len() == 0 {
				t.Errorf("no output\n--- block ---\n%s", rb.b.Body)
			}
		})
	}
}

// TestDemoRefusesNonRoot runs `make demo` as a user other than root: it must
// stop at once with one line that says it needs root. It runs in a directory
// holding only the Makefile, so a broken check fails on the missing scripts
// rather than starting the demo.
func TestDemoRefusesNonRoot(t *testing.T) {
	dir, err := os.MkdirTemp("", "kao-docs-demo-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(filepath.Join(root, "Makefile"), filepath.Join(dir, "Makefile"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"make", "demo"}
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("running as root without setpriv (util-linux) to become another user")
		}
		args = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = dir
	// As a user types it: not a sub-make of `make check`, which would print
	// "Entering directory" lines around the error.
	cmd.Env = []string{"HOME=" + dir}
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "MAKEFLAGS" && name != "MAKELEVEL" && name != "MFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make demo as a non-root user succeeded:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "needs root") {
		t.Errorf("make demo as a non-root user: want one line saying it needs root, got %d lines:\n%s", len(lines), out)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
