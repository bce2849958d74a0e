package inventory

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
)

// update rewrites the golden files from the current output: go test ./internal/inventory/ -run Golden -update
var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

// goldenCases are the inputs under testdata/ and the run-time options the runner would pass.
var goldenCases = []struct {
	name string  // testdata/<name>.yaml is the input, testdata/<name>.golden.json the expected ScriptJSON
	opts Options // run-time facts, as the runner would pass them
}{
	{name: "binary-ha", opts: Options{MemberKubeconfigPath: memberKubeconfigIn("/run/kao/members")}},
	{name: "containerized", opts: Options{MemberKubeconfigPath: memberKubeconfigIn("/run/kao/members"),
		HostClusterKubeconfigPath: "/run/kao/host-cluster.kubeconfig", APIEndpoint: "192.0.2.30:31443"}},
	{name: "become-sudo"},
	{name: "minimal"},
}

// memberKubeconfigIn returns a MemberKubeconfigPath that puts every member's file in dir,
// the layout kao-inventory uses for KAO_INVENTORY_MEMBER_KUBECONFIG_DIR.
func memberKubeconfigIn(dir string) func(string) string {
	return func(member string) string { return filepath.Join(dir, member+".kubeconfig") }
}

// loadCase reads testdata/<name>.yaml strictly, as kao-inventory reads files.
func loadCase(t *testing.T, name string) *kaov1.KarmadaDeployment {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kd := &kaov1.KarmadaDeployment{}
	if err := yaml.UnmarshalStrict(data, kd); err != nil {
		t.Fatalf("parsing testdata/%s.yaml: %v", name, err)
	}
	return kd
}

// mustBuild builds the inventory or fails the test.
func mustBuild(t *testing.T, kd *kaov1.KarmadaDeployment, opts Options) *Inventory {
	t.Helper()
	inv, err := Build(kd, opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return inv
}

func TestScriptJSONMatchesGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mustBuild(t, loadCase(t, tc.name), tc.opts).ScriptJSON()
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `go test ./internal/inventory/ -run Golden -update` to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("ScriptJSON differs from %s; if the change is intended, rerun with -update and review the diff.\ngot:\n%s", golden, got)
			}
		})
	}
}

func TestOutputIsDeterministic(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			kd := loadCase(t, tc.name)
			// Reversing every list the API treats as a set or a map must not change a byte.
			reversed := kd.DeepCopy()
			slices.Reverse(reversed.Spec.Members)
			slices.Reverse(reversed.Status.Members)
			slices.Reverse(reversed.Spec.APIServer.CertSANs)
			slices.Reverse(reversed.Spec.APIServer.ExtraArgs)
			slices.Reverse(reversed.Spec.Components.ControllerManager.FeatureGates)
			for i := range reversed.Spec.Hosts {
				slices.Reverse(reversed.Spec.Hosts[i].Roles)
			}
			for i := range reversed.Spec.Members {
				slices.Reverse(reversed.Spec.Members[i].Zones)
			}
			for _, render := range []func(*Inventory) ([]byte, error){(*Inventory).ScriptJSON, (*Inventory).FileJSON} {
				a, errA := render(mustBuild(t, kd, tc.opts))
				b, errB := render(mustBuild(t, reversed, tc.opts))
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				if !bytes.Equal(a, b) {
					t.Errorf("reordering set-like lists changed the output:\n%s\nvs\n%s", a, b)
				}
			}
		})
	}
}

