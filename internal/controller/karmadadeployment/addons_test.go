package karmadadeployment

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/probe"
)

// addonProbes answers every probe of observeAddons from tables, and records
// what it was asked.
type addonProbes struct {
	down        map[string]bool // URLs or addresses that fail
	unavailable map[string]bool // APIServices that are not Available
	lostLeases  map[string]bool // leases nobody holds
	handshakes  map[string]string
}

func (p *addonProbes) Readyz(_ context.Context, urls map[string]string, _ *tls.Config) []probe.Endpoint {
	return p.endpoints(urls)
}

func (p *addonProbes) endpoints(m map[string]string) []probe.Endpoint {
	out := []probe.Endpoint{}
	for _, h := range slices.Sorted(maps.Keys(m)) {
		e := probe.Endpoint{Host: h, URL: m[h], Ready: !p.down[m[h]]}
		if !e.Ready {
			e.Message = "connection refused"
		}
		out = append(out, e)
	}
	return out
}

func (p *addonProbes) Handshake(_ context.Context, addrs map[string]string, _ *tls.Config) []probe.Endpoint {
	p.handshakes = addrs
	return p.endpoints(addrs)
}

func (p *addonProbes) Leases(_ context.Context, _ probe.API, leases []probe.LeaseRef, _ time.Time) []probe.LeaseState {
	out := []probe.LeaseState{}
	for _, l := range leases {
		s := probe.LeaseState{LeaseRef: l, Holder: "c1_x", Held: !p.lostLeases[l.Name]}
		if !s.Held {
			s.Holder, s.Message = "", "not held"
		}
		out = append(out, s)
	}
	return out
}

func (p *addonProbes) APIService(_ context.Context, _ probe.API, name string) (bool, string) {
	if p.unavailable[name] {
		return false, "APIService " + name + " is not Available"
	}
	return true, ""
}

func (p *addonProbes) Clusters(context.Context, probe.API) ([]probe.ClusterState, error) {
	return nil, nil
}

// addonDeployment has two controlPlane hosts and the members zeta and alpha.
func addonDeployment(enabled bool) *kaov1.KarmadaDeployment {
	kd := &kaov1.KarmadaDeployment{}
	kd.Spec.Mode = kaov1.BinaryMode
	kd.Spec.Hosts = []kaov1.Host{
		{Name: "a1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole}},
		{Name: "c1", Address: "10.0.0.2", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}},
		{Name: "c2", Address: "10.0.0.3", Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}},
	}
	kd.Spec.Members = []kaov1.MemberSpec{{Name: "zeta"}, {Name: "alpha"}}
	on := &kaov1.AddonSpec{Enabled: enabled}
	kd.Spec.Addons = kaov1.AddonsSpec{Search: on, MetricsAdapter: on, Descheduler: on,
		SchedulerEstimator: &kaov1.AddonSpec{Enabled: enabled, ComponentSpec: kaov1.ComponentSpec{Version: "v1.18.0"}}}
	return kd
}

