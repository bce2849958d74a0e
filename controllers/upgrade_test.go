package controllers

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
	inventory "github.com/kao-io/kao/inventory-plugin"
)

// upgradeFixture is a Binary deployment on three hosts: node1 and node2 run
// the API servers, node2 and node3 the controllers. Every component runs
// v1.17.1 (Karmada) or v1.35.4 (Kubernetes) on every host, status.version
// says v1.17.1, and the spec asks for the same.
func upgradeFixture() *kaov1.KarmadaDeployment {
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "dc", Namespace: "ns", Generation: 2},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode: kaov1.BinaryMode, Version: "v1.17.1",
			Hosts: []kaov1.Host{
				{Name: "node1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole}},
				{Name: "node2", Address: "10.0.0.2", Roles: []kaov1.HostRole{kaov1.APIServerRole, kaov1.ControlPlaneRole}},
				{Name: "node3", Address: "10.0.0.3", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}},
			},
			Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
		Status: kaov1.KarmadaDeploymentStatus{Version: "v1.17.1"},
	}
	for _, c := range upgradeOrder {
		v := "v1.17.1"
		if c.family == kubernetesFamily {
			v = "v1.35.4"
		}
		st := kaov1.ComponentStatus{Name: c.name, Version: v}
		for _, h := range componentHostNames(kd, c.name) {
			st.Instances = append(st.Instances, kaov1.ComponentInstance{Host: h, Version: v})
		}
		kd.Status.Components = append(kd.Status.Components, st)
	}
	kd.Status.Components = append(kd.Status.Components, kaov1.ComponentStatus{
		Name: "etcd", Version: "v3.6.6", Instances: []kaov1.ComponentInstance{{Host: "node1", Version: "v3.6.6"}},
	})
	return kd
}

// setRunning sets the version one host runs of a component.
func setRunning(kd *kaov1.KarmadaDeployment, name, host, v string) {
	setInstanceVersion(kd, name, host, v)
}

