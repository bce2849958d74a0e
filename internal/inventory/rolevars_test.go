package inventory

// The characterization of kao's roles against this inventory: every variable a
// role's defaults/main.yml and vars/main.yml define, resolved per host by the real
// ansible-playbook on the inventory of each golden case, in the play the
// entry playbooks run the role in. Moving a computation from a role's Jinja into
// the inventory must leave these values as they were: the goldens under
// testdata/rolevars/ are that proof, and their names stay even after a variable
// left the role (it then resolves from the inventory).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kao-io/kao/internal/runner"
)

// roleVarsPlays are the roles characterized and the host pattern of the play each
// runs in (playbooks/*.yml): groups, ansible_play_hosts_all and the like depend on it.
var roleVarsPlays = []struct {
	role  string // a directory of roles/
	hosts string // the entry playbooks' host pattern for it
}{
	{role: "preflight", hosts: "etcd:karmada_apiserver:karmada_control_plane"},
	{role: "binaries", hosts: "etcd:karmada_apiserver:karmada_control_plane"},
	{role: "kao_common", hosts: "etcd:karmada_apiserver:karmada_control_plane"},
	{role: "etcd", hosts: "etcd"},
	{role: "etcd_restore", hosts: "etcd"},
	{role: "karmada_apiserver", hosts: "karmada_apiserver"},
	{role: "karmada_aggregated_apiserver", hosts: "karmada_apiserver"},
	{role: "karmada_workloads", hosts: "host_cluster"},
	{role: "karmada_resources", hosts: "karmada_apiserver:host_cluster"},
	{role: "karmada_controllers", hosts: "karmada_control_plane"},
	{role: "karmada_addons", hosts: "karmada_control_plane:host_cluster"},
	{role: "karmada_members", hosts: "members"},
}

// fakePKINames are the files of kao's PKI directory the roles read, each written
// with a fake, non-secret content ("FAKE <name>") so that the variables that
// embed them resolve; etcd's per-host (and per-pod) files are added. The
// members' kubeconfigs and the bundle's files are left out: the variables that
// read them record the error, which is as stable.
var fakePKINames = []string{
	"admin-client", "ca", "etcd-ca", "etcd-healthcheck-client", "front-proxy-ca", "front-proxy-client",
	"karmada-aggregated-apiserver-client", "karmada-aggregated-apiserver-etcd-client", "karmada-aggregated-apiserver-server",
	"karmada-apiserver-etcd-client", "karmada-apiserver-server", "karmada-controller-manager-client",
	"karmada-descheduler-client", "karmada-metrics-adapter-client", "karmada-metrics-adapter-server",
	"karmada-scheduler-client", "karmada-scheduler-estimator-client", "karmada-scheduler-estimator-server",
	"karmada-search-client", "karmada-search-etcd-client", "karmada-search-server", "karmada-webhook-client",
	"karmada-webhook-server", "kube-controller-manager-client", "sa",
}

// resolveVarsAction is an action plugin that templates each named variable the
// way a task of the role would, and writes the values (or, for a variable that
// needs the run's facts or files, the first line of the error) as JSON. It runs
// on the controller and never connects to the host.
const resolveVarsAction = `
import json
from ansible.plugins.action import ActionBase
from ansible.module_utils.common.text.converters import to_text


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        out = {}
        for name in self._task.args['names']:
            if name not in task_vars:
                out[name] = {'unresolved': 'undefined'}
                continue
            try:
                value = self._templar.template(task_vars[name], fail_on_undefined=True)
                out[name] = json.loads(json.dumps(value, default=to_text))
            except Exception as e:
                out[name] = {'unresolved': to_text(e).strip().splitlines()[0]}
        with open(self._task.args['dest'], 'w') as f:
            json.dump(out, f)
        result['changed'] = False
        return result
`

// TestRoleVarsMatchGolden resolves every role variable on the golden cases'
// inventories and compares them with testdata/rolevars/<case>/<role>.json
// (-update rewrites them).
func TestRoleVarsMatchGolden(t *testing.T) {
	playbookCmd := requireTool(t, "ansible-playbook")
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// The members' kubeconfigs are fake files of this directory, so
			// that the variables that read them (the estimators') resolve.
			opts := tc.opts
			var members []string
			if opts.MemberKubeconfigPath != nil {
				opts.MemberKubeconfigPath = func(m string) string {
					members = append(members, m)
					return filepath.Join(dir, "members", m+".kubeconfig")
				}
			}
			inv := mustBuild(t, loadCase(t, tc.name), opts)
			writeFakeKubeconfigs(t, filepath.Join(dir, "members"), members)
			got := resolveRoleVars(t, playbookCmd, dir, inv)
			for _, p := range roleVarsPlays {
				golden := filepath.Join("testdata", "rolevars", tc.name, p.role+".json")
				data := got[p.role]
				if *update {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run `go test ./internal/inventory/ -run Golden -update` to create it)", err)
				}
				if !bytes.Equal(data, want) {
					t.Errorf("the variables of role %s differ from %s; if the change is intended, rerun with -update and review the diff.\ngot:\n%s",
						p.role, golden, data)
				}
			}
		})
	}
}