func TestBuildRejectsBadConnectionFields(t *testing.T) {
	cases := []struct {
		name      string                         // what is wrong
		mutate    func(*kaov1.KarmadaDeployment) // breaks a valid minimal deployment
		wantField string                         // the field path the error must name
	}{
		{"address with a shell metacharacter", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Address = "10.0.0.2;touch /tmp/x" }, "spec.hosts[1].address"},
		{"address with upper case", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Address = "Node-2.example.com" }, "spec.hosts[1].address"},
		{"address with a Jinja template", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "{{ 7*7 }}" }, "spec.hosts[0].address"},
		{"address with an IPv6 zone", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "fe80::1%eth0" }, "spec.hosts[0].address"},
		{"empty address", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "" }, "spec.hosts[0].address"},
		{"port above 65535", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Port = 70000 }, "spec.hosts[1].port"},
		{"negative port", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Port = -22 }, "spec.hosts[0].port"},
		{"user with upper case", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].User = "Admin" }, "spec.hosts[0].user"},
		{"user with a space", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].User = "root -o ProxyCommand=x" }, "spec.hosts[1].user"},
		{"user starting with a dash", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].User = "-oProxyCommand=x" }, "spec.hosts[0].user"},
		{"user longer than 32", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].User = strings.Repeat("u", 33) }, "spec.hosts[0].user"},
		{"host name with an underscore", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Name = "member_x" }, "spec.hosts[0].name"},
		{"host name that is a group name", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Name = "etcd" }, "spec.hosts[1].name"},
		{"duplicate host name", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Name = kd.Spec.Hosts[0].Name }, "spec.hosts[1].name"},
		{"unknown role", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[1].Roles = []kaov1.HostRole{"worker"} }, "spec.hosts[1].roles[0]"},
		{"unknown become method", func(kd *kaov1.KarmadaDeployment) { kd.Spec.SSH.Become = "Doas" }, "spec.ssh.become"},
		{"secure port out of range", func(kd *kaov1.KarmadaDeployment) { kd.Spec.APIServer.SecurePort = 65536 }, "spec.apiServer.securePort"},
		{"unknown mode", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Mode = "Hybrid" }, "spec.mode"},
		{"hosts in Containerized mode", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Mode = kaov1.ContainerizedMode }, "spec.hosts"},
		{"both managed and external etcd", func(kd *kaov1.KarmadaDeployment) {
			kd.Spec.Etcd.External = &kaov1.ExternalEtcd{Endpoints: []string{"https://10.0.0.9:2379"}}
		}, "spec.etcd"},
		{"no etcd at all", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Etcd.Managed = nil }, "spec.etcd"},
		{"member name with upper case", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Members[0].Name = "Edge" }, "spec.members[0].name"},
		{"member name longer than 48", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Members[0].Name = strings.Repeat("m", 49) }, "spec.members[0].name"},
		{"duplicate member name", func(kd *kaov1.KarmadaDeployment) {
			kd.Spec.Members = append(kd.Spec.Members, kd.Spec.Members[0])
		}, "spec.members[1].name"},
		{"unknown sync mode", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Members[0].SyncMode = "Both" }, "spec.members[0].syncMode"},
		{"status member name that is no host name", func(kd *kaov1.KarmadaDeployment) {
			kd.Status.Members = []kaov1.MemberStatus{{Name: "old one", Joined: true}}
		}, "status.members[0].name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kd := validDeployment()
			tc.mutate(kd)
			inv, err := Build(kd, Options{})
			if err == nil {
				t.Fatalf("Build accepted it; inventory hosts: %v", inv.Hosts(GroupAll))
			}
			if !strings.Contains(err.Error(), tc.wantField+":") {
				t.Errorf("error does not name %s:\n%v", tc.wantField, err)
			}
		})
	}
}

func TestBuildReportsEveryBadFieldAtOnce(t *testing.T) {
	kd := validDeployment()
	kd.Spec.Hosts[0].Address = "bad address"
	kd.Spec.Hosts[1].Port = 0x10000
	kd.Spec.Hosts[1].User = "Bad"
	_, err := Build(kd, Options{})
	if err == nil {
		t.Fatal("Build accepted three bad fields")
	}
	for _, f := range []string{"spec.hosts[0].address:", "spec.hosts[1].port:", "spec.hosts[1].user:", "default/dc1"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error does not mention %s:\n%v", f, err)
		}
	}
}

