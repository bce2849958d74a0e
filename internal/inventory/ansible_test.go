package inventory

// Tests against the real consumers: Debian's ansible-inventory and ansible-playbook
// (ansible-core 2.14), fed by the kao-inventory binary built from this tree. They fail,
// never skip, when Ansible is missing: CI installs it.

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
)

// binDir holds the kao-inventory binary, built once per test binary run (the build
// takes seconds; every test that runs Ansible needs it).
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "kao-inventory-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// inventoryBinary builds cmd/kao-inventory with `go build` once and returns its path.
func inventoryBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "kao-inventory")
		cmd := exec.Command("go", append(append([]string{"build"}, testenv.BuildFlags...), "-o", binPath, "github.com/kao-io/kao/cmd/kao-inventory")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			binError = fmt.Errorf("go build ./cmd/kao-inventory: %w\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// requireTool returns the path of an Ansible command, failing the test when it is missing.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: install Debian's ansible package (apt-get install ansible); "+
			"these tests check kao's inventory with the real Ansible and must not be skipped", name)
	}
	return p
}

// isolatedEnv is the environment for a command run in dir: the caller's, minus
// every ANSIBLE_* and KAO_INVENTORY_* setting, plus a private Ansible home and config
// that make an unparsable inventory an error instead of a warning.
func isolatedEnv(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	cfg := filepath.Join(dir, "ansible.cfg")
	if err := os.WriteFile(cfg, []byte("[defaults]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANSIBLE_") && !strings.HasPrefix(kv, "KAO_INVENTORY_") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"ANSIBLE_CONFIG="+cfg,
		"ANSIBLE_HOME="+filepath.Join(dir, ".ansible"),
		"ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, ".ansible", "tmp"),
		"ANSIBLE_INVENTORY_UNPARSED_FAILED=true",
		"ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED=true",
		"ANSIBLE_NOCOLOR=true",
		"ANSIBLE_RETRY_FILES_ENABLED=false",
		"ANSIBLE_FORKS=10",
	)
	return append(env, extra...)
}

// run runs name with args in dir and returns stdout; it fails the test with stderr
// when the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

// expectedHostVars is what Ansible must report for host: the group variables of all
// overlaid with the host's own, rendered as kao renders them.
func expectedHostVars(t *testing.T, inv *Inventory, host string) []byte {
	t.Helper()
	merged := maps.Clone(inv.allVars)
	maps.Copy(merged, inv.hostVars[host])
	data, err := encode(merged, false)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestAnsibleInventoryReadsScriptAndFileAlike(t *testing.T) {
	inventoryCmd := requireTool(t, "ansible-inventory")
	bin := inventoryBinary(t)
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input, err := filepath.Abs(filepath.Join("testdata", tc.name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			kubeconfigDir := filepath.Join(dir, "members")
			inv := mustBuild(t, loadCase(t, tc.name), Options{MemberKubeconfigPath: memberKubeconfigIn(kubeconfigDir)})

			fromScript := run(t, dir, isolatedEnv(t, dir,
				"KAO_INVENTORY_FILE="+input, "KAO_INVENTORY_MEMBER_KUBECONFIG_DIR="+kubeconfigDir),
				inventoryCmd, "-i", bin, "--list")

			file, err := inv.FileJSON()
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "hosts.json"), file, 0o600); err != nil {
				t.Fatal(err)
			}
			fromFile := run(t, dir, isolatedEnv(t, dir), inventoryCmd, "-i", "hosts.json", "--list")

			if !jsonEqual(t, fromScript, fromFile) {
				t.Errorf("ansible-inventory reads the script and hosts.json differently:\nscript:\n%s\nfile:\n%s", fromScript, fromFile)
			}

			// What Ansible saw must be what kao meant, unsafe markers included
			// (ansible-inventory writes unsafe strings back as __ansible_unsafe).
			var got struct {
				Meta struct {
					HostVars map[string]json.RawMessage `json:"hostvars"`
				} `json:"_meta"`
				All struct {
					Children []string `json:"children"`
				} `json:"all"`
			}
			if err := json.Unmarshal(fromScript, &got); err != nil {
				t.Fatal(err)
			}
			var groups map[string]struct {
				Hosts []string `json:"hosts"`
			}
			if err := json.Unmarshal(fromScript, &groups); err != nil {
				t.Fatal(err)
			}
			for _, g := range append(slices.Clone(namedGroups), GroupUngrouped) {
				if !slices.Contains(got.All.Children, g) {
					t.Errorf("group %s is not a child of all in Ansible's view: %v", g, got.All.Children)
				}
				gotHosts := groups[g].Hosts
				slices.Sort(gotHosts)
				if want := inv.Hosts(g); len(gotHosts)+len(want) > 0 && !slices.Equal(gotHosts, want) {
					t.Errorf("group %s: Ansible sees %v, kao built %v", g, gotHosts, want)
				}
			}
			if len(got.Meta.HostVars) != len(inv.Hosts(GroupAll)) {
				t.Errorf("Ansible sees %d hosts, kao built %v", len(got.Meta.HostVars), inv.Hosts(GroupAll))
			}
			for _, h := range inv.Hosts(GroupAll) {
				if want := expectedHostVars(t, inv, h); !jsonEqual(t, got.Meta.HostVars[h], want) {
					t.Errorf("host %s: Ansible sees\n%s\nkao built\n%s", h, got.Meta.HostVars[h], want)
				}
			}
		})
	}
}

