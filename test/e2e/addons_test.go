package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
)

// addonComponents are the status entries of the four addons.
var addonComponents = []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler", "karmada-scheduler-estimator"}

// addonsBySpec enables every addon of a Binary deployment whose members have
// joined, as a platform team would with one patch, and checks what the user
// sees: a successful run, each addon in status.components on the
// controlPlane hosts, ready and running Karmada's version, its certificates
// in status.certificates, karmada-apiserver serving search.karmada.io and
// metrics.k8s.io through them, an estimator per member on every
// controlPlane host. The addons stay enabled: the certificate step's first
// run disables them, and checkAddonsGone checks what it left (a run of its
// own would cost the test another install run).
func addonsBySpec(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, kubectl func(args ...string) string) {
	before := get(t, kd)
	karmada := ""
	for _, c := range before.Status.Components {
		if c.Name == "karmada-controller-manager" {
			karmada = c.Version
		}
	}
	cpHosts := controlPlaneHosts(before)
	members := []string{}
	for _, m := range before.Spec.Members {
		members = append(members, m.Name)
	}

	start := time.Now()
	prev := before.Status.LastRun.ID
	updateSpec(t, kd, enableAddons)
	enabled := waitForNextRun(t, kd, prev, 10*time.Minute)
	if last := enabled.Status.LastRun; last.Result != kaov1.RunSucceeded {
		t.Fatalf("the run enabling the addons failed: %+v", last)
	}
	t.Logf("the run enabling every addon took %s", time.Since(start).Round(time.Second))

	ready := waitForAddonsReady(t, kd)
	for _, name := range addonComponents {
		i := slices.IndexFunc(ready.Status.Components, func(c kaov1.ComponentStatus) bool { return c.Name == name })
		if i < 0 {
			t.Errorf("status.components does not list %s: %+v", name, ready.Status.Components)
			continue
		}
		c := ready.Status.Components[i]
		if !c.Ready || !slices.Equal(c.Hosts, cpHosts) || c.Version != karmada || c.TargetVersion != "" {
			t.Errorf("%s: %+v; want ready on %v, running %s", name, c, cpHosts, karmada)
		}
		if len(c.Instances) != len(cpHosts) {
			t.Errorf("%s reports %d instances, want one per controlPlane host: %+v", name, len(c.Instances), c.Instances)
		}
	}
	certs := []string{}
	for _, c := range ready.Status.Certificates {
		certs = append(certs, c.Name)
	}
	for _, want := range addonComponents {
		if !slices.ContainsFunc(certs, func(n string) bool { return strings.HasPrefix(n, want+"-") }) {
			t.Errorf("status.certificates has no certificate of %s: %v", want, certs)
		}
	}
	for _, path := range []string{"/apis/search.karmada.io/v1alpha1", "/apis/metrics.k8s.io/v1beta1"} {
		if out := kubectl("get", "--raw", path); !strings.Contains(out, `"kind":"APIResourceList"`) {
			t.Errorf("%s answered %.200q, want an APIResourceList", path, out)
		}
	}
	for _, h := range cpHosts {
		units := []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler"}
		for _, m := range members {
			units = append(units, "karmada-scheduler-estimator-"+m)
		}
		out, err := dc.Run(t.Context(), h, "systemctl is-active "+strings.Join(units, " ")+" || true")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(out); len(got) != len(units) || slices.ContainsFunc(got, func(s string) bool { return s != "active" }) {
			t.Errorf("on %s, %v are %q; want all active", h, units, got)
		}
	}
}

// controlPlaneHosts are the names of the deployment's controlPlane hosts,
// where the addons run.
func controlPlaneHosts(kd *kaov1.KarmadaDeployment) []string {
	out := []string{}
	for _, h := range kd.Spec.Hosts {
		if slices.Contains(h.Roles, kaov1.ControlPlaneRole) {
			out = append(out, h.Name)
		}
	}
	return out
}

// enableAddons is the spec change that enables every addon.
func enableAddons(s *kaov1.KarmadaDeploymentSpec) {
	on := func() *kaov1.AddonSpec { return &kaov1.AddonSpec{Enabled: true} }
	s.Addons = kaov1.AddonsSpec{Search: on(), MetricsAdapter: on(), Descheduler: on(), SchedulerEstimator: on()}
}

// waitForAddonsReady waits until the probes after a run list every addon
// and ControlPlaneReady holds with them, and returns the deployment then.
func waitForAddonsReady(t testing.TB, kd *kaov1.KarmadaDeployment) *kaov1.KarmadaDeployment {
	t.Helper()
	for _, name := range addonComponents {
		waitForComponent(t, kd, name, 2*time.Minute)
	}
	return waitForCondition(t, kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionTrue, kaov1.ComponentsHealthyReason, 2*time.Minute)
}

// disableAddons is the spec change that disables every addon.
func disableAddons(s *kaov1.KarmadaDeploymentSpec) {
	for _, a := range []*kaov1.AddonSpec{s.Addons.Search, s.Addons.MetricsAdapter, s.Addons.Descheduler, s.Addons.SchedulerEstimator} {
		if a != nil {
			a.Enabled = false
		}
	}
}

// checkAddonsGone checks, after the successful run that applied
// disableAddons, that status (within the next probes), the APIServices and
// the hosts' services have forgotten every addon. Another run may be
// restarting the API servers meanwhile, so a failed kubectl is retried.
func checkAddonsGone(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	cpHosts := controlPlaneHosts(kd)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		cur := get(t, kd)
		left := []string{}
		for _, c := range cur.Status.Components {
			if slices.Contains(addonComponents, c.Name) {
				left = append(left, "component "+c.Name)
			}
		}
		for _, c := range cur.Status.Certificates {
			if slices.ContainsFunc(addonComponents, func(a string) bool { return strings.HasPrefix(c.Name, a+"-") }) {
				left = append(left, "certificate "+c.Name)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 minutes after the addons were disabled, status still lists %v", left)
		}
	}
	var apiservices string
	waitFor(t, 2*time.Minute, "kubectl get apiservices", func() bool {
		out, err := karmadaKubectlErr(t, get(t, kd), "get", "apiservices", "-o", "name")
		apiservices = out
		return err == nil
	})
	if strings.Contains(apiservices, "search.karmada.io") || strings.Contains(apiservices, "metrics.k8s.io") {
		t.Errorf("the addons' APIServices are still registered:\n%s", apiservices)
	}
	for _, h := range cpHosts {
		out, err := dc.Run(t.Context(), h, "systemctl list-units --all --no-legend 'karmada-search*' 'karmada-metrics-adapter*' "+
			"'karmada-descheduler*' 'karmada-scheduler-estimator*' | wc -l")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "0" {
			t.Errorf("on %s, %s addon units are left", h, strings.TrimSpace(out))
		}
	}
}