func TestBuildAcceptsValidConnectionFields(t *testing.T) {
	cases := []struct {
		name   string                         // what is valid
		mutate func(*kaov1.KarmadaDeployment) // keeps the deployment valid
	}{
		{"IPv6 address", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "2001:db8::1" }},
		{"DNS name", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "cp-1.dc1.example.com" }},
		{"single-label DNS name", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Address = "cp-1" }},
		{"highest port", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].Port = 65535 }},
		{"user with underscore and dash", func(kd *kaov1.KarmadaDeployment) { kd.Spec.Hosts[0].User = "_kao-deploy_1" }},
		{"become None", func(kd *kaov1.KarmadaDeployment) { kd.Spec.SSH.Become = kaov1.BecomeNone }},
		{"no ssh section", func(kd *kaov1.KarmadaDeployment) { kd.Spec.SSH = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kd := validDeployment()
			tc.mutate(kd)
			if _, err := Build(kd, Options{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// validDeployment is a small valid Binary deployment with two hosts and one member.
func validDeployment() *kaov1.KarmadaDeployment {
	kd := &kaov1.KarmadaDeployment{}
	kd.Name, kd.Namespace = "dc1", "default"
	kd.Spec = kaov1.KarmadaDeploymentSpec{
		Mode:    kaov1.BinaryMode,
		Version: "v1.18.1",
		Hosts: []kaov1.Host{
			{Name: "cp-1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}},
			{Name: "cp-2", Address: "10.0.0.2", Port: 2222, User: "deploy", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}},
		},
		SSH:  &kaov1.SSHSpec{Become: kaov1.BecomeSudo},
		Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		Members: []kaov1.MemberSpec{
			{Name: "edge-1", SyncMode: kaov1.PushSyncMode},
		},
	}
	return kd
}

// agentEnd is when a test Pull member's agent certificate expires.
var agentEnd = metav1.NewTime(time.Date(2027, time.March, 1, 10, 0, 0, 0, time.UTC))

// pullMember makes edge-1 a joined Pull member whose current agent
// certificate (status.certificates) expires at current, and records the one
// delivered to it as expiring at delivered (nil: none recorded).
func pullMember(kd *kaov1.KarmadaDeployment, current time.Time, delivered *metav1.Time) {
	kd.Spec.Members[0].SyncMode = kaov1.PullSyncMode
	kd.Status.Certificates = []kaov1.CertificateStatus{{Name: "karmada-agent-edge-1", NotAfter: metav1.NewTime(current)}}
	kd.Status.Members = []kaov1.MemberStatus{{Name: "edge-1", SyncMode: kaov1.PullSyncMode, Joined: true, AgentCertificateNotAfter: delivered}}
}

func TestGroupsFollowSpecAndStatus(t *testing.T) {
	cases := []struct {
		name       string                         // the situation
		mutate     func(*kaov1.KarmadaDeployment) // turns validDeployment into it
		wantGroups map[string][]string            // every group that must hold hosts; all others must be empty
	}{
		{
			name:   "new member joins",
			mutate: func(*kaov1.KarmadaDeployment) {},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
		{
			name: "host without roles is leaving: ungrouped, still reachable",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: "old-etcd", Address: "10.0.0.3"})
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"}, GroupUngrouped: {"old-etcd"},
			},
		},
		{
			name: "joined member stays out of members_join",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Status.Members = []kaov1.MemberStatus{{Name: "edge-1", Joined: true}}
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"},
			},
		},
		{
			name: "joined Pull member with its current agent certificate stays out of members_join",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				pullMember(kd, agentEnd.Time, &agentEnd)
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"},
			},
		},
		{
			name: "joined Pull member whose agent certificate was renewed joins again to get it",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				pullMember(kd, agentEnd.Add(time.Hour), &agentEnd)
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
		{
			name: "joined Pull member with no delivery recorded joins again",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				pullMember(kd, agentEnd.Time, nil)
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
		{
			name: "member whose join failed is joined again",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Status.Members = []kaov1.MemberStatus{{Name: "edge-1", Joined: false}}
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
		{
			name: "removed joined member is unjoined, removed unjoined member is forgotten",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Members = nil
				kd.Status.Members = []kaov1.MemberStatus{{Name: "edge-1", Joined: true}, {Name: "edge-9", Joined: false}}
			},
			wantGroups: map[string][]string{
				GroupEtcd: {"cp-1"}, GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"},
				GroupMembersUnjoin: {"member_edge-1"},
			},
		},
		{
			name: "etcd role with external etcd leaves the etcd group empty",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Etcd = kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{Endpoints: []string{"https://10.0.0.9:2379"}}}
				kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: "cp-3", Address: "10.0.0.3", Roles: []kaov1.HostRole{kaov1.EtcdRole}})
			},
			wantGroups: map[string][]string{
				GroupAPIServer: {"cp-1"}, GroupControlPlane: {"cp-1", "cp-2"}, GroupUngrouped: {"cp-3"},
				GroupMembers: {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
		{
			name: "containerized has only the host cluster and members",
			mutate: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Mode, kd.Spec.Hosts, kd.Spec.SSH = kaov1.ContainerizedMode, nil, nil
			},
			wantGroups: map[string][]string{
				GroupHostCluster: {HostClusterHost},
				GroupMembers:     {"member_edge-1"}, GroupMembersJoin: {"member_edge-1"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kd := validDeployment()
			tc.mutate(kd)
			inv := mustBuild(t, kd, Options{})
			for _, g := range append(slices.Clone(namedGroups), GroupUngrouped) {
				got := inv.Hosts(g)
				if got == nil {
					t.Errorf("group %s is missing; every group must be present", g)
				}
				want := tc.wantGroups[g]
				if len(got) != len(want) || !slices.Equal(got, want) {
					t.Errorf("group %s = %v, want %v", g, got, want)
				}
			}
		})
	}
}

func TestHostsAndHostJSON(t *testing.T) {
	inv := mustBuild(t, loadCase(t, "binary-ha"), Options{})
	if got, want := inv.Hosts(GroupAll), []string{"cp-1", "cp-2", "cp-3", "member_edge-1", "member_edge-2", "member_factory-1", "member_old-1"}; !slices.Equal(got, want) {
		t.Errorf("Hosts(all) = %v, want %v", got, want)
	}
	if got := inv.Hosts("no_such_group"); got != nil {
		t.Errorf("Hosts(no_such_group) = %v, want nil", got)
	}
	// Hosts returns a copy: callers cannot change the inventory.
	inv.Hosts(GroupEtcd)[0] = "changed"
	if inv.Hosts(GroupEtcd)[0] == "changed" {
		t.Error("Hosts returned the inventory's own slice")
	}

	var list struct {
		Meta struct {
			HostVars map[string]json.RawMessage `json:"hostvars"`
		} `json:"_meta"`
	}
	script, err := inv.ScriptJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(script, &list); err != nil {
		t.Fatal(err)
	}
	for _, h := range inv.Hosts(GroupAll) {
		got, err := inv.HostJSON(h)
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, got, list.Meta.HostVars[h]) {
			t.Errorf("HostJSON(%s) differs from _meta.hostvars:\n%s\nvs\n%s", h, got, list.Meta.HostVars[h])
		}
	}
	if _, err := inv.HostJSON("cp-9"); err == nil || !strings.Contains(err.Error(), `"cp-9"`) {
		t.Errorf("HostJSON of an unknown host: err = %v, want an error naming it", err)
	}
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatal(err)
	}
	ca, _ := json.Marshal(va)
	cb, _ := json.Marshal(vb)
	return bytes.Equal(ca, cb)
}