func TestPlanUpgrade(t *testing.T) {
	bundle := &artifacts{karmada: "v1.17.1", kubernetes: "v1.35.4", etcd: "v3.6.6"}
	tests := []struct {
		name string
		// change edits the fixture's spec or status.
		change func(kd *kaov1.KarmadaDeployment)
		// bundle replaces the bundle's defaults when set.
		bundle *artifacts
		// want lists the moves as "component:from->to@hosts"; nil means no upgrade.
		want []string
		// wantErr is part of the downgrade refusal's message; empty means none.
		wantErr string
	}{
		{
			name:   "nothing differs: no upgrade",
			change: func(*kaov1.KarmadaDeployment) {},
		},
		{
			name:   "one component's own version moves only that component, without the CRDs",
			change: func(kd *kaov1.KarmadaDeployment) { kd.Spec.Components.Scheduler.Version = "v1.18.1" },
			want:   []string{"karmada-scheduler:v1.17.1->v1.18.1@node2,node3"},
		},
		{
			name:   "spec.version moves the CRDs first, then every Karmada component in Karmada's order",
			change: func(kd *kaov1.KarmadaDeployment) { kd.Spec.Version = "v1.18.1" },
			want: []string{
				"karmada-crds:v1.17.1->v1.18.1@",
				"karmada-aggregated-apiserver:v1.17.1->v1.18.1@node1,node2",
				"karmada-webhook:v1.17.1->v1.18.1@node2,node3",
				"karmada-controller-manager:v1.17.1->v1.18.1@node2,node3",
				"karmada-scheduler:v1.17.1->v1.18.1@node2,node3",
			},
		},
		{
			name: "a component pinned by its own version stays while spec.version moves",
			change: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Version = "v1.18.1"
				kd.Spec.Components.Webhook.Version = "v1.17.1"
			},
			want: []string{
				"karmada-crds:v1.17.1->v1.18.1@",
				"karmada-aggregated-apiserver:v1.17.1->v1.18.1@node1,node2",
				"karmada-controller-manager:v1.17.1->v1.18.1@node2,node3",
				"karmada-scheduler:v1.17.1->v1.18.1@node2,node3",
			},
		},
		{
			name: "a stopped upgrade continues on the hosts not moved yet; the CRDs stay until status.version moves",
			change: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Version = "v1.18.1"
				for _, c := range []string{"karmada-aggregated-apiserver"} {
					setRunning(kd, c, "node1", "v1.18.1")
					setRunning(kd, c, "node2", "")
				}
			},
			want: []string{
				"karmada-crds:v1.17.1->v1.18.1@",
				"karmada-aggregated-apiserver:v1.17.1/v1.18.1->v1.18.1@node2",
				"karmada-webhook:v1.17.1->v1.18.1@node2,node3",
				"karmada-controller-manager:v1.17.1->v1.18.1@node2,node3",
				"karmada-scheduler:v1.17.1->v1.18.1@node2,node3",
			},
		},
		{
			name:   "a new Kubernetes default in the bundle moves karmada-apiserver, then kube-controller-manager",
			change: func(*kaov1.KarmadaDeployment) {},
			bundle: &artifacts{karmada: "v1.17.1", kubernetes: "v1.36.0", etcd: "v3.6.6"},
			want: []string{
				"karmada-apiserver:v1.35.4->v1.36.0@node1,node2",
				"kube-controller-manager:v1.35.4->v1.36.0@node2,node3",
			},
		},
		{
			name: "a status from before instances were recorded compares the component's version",
			change: func(kd *kaov1.KarmadaDeployment) {
				for i := range kd.Status.Components {
					kd.Status.Components[i].Instances = nil
				}
				kd.Spec.Components.ControllerManager.Version = "v1.18.1"
			},
			want: []string{"karmada-controller-manager:v1.17.1->v1.18.1@node2,node3"},
		},
		{
			name: "a host status knows nothing about moves with the others",
			change: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: "node4", Address: "10.0.0.4", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}})
				kd.Spec.Components.Scheduler.Version = "v1.18.1"
			},
			want: []string{"karmada-scheduler:v1.17.1->v1.18.1@node2,node3,node4"},
		},
		{
			name: "a new host alone is no upgrade: the install puts the version on it",
			change: func(kd *kaov1.KarmadaDeployment) {
				kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: "node4", Address: "10.0.0.4", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}})
			},
		},
		{
			name:    "an older spec.version is refused",
			change:  func(kd *kaov1.KarmadaDeployment) { kd.Spec.Version = "v1.16.9" },
			wantErr: "spec.version asks for Karmada v1.16.9, but the control plane runs v1.17.1: kao does not downgrade",
		},
		{
			name: "an older version of one component is refused, naming its field",
			change: func(kd *kaov1.KarmadaDeployment) {
				setRunning(kd, "karmada-scheduler", "node3", "v1.18.1")
				kd.Spec.Components.Scheduler.Version = "v1.17.1"
			},
			wantErr: "spec.components.scheduler.version asks karmada-scheduler to run v1.17.1, but it runs v1.18.1",
		},
		{
			name: "going back from a half-done upgrade is a downgrade too",
			change: func(kd *kaov1.KarmadaDeployment) {
				setRunning(kd, "karmada-aggregated-apiserver", "node1", "v1.18.1")
			},
			wantErr: "spec.version asks karmada-aggregated-apiserver to run v1.17.1, but it runs v1.18.1",
		},
		{
			name:    "an older etcd is refused",
			change:  func(kd *kaov1.KarmadaDeployment) { kd.Spec.Etcd.Managed.Version = "v3.5.21" },
			wantErr: "the spec asks etcd to run v3.5.21, but it runs v3.6.6",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kd := upgradeFixture()
			tt.change(kd)
			b := bundle
			if tt.bundle != nil {
				b = tt.bundle
			}
			plan, err := planUpgrade(kd, targetVersions(kd, b))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if plan != nil {
					t.Fatalf("an upgrade was planned: %s", plan.summary())
				}
				return
			}
			if plan == nil {
				t.Fatalf("no upgrade planned, want %v", tt.want)
			}
			got := []string{}
			for _, c := range plan.components {
				got = append(got, c.Name+":"+strings.Join(c.From, "/")+"->"+c.To+"@"+strings.Join(c.Hosts, ","))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("moves:\n got %v\nwant %v", got, tt.want)
			}
			// The inventory groups hold the same hosts, and every group is present.
			for _, g := range inventory.UpgradeGroups {
				if _, ok := plan.groups[g]; !ok {
					t.Errorf("upgrade group %s is missing", g)
				}
			}
			for _, c := range plan.components {
				for _, u := range upgradeOrder {
					if u.name == c.Name && !slices.Equal(plan.groups[u.group], c.Hosts) {
						t.Errorf("group %s holds %v, the plan moves %s on %v", u.group, plan.groups[u.group], c.Name, c.Hosts)
					}
				}
			}
			crds := slices.ContainsFunc(plan.components, func(c kaov1.ComponentUpgrade) bool { return c.Name == crdsComponent })
			if crds != (len(plan.groups[inventory.GroupUpgradeResources]) == 2) {
				t.Errorf("the CRDs step (%v) and its group %v disagree", crds, plan.groups[inventory.GroupUpgradeResources])
			}
		})
	}
}

