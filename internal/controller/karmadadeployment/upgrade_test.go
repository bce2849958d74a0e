package karmadadeployment

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
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/runner"
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
		v := fixtureVersion(c)
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

// fixtureVersion is the version the fixtures' components run: Karmada
// v1.17.1, Kubernetes v1.35.4.
func fixtureVersion(c upgradeComponent) string {
	if c.family == kubernetesFamily {
		return "v1.35.4"
	}
	return "v1.17.1"
}

// setRunning sets the version one host runs of a component.
func setRunning(kd *kaov1.KarmadaDeployment, name, host, v string) {
	setInstanceVersion(kd, name, host, v)
}

func TestPlanUpgrade(t *testing.T) {
	bundle := &pipeline.Artifacts{Karmada: "v1.17.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}
	tests := []struct {
		name string
		// change edits the fixture's spec or status.
		change func(kd *kaov1.KarmadaDeployment)
		// bundle replaces the bundle's defaults when set.
		bundle *pipeline.Artifacts
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
			bundle: &pipeline.Artifacts{Karmada: "v1.17.1", Kubernetes: "v1.36.0", Etcd: "v3.6.6"},
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
	summarizeVersions(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
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
	summarizeVersions(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
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
	kd.Status.Progress = &kaov1.RunProgress{RunID: "r", Playbook: pipeline.UpgradePlaybook, StartTime: metav1.NewTime(time.Now())}
	if p := phaseFor(kd, true); p != kaov1.UpgradingPhase {
		t.Errorf("a single-component upgrade run shows phase %s", p)
	}
	kd.Status.Progress.Playbook = pipeline.InstallPlaybook
	if p := phaseFor(kd, true); p != kaov1.InstallingPhase {
		t.Errorf("an install run shows phase %s", p)
	}
}

func TestPruneUpgradeBackupsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	names := []string{"dc-20260101T000000Z.db", "dc-20260301T000000Z.db", "dc-20260201T000000Z.db", "dc-20260401T000000Z.db", ".dc-x.db.partial"}
	for _, n := range names {
		controllertest.WriteTestFile(t, filepath.Join(dir, n), []byte(n))
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
	r := &Reconciler{}
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

// containerizedUpgradeFixture is a Containerized deployment whose probes
// saw every Deployment ready at v1.17.1 (Karmada) or v1.35.4 (Kubernetes):
// status has component versions and no instances, as observeContainerized
// writes them.
func containerizedUpgradeFixture() *kaov1.KarmadaDeployment {
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "cp", Namespace: "ns", Generation: 2},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode: kaov1.ContainerizedMode, Version: "v1.17.1",
			HostCluster: &kaov1.HostClusterSpec{InCluster: true},
			Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
		Status: kaov1.KarmadaDeploymentStatus{Version: "v1.17.1"},
	}
	for _, c := range upgradeOrder {
		kd.Status.Components = append(kd.Status.Components, kaov1.ComponentStatus{Name: c.name, Version: fixtureVersion(c), Ready: true})
	}
	return kd
}

func TestPlanContainerizedUpgrade(t *testing.T) {
	bundle := &pipeline.Artifacts{Karmada: "v1.17.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}
	moves := func(p *upgradePlan) []string {
		if p == nil {
			return nil
		}
		out := []string{}
		for _, c := range p.components {
			out = append(out, c.Name+":"+strings.Join(c.From, "/")+"->"+c.To+"@"+strings.Join(c.Hosts, ","))
		}
		return out
	}

	kd := containerizedUpgradeFixture()
	kd.Spec.Components.Scheduler.Version = "v1.18.1"
	plan, err := planUpgrade(kd, targetVersions(kd, bundle))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := moves(plan), []string{"karmada-scheduler:v1.17.1->v1.18.1@host_cluster"}; !slices.Equal(got, want) {
		t.Errorf("one component's version: moves %v, want %v", got, want)
	}
	if got := plan.groups[inventory.GroupUpgradeScheduler]; !slices.Equal(got, []string{inventory.HostClusterHost}) {
		t.Errorf("the scheduler's group holds %v, want the host cluster's host alone", got)
	}

	// The scheduler reached v1.18.1; spec.version follows: the CRDs and the
	// other Karmada components move, the scheduler and the Kubernetes
	// components do not.
	kd.Status.Components[slices.IndexFunc(kd.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == "karmada-scheduler" })].Version = "v1.18.1"
	kd.Spec.Components.Scheduler.Version = ""
	kd.Spec.Version = "v1.18.1"
	plan, err = planUpgrade(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"karmada-crds:v1.17.1->v1.18.1@",
		"karmada-aggregated-apiserver:v1.17.1->v1.18.1@host_cluster",
		"karmada-webhook:v1.17.1->v1.18.1@host_cluster",
		"karmada-controller-manager:v1.17.1->v1.18.1@host_cluster",
	}
	if got := moves(plan); !slices.Equal(got, want) {
		t.Errorf("spec.version: moves\n got %v\nwant %v", got, want)
	}
	for g, hosts := range plan.groups {
		wantHosts := []string{inventory.HostClusterHost}
		if g == inventory.GroupUpgradeAPIServer || g == inventory.GroupUpgradeKubeControllerManager || g == inventory.GroupUpgradeScheduler {
			wantHosts = []string{}
		}
		if !slices.Equal(hosts, wantHosts) {
			t.Errorf("group %s holds %v, want %v", g, hosts, wantHosts)
		}
	}

	// A Deployment that does not exist yet (no version known) is left to the
	// install, and a downgrade is refused as in Binary mode.
	kd = containerizedUpgradeFixture()
	kd.Status.Components[slices.IndexFunc(kd.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == "karmada-webhook" })].Version = ""
	kd.Spec.Components.Webhook.Version = "v1.18.1"
	if plan, err := planUpgrade(kd, targetVersions(kd, bundle)); err != nil || plan != nil {
		t.Errorf("a component with no known version: plan %v, error %v; want no upgrade", moves(plan), err)
	}
	kd = containerizedUpgradeFixture()
	kd.Spec.Components.ControllerManager.Version = "v1.16.0"
	if _, err := planUpgrade(kd, targetVersions(kd, bundle)); err == nil || !strings.Contains(err.Error(), "kao does not downgrade") {
		t.Errorf("a downgrade: error %v", err)
	}
}

func TestContainerizedUpgradeStopMessageNamesTheDeployment(t *testing.T) {
	u := &kaov1.UpgradeStatus{Components: []kaov1.ComponentUpgrade{
		{Name: "karmada-aggregated-apiserver", To: "v1.18.1", Hosts: []string{inventory.HostClusterHost}},
		{Name: "karmada-webhook", To: "v1.18.1", Hosts: []string{inventory.HostClusterHost}},
	}}
	res := &runner.Result{FailedTasks: []runner.FailedTask{{
		Host: inventory.HostClusterHost, Task: "Karmada workloads | Apply the component and wait for its rollout",
		Play: "Upgrade | karmada-webhook, in the host cluster",
	}}}
	got := upgradeStopMessage(u, res)
	for _, want := range []string{"stopped at karmada-webhook, whose Deployment did not roll out to v1.18.1", "old pods serving",
		"not touched: every component after karmada-webhook"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q does not say %q", got, want)
		}
	}
	if strings.Contains(got, "on host_cluster") {
		t.Errorf("%q names the inventory's stand-in host as if it were a machine", got)
	}
}

func TestUpgradeWithoutBackupNamesOneVersion(t *testing.T) {
	kd := containerizedUpgradeFixture()
	kd.Spec.Version = "v1.18.1"
	// The annotation covers the upgrade to the version it names only.
	if upgradeWithoutBackup(kd) {
		t.Error("no annotation, yet the backup is skipped")
	}
	kd.Annotations = map[string]string{kaov1.UpgradeWithoutBackupAnnotation: "v1.17.1"}
	if upgradeWithoutBackup(kd) {
		t.Error("an annotation naming another version skips the backup")
	}
	kd.Annotations[kaov1.UpgradeWithoutBackupAnnotation] = "v1.18.1"
	if !upgradeWithoutBackup(kd) {
		t.Error("the annotation naming spec.version does not skip the backup")
	}
}

func TestASuccessfulContainerizedRunRecordsTheVersionsItRolledOut(t *testing.T) {
	r := &Reconciler{}
	ran := containerizedUpgradeFixture()
	ran.Spec.Components.Scheduler.Version = "v1.18.1"
	versionOf := func(kd *kaov1.KarmadaDeployment, name string) string {
		for _, c := range kd.Status.Components {
			if c.Name == name {
				return c.Version
			}
		}
		return ""
	}

	cur := ran.DeepCopy()
	r.recordRunVersions(cur, ran, &runner.Result{ID: "r1", Playbook: pipeline.UpgradePlaybook, Outcome: runner.Failed}, false)
	if v := versionOf(cur, "karmada-scheduler"); v != "v1.17.1" {
		t.Errorf("after a failed run the scheduler's version is %q: only the workloads can say what a failed rollout left", v)
	}

	cur = ran.DeepCopy()
	r.recordRunVersions(cur, ran, &runner.Result{ID: "r1", Playbook: pipeline.UpgradePlaybook, Outcome: runner.Succeeded}, false)
	if v := versionOf(cur, "karmada-scheduler"); v != "v1.18.1" {
		t.Errorf("after the scheduler's upgrade succeeded its version is %q, want v1.18.1", v)
	}
	if v := versionOf(cur, "karmada-webhook"); v != "v1.17.1" {
		t.Errorf("karmada-webhook, which the run did not move, reads %q", v)
	}
	// A plan made at once, before a probe, does not move the scheduler again.
	cur.Spec.Version = "v1.18.1"
	cur.Spec.Components.Scheduler.Version = ""
	plan, err := planUpgrade(cur, targetVersions(cur, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range plan.components {
		if c.Name == "karmada-scheduler" {
			t.Errorf("the next plan moves the scheduler again: %s", plan.summary())
		}
	}
}