func TestMemberKubeconfigPath(t *testing.T) {
	kd := validDeployment()
	kd.Spec.Members = append(kd.Spec.Members, kaov1.MemberSpec{Name: "edge-2", SyncMode: kaov1.PullSyncMode})
	kd.Status.Members = []kaov1.MemberStatus{
		{Name: "old-1", Joined: true, KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: "s", Key: "k"}},
		{Name: "old-2", Joined: true},
	}
	cases := []struct {
		name string            // which Options
		opts Options           // what the runner passes
		want map[string]string // kao_member_kubeconfig per host; hosts not listed must not have it
	}{
		{name: "nil function omits every path", opts: Options{}, want: map[string]string{}},
		{
			name: "paths for spec members and for unjoin members with a recorded Secret",
			opts: Options{MemberKubeconfigPath: memberKubeconfigIn("/run/kao")},
			want: map[string]string{
				"member_edge-1": "/run/kao/edge-1.kubeconfig",
				"member_edge-2": "/run/kao/edge-2.kubeconfig",
				"member_old-1":  "/run/kao/old-1.kubeconfig",
			},
		},
		{
			name: "an empty path omits that member's",
			opts: Options{MemberKubeconfigPath: func(m string) string {
				if m == "edge-2" {
					return ""
				}
				return "/k/" + m
			}},
			want: map[string]string{"member_edge-1": "/k/edge-1", "member_old-1": "/k/old-1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inv := mustBuild(t, kd, tc.opts)
			for _, h := range append(inv.Hosts(GroupMembers), inv.Hosts(GroupMembersUnjoin)...) {
				got, ok := inv.hostVars[h]["kao_member_kubeconfig"]
				want, wantOK := tc.want[h]
				if ok != wantOK || (ok && got != unsafe(want)) {
					t.Errorf("%s: kao_member_kubeconfig = %#v (present %v), want %q (present %v)", h, got, ok, want, wantOK)
				}
			}
		})
	}
}