func TestVersionsInStatusComeFromTheHosts(t *testing.T) {
	kd := upgradeFixture()
	kd.Spec.Version = "v1.18.1"
	// A run's hosts report what their processes run: node2's scheduler
	// moved, node3's did not; node1 reports a scheduler it should not have
	// (it left the controlPlane role) and a malformed version, both ignored.
	stats := map[string]json.RawMessage{
		"node2": json.RawMessage(`{"kao_versions": {"karmada-scheduler": "v1.18.1", "karmada-webhook": ""}}`),
		"node3": json.RawMessage(`{"kao_versions": {"karmada-scheduler": "v1.17.1"}}`),
		"node1": json.RawMessage(`{"kao_versions": {"karmada-scheduler": "v1.18.1", "karmada-aggregated-apiserver": "1.18"}}`),
	}
	recordReportedVersions(kd, stats)
	summarizeVersions(kd, targetVersions(kd, &artifacts{karmada: "v1.18.1", kubernetes: "v1.35.4", etcd: "v3.6.6"}))
	byName := map[string]kaov1.ComponentStatus{}
	for _, c := range kd.Status.Components {
		byName[c.Name] = c
	}
	sched := byName["karmada-scheduler"]
	if sched.Version != "v1.17.1" || sched.TargetVersion != "v1.18.1" {
		t.Errorf("a half-moved scheduler shows version %q target %q, want the oldest v1.17.1 and target v1.18.1", sched.Version, sched.TargetVersion)
	}
	if want := []kaov1.ComponentInstance{{Host: "node2", Version: "v1.18.1"}, {Host: "node3", Version: "v1.17.1"}}; !slices.Equal(sched.Instances, want) {
		t.Errorf("scheduler instances %+v, want %+v", sched.Instances, want)
	}
	if w := byName["karmada-webhook"]; w.Instances[0] != (kaov1.ComponentInstance{Host: "node2"}) || w.Version != "v1.17.1" {
		t.Errorf("a webhook that does not run on node2 must show an empty version there: %+v", w)
	}
	if a := byName["karmada-aggregated-apiserver"]; a.Instances[0].Version != "v1.17.1" {
		t.Errorf("a malformed report replaced a version: %+v", a)
	}
	if e := byName["etcd"]; e.Version != "v3.6.6" || e.TargetVersion != "" {
		t.Errorf("etcd on its target shows %+v", e)
	}

	// Once every host reports the target, version moves and targetVersion goes.
	recordReportedVersions(kd, map[string]json.RawMessage{"node3": json.RawMessage(`{"kao_versions": {"karmada-scheduler": "v1.18.1"}}`)})
	summarizeVersions(kd, targetVersions(kd, &artifacts{karmada: "v1.18.1", kubernetes: "v1.35.4", etcd: "v3.6.6"}))
	for _, c := range kd.Status.Components {
		if c.Name == "karmada-scheduler" && (c.Version != "v1.18.1" || c.TargetVersion != "") {
			t.Errorf("a moved scheduler shows version %q target %q", c.Version, c.TargetVersion)
		}
	}

	// A probe's fresh component list keeps what runs reported, and takes the
	// API servers' own answer over it.
	probed := []kaov1.ComponentStatus{
		{Name: "karmada-apiserver", Instances: []kaov1.ComponentInstance{{Host: "node1", Version: "v1.36.0"}}},
		{Name: "karmada-scheduler"},
	}
	carryVersions(kd.Status.Components, probed)
	if want := []kaov1.ComponentInstance{{Host: "node1", Version: "v1.36.0"}, {Host: "node2", Version: "v1.35.4"}}; !slices.Equal(probed[0].Instances, want) {
		t.Errorf("apiserver instances after a probe: %+v, want %+v", probed[0].Instances, want)
	}
	if probed[1].Version != "v1.18.1" || len(probed[1].Instances) != 2 {
		t.Errorf("the scheduler lost its versions in a probe: %+v", probed[1])
	}
}