// dumpPlaybook prints every kao_ variable of each local host and writes it as JSON
// twice: read directly and read through hostvars (CVE-2024-11079's path). It also
// templates the member context inside a larger string and through a derived fact,
// and templates the plain extra var "canary" so the test can see that this harness
// would notice a template that ran.
const dumpPlaybook = `- name: Injection | Dump every kao variable as Ansible sees it
  hosts: members:members_unjoin:host_cluster
  gather_facts: false
  vars:
    # The name must not start with kao_: the lookup below would find itself.
    dumped: "{{ dict(query('varnames', '^kao_') | zip(query('vars', *query('varnames', '^kao_')))) }}"
  tasks:
    - name: Injection | Print every kao variable
      ansible.builtin.debug:
        var: dumped

    - name: Injection | Print the member context inside a template
      ansible.builtin.debug:
        msg: "context={{ kao_member_context }} deployment={{ kao_deployment_name }}"
      when: kao_member_context is defined

    - name: Injection | Derive a fact from the member context
      ansible.builtin.set_fact:
        derived_context: "ctx={{ kao_member_context | default('') }}"

    - name: Injection | Use the derived fact
      ansible.builtin.debug:
        msg: "{{ derived_context }}"

    - name: Injection | Template the plain canary extra var (must run)
      ansible.builtin.debug:
        msg: "{{ canary }}"
      run_once: true

    - name: Injection | Write kao variables read directly
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.direct.json"
        content: "{{ dumped | to_json }}"
        mode: "0600"

    - name: Injection | Write kao variables read through hostvars
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.hostvars.json"
        content: "{{ hostvars[inventory_hostname] | dict2items | selectattr('key', 'match', '^kao_') | items2dict | to_json }}"
        mode: "0600"
`

func TestInjectionIsNeverTemplated(t *testing.T) {
	playbookCmd := requireTool(t, "ansible-playbook")
	bin := inventoryBinary(t)
	for _, mode := range []kaov1.DeploymentMode{kaov1.BinaryMode, kaov1.ContainerizedMode} {
		t.Run(string(mode), func(t *testing.T) {
			dir := t.TempDir()
			marker := filepath.Join(dir, "MARKER")
			control := filepath.Join(dir, "CONTROL")
			outDir := filepath.Join(dir, "out")
			if err := os.Mkdir(outDir, 0o700); err != nil {
				t.Fatal(err)
			}
			kd := injectionDeployment(mode, marker)
			input, err := json.Marshal(kd)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "kd.json"), input, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "dump.yml"), []byte(dumpPlaybook), 0o600); err != nil {
				t.Fatal(err)
			}
			kubeconfigDir := filepath.Join(dir, "members")
			inv := mustBuild(t, kd, Options{MemberKubeconfigPath: memberKubeconfigIn(kubeconfigDir)})

			run(t, dir, isolatedEnv(t, dir,
				"KAO_INVENTORY_FILE="+filepath.Join(dir, "kd.json"), "KAO_INVENTORY_MEMBER_KUBECONFIG_DIR="+kubeconfigDir),
				playbookCmd, "-i", bin, "dump.yml",
				"-e", "out_dir="+outDir,
				"-e", "canary={{ lookup('pipe', 'touch "+control+"') }}")

			if _, err := os.Stat(control); err != nil {
				t.Fatalf("the plain canary did not run (%v): this harness would not notice an injection", err)
			}
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a CR string was templated: %s exists (stat: %v)", marker, err)
			}

			hosts := append(append(inv.Hosts(GroupMembers), inv.Hosts(GroupMembersUnjoin)...), inv.Hosts(GroupHostCluster)...)
			if len(hosts) < 3 {
				t.Fatalf("the injection deployment should yield at least 3 local hosts, got %v", hosts)
			}
			for _, h := range hosts {
				want := plainKaoVars(t, inv, h)
				for _, p := range injectionPayloads(marker) {
					if !strings.Contains(string(want), mustJSONString(t, p)) {
						t.Errorf("%s: no kao variable carries the payload %q; the test would prove nothing", h, p)
					}
				}
				for _, how := range []string{"direct", "hostvars"} {
					got, err := os.ReadFile(filepath.Join(outDir, h+"."+how+".json"))
					if err != nil {
						t.Fatal(err)
					}
					if !jsonEqual(t, got, want) {
						t.Errorf("%s (read %s): Ansible's values differ from the literal input:\n got: %s\nwant: %s", h, how, got, want)
					}
				}
			}
		})
	}
}