// ourLiterals are the only plain (not unsafe) strings the inventory may hold: kao's
// own literals and documented defaults. Anything else must be wrapped.
var ourLiterals = map[string]bool{
	"": true, localConnection: true, playbookPythonTemplate: true, becomeMethodSudo: true,
	defaultSSHUser: true, defaultServiceSubnet: true, defaultServiceType: true, defaultEtcdDataDir: true,
	defaultEtcdKeyPrefix: true, defaultEtcdStorageType: true, defaultEtcdStorageSize: true,
	defaultHostClusterNS: true, defaultHostClusterDNS: true,
	addressTypeIPv4: true, addressTypeIPv6: true, addressTypeFQDN: true,
}

// etcdPodName matches the names kao gives a Containerized etcd's pods
// (EtcdPodNames): its own literal and a number.
var etcdPodName = regexp.MustCompile(`^` + EtcdStatefulSet + `-[0-9]+$`)

// allowedVariables are the only variable names that are not kao_ variables.
var allowedVariables = map[string]bool{
	"ansible_host": true, "ansible_port": true, "ansible_user": true,
	"ansible_become": true, "ansible_become_method": true,
	"ansible_connection": true, "ansible_python_interpreter": true,
}

func TestStringsAreUnsafeAndNamesAllowListed(t *testing.T) {
	inputs := map[string]*kaov1.KarmadaDeployment{
		"injection-binary":        injectionDeployment(kaov1.BinaryMode, "/nonexistent/MARKER"),
		"injection-containerized": injectionDeployment(kaov1.ContainerizedMode, "/nonexistent/MARKER"),
	}
	for _, tc := range goldenCases {
		inputs[tc.name] = loadCase(t, tc.name)
	}
	for name, kd := range inputs {
		t.Run(name, func(t *testing.T) {
			inv := mustBuild(t, kd, Options{MemberKubeconfigPath: memberKubeconfigIn("/run")})
			check := func(where string, vs vars) {
				for k, v := range vs {
					if !strings.HasPrefix(k, "kao_") && !allowedVariables[k] {
						t.Errorf("%s: variable %s is not allow-listed", where, k)
					}
					walkPlainStrings(v, where+"."+k, func(path, s string) {
						if !ourLiterals[s] && !etcdPodName.MatchString(s) {
							t.Errorf("%s = %q is a plain string; CR-derived strings must be unsafe", path, s)
						}
					})
				}
			}
			check("all", inv.allVars)
			for h, vs := range inv.hostVars {
				check(h, vs)
			}
		})
	}
}

// walkPlainStrings calls f for every plain string leaf in v, and fails on any type
// the inventory must not hold.
func walkPlainStrings(v any, path string, f func(path, s string)) {
	switch v := v.(type) {
	case string:
		f(path, v)
	case unsafe, bool, int:
	case []any:
		for i, e := range v {
			walkPlainStrings(e, path+"["+strconv.Itoa(i)+"]", f)
		}
	case map[string]any:
		for k, e := range v {
			walkPlainStrings(e, path+"."+k, f)
		}
	default:
		f(path, fmt.Sprintf("<unexpected type %T>", v))
	}
}