func TestObserveAddons(t *testing.T) {
	b, _, _, err := pki.Ensure(nil, pki.Request{
		EtcdHosts: []pki.Host{{Name: "a1", Address: "10.0.0.1"}}, APIServerHosts: []pki.Host{{Name: "a1", Address: "10.0.0.1"}},
		ControlPlaneHosts: []pki.Host{{Name: "c1", Address: "10.0.0.2"}, {Name: "c2", Address: "10.0.0.3"}},
		Addons:            pki.Addons{Search: true, MetricsAdapter: true, Descheduler: true, SchedulerEstimator: true},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	api := probe.API{URL: "https://10.0.0.1:5443"}
	tests := []struct {
		name    string
		kd      *kaov1.KarmadaDeployment
		probes  *addonProbes
		api     probe.API
		want    []string // "name ready" of each component, in order
		message string   // a message one of them must carry
	}{
		{name: "disabled addons are not listed", kd: addonDeployment(false), probes: &addonProbes{}, api: api},
		{
			name:   "every enabled addon passes its probes",
			kd:     addonDeployment(true),
			probes: &addonProbes{},
			api:    api,
			want: []string{"karmada-search true", "karmada-metrics-adapter true",
				"karmada-descheduler true", "karmada-scheduler-estimator true"},
		},
		{
			name: "a host's search down, an APIService unavailable, the lease lost, an estimator down",
			kd:   addonDeployment(true),
			probes: &addonProbes{down: map[string]bool{"https://10.0.0.3:9443/readyz": true, "10.0.0.2:10401": true},
				unavailable: map[string]bool{metricsAPIService: true}, lostLeases: map[string]bool{deschedulerLeaseName: true}},
			api: api,
			want: []string{"karmada-search false", "karmada-metrics-adapter false",
				"karmada-descheduler false", "karmada-scheduler-estimator false"},
			message: "c1 zeta: connection refused",
		},
		{
			name:   "no karmada-apiserver ready",
			kd:     addonDeployment(true),
			probes: &addonProbes{},
			want: []string{"karmada-search false", "karmada-metrics-adapter false",
				"karmada-descheduler false", "karmada-scheduler-estimator true"},
			message: "no karmada-apiserver is ready",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{ReadyzProber: tc.probes, KarmadaProber: tc.probes, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			got := r.observeAddons(context.Background(), tc.kd, b, &tls.Config{MinVersion: tls.VersionTLS12}, tc.api)
			summary, messages := []string{}, []string{}
			for _, c := range got {
				summary = append(summary, strings.Join([]string{c.Name, map[bool]string{true: "true", false: "false"}[c.Ready]}, " "))
				messages = append(messages, c.Message)
				if !slices.Equal(c.Hosts, []string{"c1", "c2"}) {
					t.Errorf("%s runs on %v, want the controlPlane hosts", c.Name, c.Hosts)
				}
			}
			if !slices.Equal(summary, tc.want) && len(summary)+len(tc.want) > 0 {
				t.Errorf("components %q, want %q (messages %q)", summary, tc.want, messages)
			}
			if tc.message != "" && !strings.Contains(strings.Join(messages, "|"), tc.message) {
				t.Errorf("no message says %q: %q", tc.message, messages)
			}
		})
	}

	// The estimators are probed where the role runs them: alpha (first by
	// name) on 10400, zeta on 10401, on every controlPlane host.
	p := &addonProbes{}
	r := &Reconciler{ReadyzProber: p, KarmadaProber: p, Clock: clocktesting.NewFakePassiveClock(time.Now())}
	r.observeAddons(context.Background(), addonDeployment(true), b, &tls.Config{MinVersion: tls.VersionTLS12}, api)
	got := []string{}
	for k, v := range p.handshakes {
		got = append(got, k+"="+v)
	}
	sort.Strings(got)
	want := []string{"c1 alpha=10.0.0.2:10400", "c1 zeta=10.0.0.2:10401", "c2 alpha=10.0.0.3:10400", "c2 zeta=10.0.0.3:10401"}
	if !slices.Equal(got, want) {
		t.Errorf("estimators probed at %q, want %q", got, want)
	}
}

// TestAddonVersionsInStatus: the versions the hosts report for the addons
// land in status like the core components' (the oldest instance, and the
// target while one lags), and a disabled addon's report is not listed.
func TestAddonVersionsInStatus(t *testing.T) {
	kd := upgradeFixture()
	kd.Spec.Version = "v1.17.1"
	kd.Spec.Addons = kaov1.AddonsSpec{
		Search:             &kaov1.AddonSpec{Enabled: true, ComponentSpec: kaov1.ComponentSpec{Version: "v1.18.1"}},
		SchedulerEstimator: &kaov1.AddonSpec{Enabled: true},
		Descheduler:        &kaov1.AddonSpec{Enabled: false},
	}
	recordReportedVersions(kd, map[string]json.RawMessage{
		"node2": json.RawMessage(`{"kao_versions": {"karmada-search": "v1.18.1", "karmada-scheduler-estimator": "v1.17.1", "karmada-descheduler": "v1.17.1"}}`),
		"node3": json.RawMessage(`{"kao_versions": {"karmada-search": "v1.17.1", "karmada-scheduler-estimator": "v1.17.1"}}`),
	})
	summarizeVersions(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
	got := map[string]string{}
	for _, c := range kd.Status.Components {
		if isAddon(c.Name) {
			got[c.Name] = c.Version + "->" + c.TargetVersion
		}
	}
	want := map[string]string{
		"karmada-search":              "v1.17.1->v1.18.1", // its own version; node3 lags
		"karmada-scheduler-estimator": "v1.17.1->",        // spec.version
	}
	if !maps.Equal(got, want) {
		t.Errorf("addon versions %v, want %v", got, want)
	}
	for _, c := range kd.Status.Components {
		if c.Name == "karmada-search" && (c.Ready || c.Message != "not probed yet") {
			t.Errorf("an addon a run just installed shows ready %v, message %q; want not ready until probed", c.Ready, c.Message)
		}
	}
	// Disabled, it leaves status with the run, before any probe.
	kd.Spec.Addons.Search.Enabled = false
	summarizeVersions(kd, targetVersions(kd, nil))
	if slices.ContainsFunc(kd.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == "karmada-search" }) {
		t.Error("a disabled addon is still listed in status.components")
	}
	kd.Spec.Addons.Search.Enabled = true

	// The addons never enter an upgrade's plan: install.yml converges them
	// at the end of the upgrade run.
	plan, err := planUpgrade(kd, targetVersions(kd, &pipeline.Artifacts{Karmada: "v1.18.1", Kubernetes: "v1.35.4", Etcd: "v3.6.6"}))
	if err != nil || plan != nil {
		t.Errorf("a lagging addon alone planned an upgrade: %+v, %v", plan, err)
	}
}

// readyDeployment is a Deployment of the host cluster namespace cp whose
// rollout of image completed with every replica Ready, or not.
func readyDeployment(name, image string, ready bool) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "cp", Name: name, Generation: 1}}
	d.Spec.Replicas = ptr.To(int32(1))
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: name, Image: image}}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1}
	if ready {
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = 1, 1
	}
	return d
}