// plainKaoVars is every kao_ variable of host as plain JSON, the unsafe markers
// removed: the literal values a playbook must see.
func plainKaoVars(t *testing.T, inv *Inventory, host string) []byte {
	t.Helper()
	merged := map[string]any{}
	for _, vs := range []vars{inv.allVars, inv.hostVars[host]} {
		for k, v := range vs {
			if strings.HasPrefix(k, "kao_") {
				merged[k] = unwrap(v)
			}
		}
	}
	data, err := json.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// unwrap turns unsafe strings back into plain ones, recursively.
func unwrap(v any) any {
	switch v := v.(type) {
	case unsafe:
		return string(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = unwrap(e)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = unwrap(e)
		}
		return out
	default:
		return v
	}
}

// mustJSONString is s as a JSON string literal, without the quotes.
func mustJSONString(t *testing.T, s string) string {
	t.Helper()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(string(data), `"`)
}

// injectionPayloads are strings Ansible would evaluate if it templated them: a
// command that creates marker, a Jinja statement, an expression, and shell syntax.
func injectionPayloads(marker string) []string {
	return []string{
		"{{ lookup('pipe','touch " + marker + "') }}",
		"{% if true %}x{% endif %}",
		"{{ 7*7 }}",
		"$(touch " + marker + ") `touch " + marker + "` ${HOME}",
	}
}

// injectionDeployment is a deployment of the given mode whose every free-text
// string (every one that Build does not validate) holds an injection payload. The
// validated fields (host names and addresses, users, member names, enums that pick
// groups) cannot hold one: TestBuildRejectsBadConnectionFields covers those.
func injectionDeployment(mode kaov1.DeploymentMode, marker string) *kaov1.KarmadaDeployment {
	payloads := injectionPayloads(marker)
	n := 0
	p := func() string { n++; return payloads[(n-1)%len(payloads)] }
	component := func() kaov1.ComponentSpec {
		return kaov1.ComponentSpec{
			Version:      p(),
			ExtraArgs:    []kaov1.Arg{{Name: p(), Value: p()}, {Name: "v", Value: p()}},
			FeatureGates: []kaov1.FeatureGate{{Name: p(), Enabled: true}},
		}
	}
	addon := func() *kaov1.AddonSpec { return &kaov1.AddonSpec{Enabled: true, ComponentSpec: component()} }

	kd := &kaov1.KarmadaDeployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: kaov1.GroupVersion.String(), Kind: "KarmadaDeployment"},
		ObjectMeta: metav1.ObjectMeta{Name: p(), Namespace: p()},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:              mode,
			Version:           p(),
			KubernetesVersion: p(),
			APIServer: kaov1.APIServerSpec{
				Endpoint:      p(),
				CertSANs:      []string{p(), p()},
				ServiceSubnet: p(),
				ServiceType:   kaov1.ServiceType(p()),
				ComponentSpec: component(),
			},
			Components: kaov1.ComponentsSpec{
				AggregatedAPIServer:   component(),
				KubeControllerManager: component(),
				ControllerManager:     component(),
				Scheduler:             component(),
				Webhook:               component(),
			},
			Addons: kaov1.AddonsSpec{Search: addon(), Descheduler: addon(), MetricsAdapter: addon(), SchedulerEstimator: addon()},
			Members: []kaov1.MemberSpec{
				{Name: "edge-1", SyncMode: kaov1.PushSyncMode, Context: p(), Provider: p(), Region: p(), Zones: []string{p(), p()}},
				{Name: "edge-2", SyncMode: kaov1.PullSyncMode, Context: p(), Provider: p(), Region: p(), Zones: []string{p()}},
			},
		},
	}
	if mode == kaov1.BinaryMode {
		kd.Spec.Hosts = []kaov1.Host{{Name: "cp-1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.APIServerRole, kaov1.ControlPlaneRole}}}
		kd.Spec.SSH = &kaov1.SSHSpec{Become: kaov1.BecomeSudo}
		kd.Spec.Etcd.External = &kaov1.ExternalEtcd{Endpoints: []string{p(), p()}, KeyPrefix: p(), ClientCertSecretName: p()}
		kd.Status.Members = []kaov1.MemberStatus{{
			Name: "old-1", SyncMode: kaov1.SyncMode(p()), Joined: true,
			KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: "old-1", Key: "kubeconfig"},
		}}
	} else {
		size := resource.MustParse("1Gi")
		kd.Spec.HostCluster = &kaov1.HostClusterSpec{Namespace: p(), DNSDomain: p()}
		kd.Spec.Etcd.Managed = &kaov1.ManagedEtcd{
			Version:   p(),
			DataDir:   p(),
			ExtraArgs: []kaov1.Arg{{Name: p(), Value: p()}},
			Storage:   kaov1.EtcdStorage{Type: kaov1.EtcdStorageType(p()), Size: &size, StorageClassName: p()},
		}
	}
	return kd
}