func TestUpgradeStopMessageSaysWhere(t *testing.T) {
	u := &kaov1.UpgradeStatus{Components: []kaov1.ComponentUpgrade{
		{Name: "karmada-aggregated-apiserver", To: "v1.18.1", Hosts: []string{"node1", "node2", "node3"}},
	}}
	res := &runner.Result{FailedTasks: []runner.FailedTask{{
		Host: "node2", Task: "Karmada aggregated apiserver | Restart", Play: "Upgrade | karmada-aggregated-apiserver, one host at a time",
	}}}
	got := upgradeStopMessage(u, res)
	for _, want := range []string{"stopped at karmada-aggregated-apiserver on node2", "v1.18.1 before it: node1", "not touched: node3"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	res.FailedTasks[0].Play = "Preflight | Check the hosts"
	if got := upgradeStopMessage(u, res); got != "" {
		t.Errorf("a failure before the rollout is not a stop in it: %q", got)
	}
}

func TestPhaseIsUpgradingDuringAnUpgradeRun(t *testing.T) {
	kd := upgradeFixture()
	kd.Spec.Components.Scheduler.Version = "v1.18.1"
	kd.Status.Progress = &kaov1.RunProgress{RunID: "r", Playbook: upgradePlaybook, StartTime: metav1.NewTime(time.Now())}
	if p := phaseFor(kd, true); p != kaov1.UpgradingPhase {
		t.Errorf("a single-component upgrade run shows phase %s", p)
	}
	kd.Status.Progress.Playbook = installPlaybook
	if p := phaseFor(kd, true); p != kaov1.InstallingPhase {
		t.Errorf("an install run shows phase %s", p)
	}
}

func TestPruneUpgradeBackupsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	names := []string{"dc-20260101T000000Z.db", "dc-20260301T000000Z.db", "dc-20260201T000000Z.db", "dc-20260401T000000Z.db", ".dc-x.db.partial"}
	for _, n := range names {
		writeTestFile(t, filepath.Join(dir, n), []byte(n))
	}
	if err := pruneUpgradeBackups(dir, 3); err != nil {
		t.Fatal(err)
	}
	left := listDir(t, dir)
	want := []string{".dc-x.db.partial", "dc-20260201T000000Z.db", "dc-20260301T000000Z.db", "dc-20260401T000000Z.db"}
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestStoppedUpgradeStepLeavesNoVersionOnItsHost: after an upgrade run that
// stopped at node2's karmada-aggregated-apiserver, status does not go on
// saying node2 runs the old version (its service was being replaced and did
// not come back), while node1's reported move and the untouched hosts stay.
func TestStoppedUpgradeStepLeavesNoVersionOnItsHost(t *testing.T) {
	kd := upgradeFixture()
	kd.Spec.Version = "v1.18.1"
	kd.Spec.Hosts[0].Roles = append(kd.Spec.Hosts[0].Roles, kaov1.ControlPlaneRole)
	kd.Status.Upgrade = &kaov1.UpgradeStatus{RunID: "run-2", Components: []kaov1.ComponentUpgrade{
		{Name: "karmada-aggregated-apiserver", To: "v1.18.1", Hosts: []string{"node1", "node2"}},
	}}
	res := &runner.Result{ID: "run-2", Outcome: runner.Failed, FailedTasks: []runner.FailedTask{{
		Host: "node2", Task: "Karmada aggregated apiserver | Restart", Play: "Upgrade | karmada-aggregated-apiserver, one host at a time",
	}}, CustomStats: map[string]json.RawMessage{
		"node1": json.RawMessage(`{"kao_versions": {"karmada-aggregated-apiserver": "v1.18.1"}}`),
	}}
	r := &KarmadaDeploymentReconciler{}
	r.recordRunVersions(kd, kd, res, false)
	for _, c := range kd.Status.Components {
		if c.Name != "karmada-aggregated-apiserver" {
			continue
		}
		want := []kaov1.ComponentInstance{{Host: "node1", Version: "v1.18.1"}, {Host: "node2", Version: ""}}
		if !slices.Equal(c.Instances, want) {
			t.Errorf("instances after the stopped step: %+v, want %+v", c.Instances, want)
		}
	}

	// A run that failed before the rollout changes no instance.
	kd = upgradeFixture()
	kd.Status.Upgrade = &kaov1.UpgradeStatus{RunID: "run-3", Components: []kaov1.ComponentUpgrade{
		{Name: "karmada-aggregated-apiserver", To: "v1.18.1", Hosts: []string{"node1", "node2"}},
	}}
	res = &runner.Result{ID: "run-3", Outcome: runner.Failed, FailedTasks: []runner.FailedTask{{Host: "node2", Play: "Preflight | Check the hosts"}}}
	r.recordRunVersions(kd, kd, res, false)
	for _, c := range kd.Status.Components {
		for _, in := range c.Instances {
			if in.Version == "" {
				t.Errorf("a failure before the rollout cleared %s on %s", c.Name, in.Host)
			}
		}
	}
}