// writeFakeKubeconfigs writes a kubeconfig with a fake token for each member.
func writeFakeKubeconfigs(t *testing.T, dir string, members []string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		data := "apiVersion: v1\nkind: Config\n" +
			"clusters: [{name: " + m + ", cluster: {server: 'https://" + m + ".example.com:6443'}}]\n" +
			"users: [{name: " + m + ", user: {token: FAKE}}]\n" +
			"contexts: [{name: " + m + ", context: {cluster: " + m + ", user: " + m + "}}]\n" +
			"current-context: " + m + "\n"
		if err := os.WriteFile(filepath.Join(dir, m+".kubeconfig"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// resolveRoleVars runs one playbook in dir with a play per role and returns, by
// role, {host: {variable: value}} as indented JSON with a trailing newline.
func resolveRoleVars(t *testing.T, playbookCmd, dir string, inv *Inventory) map[string][]byte {
	t.Helper()
	invJSON, err := inv.FileJSON()
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(dir, "pki")
	names := slices.Clone(fakePKINames)
	for _, h := range inv.Hosts(GroupAll) {
		names = append(names, "etcd-server-"+h, "etcd-peer-"+h)
	}
	// A Containerized etcd's members are its pods.
	for i := range 5 {
		names = append(names, fmt.Sprintf("etcd-server-karmada-etcd-%d", i), fmt.Sprintf("etcd-peer-karmada-etcd-%d", i))
	}
	files := map[string]string{
		"hosts.json":                         string(invJSON),
		"action_plugins/kao_resolve_vars.py": resolveVarsAction,
		"artifacts/manifest.json":            `{"karmada": "v1.18.1", "kubernetes": "v1.35.4", "etcd": "v3.6.6"}` + "\n",
	}
	for _, n := range names {
		for _, ext := range []string{".crt", ".key", ".pub"} {
			files[filepath.Join("pki", n+ext)] = "FAKE " + n + ext + "\n"
		}
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A copy of roles/ whose tasks and handlers are replaced by the one task
	// that resolves the variables: dependencies load their variables and
	// plugins, and nothing runs on a host.
	roles := filepath.Join(dir, "roles")
	if err := os.CopyFS(roles, os.DirFS(filepath.Join("..", "..", "roles"))); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(roles)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		for _, sub := range []string{"tasks", "handlers"} {
			if err := os.RemoveAll(filepath.Join(roles, e.Name(), sub)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(roles, e.Name(), "tasks"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(roles, e.Name(), "tasks", "main.yml"), []byte("[]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var plays []any
	for _, p := range roleVarsPlays {
		varNames := roleVarNames(t, p.role)
		outDir := filepath.Join(dir, "out", p.role)
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			t.Fatal(err)
		}
		resolve := []any{map[string]any{
			"name": "Resolve the variables",
			"kao_resolve_vars": map[string]any{
				"names": varNames,
				"dest":  filepath.Join(outDir, "{{ inventory_hostname }}.json"),
			},
		}}
		data, err := yaml.Marshal(resolve)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(roles, p.role, "tasks", "kao_resolve.yml"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		plays = append(plays, map[string]any{
			"name":         "Resolve " + p.role,
			"hosts":        p.hosts,
			"gather_facts": false,
			"connection":   "local",
			"tasks": []any{map[string]any{
				"name":                         "Resolve " + p.role,
				"ansible.builtin.include_role": map[string]any{"name": p.role, "tasks_from": "kao_resolve.yml"},
			}},
		})
	}
	data, err := yaml.Marshal(plays)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolve.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Compiled templates are shared between the run's processes, as in
	// kao's runs (internal/runner/jinjacache.go).
	cache := filepath.Join(dir, "jinja-cache")
	if err := os.Mkdir(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	plugins, err := filepath.Abs(filepath.Join("..", "runner", "plugins", "callback"))
	if err != nil {
		t.Fatal(err)
	}
	env := isolatedEnv(t, dir, "ANSIBLE_ROLES_PATH="+roles, "ANSIBLE_CALLBACK_PLUGINS="+plugins, runner.JinjaCacheEnv+"="+cache)
	run(t, dir, env, playbookCmd, "-i", "hosts.json", "resolve.yml",
		"-e", `{"kao_run_id": "characterization", "kao_pki_dir": "`+pki+`", "kao_artifacts_dir": "`+filepath.Join(dir, "artifacts")+`",`+
			` "kao_karmada_version_default": "v1.18.1", "kao_kubernetes_version_default": "v1.35.4", "kao_etcd_version_default": "v3.6.6"}`)

	out := map[string][]byte{}
	for _, p := range roleVarsPlays {
		byHost := map[string]any{}
		outDir := filepath.Join(dir, "out", p.role)
		entries, err := os.ReadDir(outDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			raw, err := os.ReadFile(filepath.Join(outDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			// Paths of this test's directory would differ from run to run.
			raw = bytes.ReplaceAll(raw, []byte(dir), []byte("$TESTDIR"))
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatalf("%s/%s: %v", p.role, e.Name(), err)
			}
			byHost[strings.TrimSuffix(e.Name(), ".json")] = v
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(byHost); err != nil {
			t.Fatal(err)
		}
		out[p.role] = buf.Bytes()
	}
	return out
}

// roleVarNames are the top-level names of the role's defaults/main.yml and
// vars/main.yml, plus every name its existing golden files hold (a variable
// that moved into the inventory is still checked), sorted.
func roleVarNames(t *testing.T, role string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, f := range []string{"defaults", "vars"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "roles", role, f, "main.yml"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(data, &m); err != nil {
			t.Fatalf("roles/%s/%s/main.yml: %v", role, f, err)
		}
		for k := range m {
			set[k] = true
		}
	}
	goldens, err := filepath.Glob(filepath.Join("testdata", "rolevars", "*", role+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range goldens {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		var byHost map[string]map[string]any
		if err := json.Unmarshal(data, &byHost); err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		for _, vars := range byHost {
			for k := range vars {
				set[k] = true
			}
		}
	}
	if len(set) == 0 {
		t.Fatalf("roles/%s defines no variables", role)
	}
	return slices.Sorted(maps.Keys(set))
}
