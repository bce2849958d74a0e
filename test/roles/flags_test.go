package roles

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// flagTable is roles/kao_common/files/flags.yml.
type flagTable map[string]struct {
	Checked []string `json:"checked"`
	Flags   map[string]struct {
		Since string `json:"since"`
		Until string `json:"until"`
	} `json:"flags"`
}

// componentBinaries maps the components of kao's flag table to their binary
// and the bundle directory (family) it comes from.
var componentBinaries = map[string]struct{ binary, family string }{
	"karmada-apiserver":            {"kube-apiserver", "kubernetes"},
	"kube-controller-manager":      {"kube-controller-manager", "kubernetes"},
	"karmada-aggregated-apiserver": {"karmada-aggregated-apiserver", "karmada"},
	"karmada-controller-manager":   {"karmada-controller-manager", "karmada"},
	"karmada-scheduler":            {"karmada-scheduler", "karmada"},
	"karmada-webhook":              {"karmada-webhook", "karmada"},
}

// TestRenderedFlagsAccepted renders the units of karmada_apiserver,
// karmada_aggregated_apiserver and karmada_controllers for every Karmada
// and Kubernetes version of the bundle, and runs each version's real binary
// with exactly the flags its unit passes (plus --help, so that it parses
// them and exits): the binary must accept every one. It also holds kao's
// flag table to the truth: for every flag the table lists, each version of
// the bundle must refuse it as unknown exactly when the table says that
// version does not accept it, and every version must be in a minor line the
// table says was checked.
func TestRenderedFlagsAccepted(t *testing.T) {
	requirePrerequisites(t)
	root := repoRoot(t)
	bundle, _ := buildBundle(t)
	versions := bundleVersions(t, bundle)
	if len(versions["karmada"]) < 2 || len(versions["kubernetes"]) < 1 {
		t.Fatalf("the bundle should hold two Karmada versions and a Kubernetes one: %v", versions)
	}
	data, err := os.ReadFile(filepath.Join(root, "roles", "kao_common", "files", "flags.yml"))
	if err != nil {
		t.Fatal(err)
	}
	table := flagTable{}
	if err := yaml.Unmarshal(data, &table); err != nil {
		t.Fatalf("flags.yml: %v", err)
	}
	for component, b := range componentBinaries {
		if _, ok := table[component]; !ok {
			t.Errorf("flags.yml has no entry for %s", component)
		}
		for _, v := range versions[b.family] {
			if minor := v[:strings.LastIndexByte(v, '.')]; !contains(table[component].Checked, minor) {
				t.Errorf("the bundle holds %s %s, but flags.yml was not checked against %s (checked: %v)", component, v, minor, table[component].Checked)
			}
		}
	}

	// kao_version_flags keeps a flag the table lists exactly for the
	// versions the table says accept it, and every other flag.
	probe, kept := []string{"--kubeconfig=/k"}, map[string][]string{}
	for flag, entry := range table["karmada-controller-manager"].Flags {
		probe = append(probe, "--"+flag+"=1")
		for _, v := range versions["karmada"] {
			if (entry.Since == "" || !olderVersion(v, entry.Since)) && (entry.Until == "" || olderVersion(v, entry.Until)) {
				kept[v] = append(kept[v], "--"+flag+"=1")
			}
		}
	}
	for _, karmada := range versions["karmada"] {
		kube := versions["kubernetes"][0]
		units, filtered := renderUnits(t, root, bundle, karmada, kube, probe)
		want := append([]string{"--kubeconfig=/k"}, kept[karmada]...)
		sort.Strings(want)
		sort.Strings(filtered)
		if strings.Join(filtered, " ") != strings.Join(want, " ") {
			t.Errorf("kao_version_flags keeps %v of %v for karmada-controller-manager %s, want %v", filtered, probe, karmada, want)
		}
		for component, b := range componentBinaries {
			v := karmada
			if b.family == "kubernetes" {
				v = kube
			}
			bin := filepath.Join(bundle, b.family, v, "bin", b.binary)
			argv := execStart(t, units[component])
			if len(argv) < 2 || filepath.Base(argv[0]) != b.binary {
				t.Fatalf("%s's unit runs %v, not %s with flags", component, argv, b.binary)
			}
			if out, unknown, err := parseFlags(t, bin, argv[1:]); unknown || err != nil {
				t.Errorf("%s %s refuses the flags kao's role renders for it:\n%s", b.binary, v, out)
			} else {
				t.Logf("%s %s accepts the %d flags its unit passes", b.binary, v, len(argv)-1)
			}
			for flag, entry := range table[component].Flags {
				want := (entry.Since == "" || !olderVersion(v, entry.Since)) && (entry.Until == "" || olderVersion(v, entry.Until))
				if out, unknown, _ := parseFlags(t, bin, []string{"--" + flag + "=1"}); !unknown != want {
					t.Errorf("flags.yml says %s %s accepts --%s: %v, but the binary says %v:\n%s", component, v, flag, want, !unknown, out)
				}
			}
		}
	}
}

