package e2e

import (
	"fmt"
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
// controlPlane host. The same install.yml run gives karmada-scheduler the
// estimator flags (it restarts before the estimators serve), and the
// scheduler connects to every member's estimator through its ExternalName
// Service. The addons stay enabled: the certificate step's first run
// disables them, and checkAddonsGone checks what it left (a run of its own
// would cost the test another install run).
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
	enabled := waitForNextRun(t, kd, prev)
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
		argv := processArgv(t, dc, h, "karmada-scheduler")
		for _, want := range []string{"--enable-scheduler-estimator=true", "--scheduler-estimator-port=10352",
			"--scheduler-estimator-cert-file=/etc/karmada/controllers/pki/karmada-scheduler-estimator-client.crt"} {
			if !slices.Contains(argv, want) {
				t.Errorf("karmada-scheduler on %s lacks %q: %q", h, want, argv)
			}
		}
	}
	// Each member's Service sends the scheduler to its estimator on the
	// scheduler's own host: port 10400 plus the member's index by name.
	sorted := slices.Sorted(slices.Values(members))
	for i, m := range sorted {
		want := fmt.Sprintf("ExternalName 127.0.0.1 10352 %d", 10400+i)
		if svc := kubectl("-n", "karmada-system", "get", "service", "karmada-scheduler-estimator-"+m, "-o",
			"jsonpath={.spec.type} {.spec.externalName} {.spec.ports[0].port} {.spec.ports[0].targetPort}"); svc != want {
			t.Errorf("Service karmada-scheduler-estimator-%s is %q, want %s", m, svc, want)
		}
	}
	checkSchedulerConnected(t, dc, cpHosts, members)
}

// checkSchedulerConnected waits until karmada-scheduler has connected to the
// estimator of every member. Only the scheduler that leads connects, so the
// journals of every host in on count. install.yml restarted the scheduler
// with the estimator flags before the estimators' Services existed: its
// first dials failed, and it dials again with a growing back-off, hence the
// five minutes.
func checkSchedulerConnected(t *testing.T, dc *hosts.Cluster, on, members []string) {
	t.Helper()
	waiting := slices.Clone(members)
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(2 * time.Second) {
		journals := ""
		for _, h := range on {
			out, err := dc.Run(t.Context(), h, "journalctl -u karmada-scheduler --no-pager -o cat | grep -F 'has been established' || true")
			if err != nil {
				t.Fatal(err)
			}
			journals += out
		}
		waiting = slices.DeleteFunc(waiting, func(m string) bool {
			return strings.Contains(journals, "of cluster("+m+") has been established")
		})
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	last := []string{}
	for _, h := range on {
		out, err := dc.Run(t.Context(), h, "journalctl -u karmada-scheduler --no-pager -o cat | grep -iF estimator | tail -10")
		if err != nil {
			out = err.Error()
		}
		last = append(last, h+":\n"+out)
	}
	t.Errorf("karmada-scheduler did not connect to the estimators of %v within 5m; its last lines about estimators:\n%s",
		waiting, strings.Join(last, "\n"))
}

// processArgv is the command line of the main process of a systemd service
// on a test host.
func processArgv(t testing.TB, dc *hosts.Cluster, host, service string) []string {
	t.Helper()
	argv, err := dc.ServiceArgv(t.Context(), host, service)
	if err != nil {
		t.Fatal(err)
	}
	return argv
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
// disableAddons, that status (within the next probes), the APIServices,
// the addons' Services and API in karmada-apiserver, and the hosts' units,
// files and karmada-scheduler's estimator flags have forgotten every addon.
// Another run may be restarting the API servers meanwhile, so a failed
// kubectl is retried.
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
		out, err = dc.Run(t.Context(), h, "ls /etc/karmada/addons /etc/systemd/system/karmada-s* /etc/systemd/system/karmada-d* "+
			"/etc/systemd/system/karmada-m* /etc/karmada/controllers/pki/karmada-scheduler-estimator-client.crt 2>&1 || true")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.Contains(line, "No such file") && !strings.HasSuffix(line, "karmada-scheduler.service") {
				t.Errorf("left on %s: %q", h, line)
			}
		}
		if argv := processArgv(t, dc, h, "karmada-scheduler"); slices.Contains(argv, "--enable-scheduler-estimator=true") {
			t.Errorf("karmada-scheduler on %s still calls the estimators: %q", h, argv)
		}
	}
	services := []string{"karmada-search", "karmada-metrics-adapter"}
	for _, m := range kd.Spec.Members {
		services = append(services, "karmada-scheduler-estimator-"+m.Name)
	}
	for _, svc := range services {
		if gone, out := karmadaNotFound(t, kd, "-n", "karmada-system", "get", "service", svc); !gone {
			t.Errorf("Service %s is still there: %s", svc, out)
		}
	}
	if gone, out := karmadaNotFound(t, kd, "get", "--raw", "/apis/search.karmada.io/v1alpha1"); !gone {
		t.Errorf("karmada-apiserver still serves search.karmada.io: %.300s", out)
	}
}

// karmadaNotFound runs kubectl with args against kd's karmada-apiserver
// until it answers NotFound (true) or with the object (false, its output);
// another error, an API server restarting, is retried for a minute, then
// returned as the output.
func karmadaNotFound(t *testing.T, kd *kaov1.KarmadaDeployment, args ...string) (bool, string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		out, err := karmadaKubectlErr(t, kd, args...)
		switch {
		case err == nil:
			return false, out
		case strings.Contains(err.Error(), "NotFound"):
			return true, ""
		case time.Now().After(deadline):
			return false, err.Error()
		}
	}
}