func TestUpgradeGroupsHoldTheHostsTheOperatorNames(t *testing.T) {
	kd := loadCase(t, "binary-ha")
	// Without an upgrade, no upgrade group exists.
	inv, err := Build(kd, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range UpgradeGroups {
		if inv.Hosts(g) != nil {
			t.Errorf("an install run's inventory has the upgrade group %s", g)
		}
	}

	// Every group the operator gives is emitted, empty ones included, with
	// its hosts in name order (the order upgrade.yml moves them in).
	up := map[string][]string{}
	for _, g := range UpgradeGroups {
		up[g] = []string{}
	}
	up[GroupUpgradeScheduler] = []string{"cp-3", "cp-2"}
	inv, err = Build(kd, Options{Upgrade: up})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range UpgradeGroups {
		want := []string{}
		if g == GroupUpgradeScheduler {
			want = []string{"cp-2", "cp-3"}
		}
		if got := inv.Hosts(g); !slices.Equal(got, want) {
			t.Errorf("group %s holds %v, want %v", g, got, want)
		}
	}
	out, err := inv.FileJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(`"upgrade_karmada_scheduler": {`)) || !bytes.Contains(out, []byte(`"upgrade_karmada_apiserver": {`)) {
		t.Errorf("the file inventory lacks the upgrade groups:\n%s", out)
	}

	// A group kao does not know, or a host not in spec.hosts, is refused.
	for _, bad := range []map[string][]string{
		{"upgrade_everything": {"cp-1"}},
		{GroupUpgradeWebhook: {"cp-9"}},
		{GroupUpgradeWebhook: {HostClusterHost}},
	} {
		if _, err := Build(kd, Options{Upgrade: bad}); err == nil {
			t.Errorf("Build accepted upgrade groups %v", bad)
		}
	}

	// A Containerized upgrade moves Deployments of the host cluster: its
	// groups hold the host that stands for it, and nothing else.
	cz := loadCase(t, "containerized")
	inv, err = Build(cz, Options{Upgrade: map[string][]string{GroupUpgradeWebhook: {HostClusterHost}, GroupUpgradeScheduler: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.Hosts(GroupUpgradeWebhook); !slices.Equal(got, []string{HostClusterHost}) {
		t.Errorf("the Containerized webhook group holds %v", got)
	}
	if _, err := Build(cz, Options{Upgrade: map[string][]string{GroupUpgradeWebhook: {"cp-1"}}}); err == nil ||
		!strings.Contains(err.Error(), "a Containerized upgrade moves only host_cluster") {
		t.Errorf("a Containerized upgrade group naming another host: %v", err)
	}
}

func TestHostGroupAddressesAndType(t *testing.T) {
	for _, tc := range []struct {
		name      string   // what the case proves
		addresses []string // the apiServer hosts' addresses, in name order
		wantType  string   // the EndpointSlice addressType the roles were given
		wantURL   []string // the addresses as URL hosts
	}{
		{name: "no hosts count as IPv4", wantType: addressTypeIPv4},
		{name: "IPv4 only", addresses: []string{"192.0.2.1", "192.0.2.2"}, wantType: addressTypeIPv4, wantURL: []string{"192.0.2.1", "192.0.2.2"}},
		{name: "IPv6 only, bracketed in URLs", addresses: []string{"2001:db8::1"}, wantType: addressTypeIPv6, wantURL: []string{"[2001:db8::1]"}},
		{name: "a DNS name makes FQDN", addresses: []string{"192.0.2.1", "cp.example.com"}, wantType: addressTypeFQDN, wantURL: []string{"192.0.2.1", "cp.example.com"}},
		{name: "IPv4 and IPv6 mixed make FQDN", addresses: []string{"192.0.2.1", "2001:db8::1"}, wantType: addressTypeFQDN, wantURL: []string{"192.0.2.1", "[2001:db8::1]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode}
			for i, a := range tc.addresses {
				spec.Hosts = append(spec.Hosts, kaov1.Host{Name: fmt.Sprintf("h%d", i), Address: a,
					Roles: []kaov1.HostRole{kaov1.APIServerRole, kaov1.EtcdRole}})
			}
			got := hostGroupVars(spec, kaov1.APIServerRole)
			if got["address_type"] != tc.wantType {
				t.Errorf("address_type = %v, want %s", got["address_type"], tc.wantType)
			}
			if n := len(got["addresses"].([]any)); n != len(tc.addresses) {
				t.Errorf("%d addresses, want %d", n, len(tc.addresses))
			}
			var urls []string
			for _, h := range hostsWithRole(spec, kaov1.EtcdRole) {
				urls = append(urls, urlHost(h.Address))
			}
			if !slices.Equal(urls, tc.wantURL) {
				t.Errorf("URL hosts = %v, want %v", urls, tc.wantURL)
			}
		})
	}
}

func TestEtcdPodNamesFollowTheReplicas(t *testing.T) {
	for _, tc := range []struct {
		name     string             // what the case proves
		managed  *kaov1.ManagedEtcd // spec.etcd.managed
		wantPods []string           // the pod names the operator and the roles use
	}{
		{name: "replicas unset means one pod", managed: &kaov1.ManagedEtcd{}, wantPods: []string{"karmada-etcd-0"}},
		{name: "three replicas, numbered from zero", managed: &kaov1.ManagedEtcd{Replicas: ptr.To(int32(3))},
			wantPods: []string{"karmada-etcd-0", "karmada-etcd-1", "karmada-etcd-2"}},
		{name: "no managed etcd counts as the default", wantPods: []string{"karmada-etcd-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.ContainerizedMode, Etcd: kaov1.EtcdSpec{Managed: tc.managed}}}
			if got := EtcdPodNames(kd); !slices.Equal(got, tc.wantPods) {
				t.Errorf("EtcdPodNames = %v, want %v", got, tc.wantPods)
			}
			if tc.managed == nil {
				return
			}
			// kao_etcd carries the same names, and their count as replicas.
			v := etcdVars(kd, true)
			var pods []string
			for _, p := range v["pod_names"].([]any) {
				pods = append(pods, p.(string))
			}
			if !slices.Equal(pods, tc.wantPods) || v["replicas"] != len(tc.wantPods) {
				t.Errorf("kao_etcd.pod_names = %v, replicas = %v, want %v", pods, v["replicas"], tc.wantPods)
			}
		})
	}
}

func TestMembersCarryTheirIndexAndAgentIdentity(t *testing.T) {
	kd := loadCase(t, "binary-ha")
	inv := mustBuild(t, kd, Options{MemberKubeconfigPath: memberKubeconfigIn("/run")})
	// kao_members: name order, numbered from zero (the estimators' ports).
	for i, m := range inv.allVars["kao_members"].([]any) {
		entry := m.(map[string]any)
		if entry["index"] != i {
			t.Errorf("kao_members[%d] has index %v", i, entry["index"])
		}
		if i > 0 && string(entry["name"].(unsafe)) < string(inv.allVars["kao_members"].([]any)[i-1].(map[string]any)["name"].(unsafe)) {
			t.Errorf("kao_members is not in name order at %d", i)
		}
	}
	// Every member host, joining or leaving, names the certificate and user
	// kao's PKI issues for its karmada-agent.
	for _, h := range append(inv.Hosts(GroupMembers), inv.Hosts(GroupMembersUnjoin)...) {
		v := inv.hostVars[h]
		name := string(v["kao_member_name"].(unsafe))
		if got := v["kao_member_agent_certificate"]; got != unsafe(pki.AgentClient(name)) {
			t.Errorf("%s: kao_member_agent_certificate = %v, want %s", h, got, pki.AgentClient(name))
		}
		if got := v["kao_member_agent_user"]; got != unsafe("system:karmada:agent:"+name) {
			t.Errorf("%s: kao_member_agent_user = %v, want system:karmada:agent:%s", h, got, name)
		}
	}
}