func TestObserveContainerizedAddons(t *testing.T) {
	b, _, _, err := pki.Ensure(nil, pki.Request{Addons: pki.Addons{SchedulerEstimator: true}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kd := addonDeployment(true)
	kd.Spec.Mode, kd.Spec.Hosts = kaov1.ContainerizedMode, nil
	img := func(repo string) string { return "registry.test/karmada/" + repo + ":v1.18.1" }
	hc := &pipeline.HostCluster{Namespace: "cp", Client: fake.NewClientset(
		readyDeployment("karmada-search", img("karmada-search"), true),
		readyDeployment("karmada-metrics-adapter", img("karmada-metrics-adapter"), false),
		readyDeployment("karmada-descheduler", img("karmada-descheduler"), true),
		readyDeployment("karmada-scheduler-estimator-zeta", img("karmada-scheduler-estimator"), true),
	)}
	api := probe.API{URL: "https://10.0.0.1:5443"}
	tests := []struct {
		name   string
		probes *addonProbes
		api    probe.API
		want   []string // "name ready: message" of each component, in order
	}{
		{
			name:   "from the Deployments, the APIService and the lease",
			probes: &addonProbes{},
			api:    api,
			want: []string{
				"karmada-search true: 1/1 replicas ready",
				"karmada-metrics-adapter false: 0/1 replicas ready",
				"karmada-descheduler true: 1/1 replicas ready; leader c1_x",
				"karmada-scheduler-estimator false: 1/2 estimators ready; alpha: Deployment cp/karmada-scheduler-estimator-alpha does not exist",
			},
		},
		{
			name:   "an APIService unavailable, the lease lost",
			probes: &addonProbes{unavailable: map[string]bool{searchAPIService: true}, lostLeases: map[string]bool{deschedulerLeaseName: true}},
			api:    api,
			want: []string{
				"karmada-search false: 1/1 replicas ready; APIService v1alpha1.search.karmada.io is not Available",
				"karmada-metrics-adapter false: 0/1 replicas ready",
				"karmada-descheduler false: 1/1 replicas ready; lease karmada-system/karmada-descheduler: not held",
				"karmada-scheduler-estimator false: 1/2 estimators ready; alpha: Deployment cp/karmada-scheduler-estimator-alpha does not exist",
			},
		},
		{
			name:   "no karmada-apiserver answers",
			probes: &addonProbes{},
			want: []string{
				"karmada-search false: 1/1 replicas ready; its APIService cannot be read: karmada-apiserver does not answer",
				"karmada-metrics-adapter false: 0/1 replicas ready",
				"karmada-descheduler false: 1/1 replicas ready; its leader lease cannot be read: karmada-apiserver does not answer",
				"karmada-scheduler-estimator false: 1/2 estimators ready; alpha: Deployment cp/karmada-scheduler-estimator-alpha does not exist",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{ReadyzProber: tc.probes, KarmadaProber: tc.probes, Clock: clocktesting.NewFakePassiveClock(time.Now())}
			got := []string{}
			for _, c := range r.observeContainerizedAddons(context.Background(), kd, hc, b, tc.api) {
				got = append(got, fmt.Sprintf("%s %t: %s", c.Name, c.Ready, c.Message))
				if c.Version != "v1.18.1" {
					t.Errorf("%s reports version %q, want the image's v1.18.1", c.Name, c.Version)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("components:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}

	// With the operator in the host cluster, each ready estimator must also
	// answer a mutual-TLS handshake at its Service's name.
	inCluster := *hc
	inCluster.InCluster = true
	p := &addonProbes{down: map[string]bool{"karmada-scheduler-estimator-zeta.karmada-system.svc.cluster.local:10352": true}}
	r := &Reconciler{ReadyzProber: p, KarmadaProber: p, Clock: clocktesting.NewFakePassiveClock(time.Now())}
	est := r.observeContainerizedAddons(context.Background(), kd, &inCluster, b, api)[3]
	if want := map[string]string{"zeta": "karmada-scheduler-estimator-zeta.karmada-system.svc.cluster.local:10352"}; !maps.Equal(p.handshakes, want) {
		t.Errorf("estimators dialled at %v, want %v", p.handshakes, want)
	}
	if est.Ready || !strings.Contains(est.Message, "0/2 estimators ready") ||
		!strings.Contains(est.Message, "zeta: karmada-scheduler-estimator-zeta.karmada-system.svc.cluster.local:10352: connection refused") {
		t.Errorf("estimators with a failed handshake: %+v", est)
	}

	// Disabled addons are not listed; estimators without members are ready.
	off := addonDeployment(false)
	off.Spec.Addons.SchedulerEstimator.Enabled = true
	off.Spec.Members = nil
	r = &Reconciler{ReadyzProber: &addonProbes{}, KarmadaProber: &addonProbes{}, Clock: clocktesting.NewFakePassiveClock(time.Now())}
	got := r.observeContainerizedAddons(context.Background(), off, hc, b, api)
	if len(got) != 1 || got[0].Name != pipeline.EstimatorComponentPfx || !got[0].Ready || got[0].Message != "no member clusters, no estimators" {
		t.Errorf("only the estimators without members: %+v", got)
	}
}