// bundleVersions lists the versions of each family whose binaries the
// bundle's SHA256SUMS lists.
func bundleVersions(t *testing.T, bundle string) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(bundle, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := map[string]map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Split(strings.TrimLeft(strings.Fields(sc.Text())[1], "*"), "/")
		if len(parts) == 4 && parts[2] == "bin" {
			if seen[parts[0]] == nil {
				seen[parts[0]] = map[string]bool{}
			}
			seen[parts[0]][parts[1]] = true
		}
	}
	out := map[string][]string{}
	for family, vs := range seen {
		for v := range vs {
			out[family] = append(out[family], v)
		}
		sort.Strings(out[family])
	}
	return out
}

// renderUnits renders the roles' units for one Karmada and one Kubernetes
// version and returns them by component.
// It also returns what kao_version_flags keeps of probe for
// karmada-controller-manager of that Karmada version.
func renderUnits(t *testing.T, root, bundle, karmada, kube string, probe []string) (map[string]string, []string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "units")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	inventory := "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: /usr/bin/python3\n" +
		"      kao_host_address: 10.0.0.1\n  children:\n    etcd: {hosts: {localhost: {}}}\n" +
		"    karmada_apiserver: {hosts: {localhost: {}}}\n    karmada_control_plane: {hosts: {localhost: {}}}\n"
	vars := map[string]any{
		"flags_roles_dir": filepath.Join(root, "roles"), "flags_out_dir": out,
		"kao_artifacts_dir": bundle, "kao_pki_dir": filepath.Join(dir, "pki"),
		"kao_karmada_version": karmada, "kao_kubernetes_version_default": kube,
		"kao_api_endpoint": "10.0.0.1:5443", "kao_api_secure_port": 5443,
		"kao_etcd":    map[string]any{"managed": true, "members": []any{map[string]any{"name": "localhost", "url_host": "10.0.0.1"}}},
		"flags_probe": probe,
		"kao_components": map[string]any{
			"apiserver": map[string]any{"version": kube}, "kube_controller_manager": map[string]any{"version": kube},
		},
	}
	varsJSON, err := json.Marshal(vars)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"inventory.yml": []byte(inventory), "vars.json": varsJSON} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ansible-playbook", "-i", filepath.Join(dir, "inventory.yml"), "-e", "@"+filepath.Join(dir, "vars.json"),
		filepath.Join(root, "test", "roles", "testdata", "flags-render.yml"))
	cmd.Env = append(os.Environ(), "ANSIBLE_ROLES_PATH="+filepath.Join(root, "roles"), "ANSIBLE_NOCOLOR=1",
		"ANSIBLE_RETRY_FILES_ENABLED=False", "ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"))
	if res, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rendering the units for Karmada %s and Kubernetes %s: %v\n%s", karmada, kube, err, res)
	}
	units := map[string]string{}
	for component := range componentBinaries {
		data, err := os.ReadFile(filepath.Join(out, component+".service"))
		if err != nil {
			t.Fatal(err)
		}
		units[component] = string(data)
	}
	filtered := []string{}
	data, err := os.ReadFile(filepath.Join(out, "filtered.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &filtered); err != nil {
		t.Fatalf("filtered.json: %v: %s", err, data)
	}
	return units, filtered
}

// quotedArg is one systemd_quote'd argument of an ExecStart= line.
var quotedArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// execStart returns the arguments of a unit's ExecStart=, unquoted.
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	var b bytes.Buffer
	in := false
	for _, line := range strings.Split(unit, "\n") {
		if strings.HasPrefix(line, "ExecStart=") {
			in = true
		}
		if !in {
			continue
		}
		b.WriteString(line + "\n")
		if !strings.HasSuffix(line, `\`) {
			break
		}
	}
	args := []string{}
	unescape := strings.NewReplacer(`\\`, `\`, `\"`, `"`, `%%`, `%`, `$$`, `$`)
	for _, m := range quotedArg.FindAllStringSubmatch(b.String(), -1) {
		args = append(args, unescape.Replace(m[1]))
	}
	if len(args) == 0 {
		t.Fatalf("no ExecStart= arguments in\n%s", unit)
	}
	return args
}

// parseFlags runs bin with args and --help: a binary that knows every flag
// and can parse its value prints its help and exits 0; one that does not
// know a flag says "unknown flag" (unknown). A known flag with a value it
// cannot parse is an error, not unknown.
func parseFlags(t *testing.T, bin string, args []string) (string, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(append([]string{}, args...), "--help")...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not answer within 30s", bin)
	}
	text := string(out)
	unknown := strings.Contains(text, "unknown flag") || strings.Contains(text, "unknown shorthand flag")
	return lastLines(text, 3), unknown, err
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// olderVersion tells whether vX.Y.Z a is older than b.
func olderVersion(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	for i := range pa {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return false
}

func versionParts(v string) [3]int {
	var out [3]int
	for i, p := range strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3) {
		for _, c := range p {
			if c < '0' || c > '9' {
				break
			}
			out[i] = out[i]*10 + int(c-'0')
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
