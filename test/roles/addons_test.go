package roles

import (
	"context"
	"crypto/tls"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
)

// addonServices are the single-service addons.
var addonServices = []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler"}

// addonMember is the member whose estimator the addons steps run: a
// member membersSteps left joined, so its Cluster is there and Ready.
const addonMember = pushB

// addonsSteps enable every addon on the control-plane hosts of e, with
// addonMember as the estimators' member, and prove that each addon runs on
// every control-plane host, that karmada-apiserver serves search.karmada.io,
// metrics.k8s.io and custom.metrics.k8s.io through them, and that the
// member's estimator serves gRPC over mutual TLS with kao's certificates. A
// second run changes nothing. The addons stay on until the test hosts go.
//
// The checks that need another run, of the controllers with the addons on
// or of a spec that disables them, are TestBinaryInstall's (test/e2e
// addons_test.go), whose runs do both anyway: karmada-scheduler given the
// estimator flags by install.yml and connected to every member's estimator;
// once the addons are disabled, their services, units, files, Services and
// registrations gone, and karmada-scheduler no longer calling estimators.
func addonsSteps(t *testing.T, e *planeEnv) {
	t.Helper()
	dc, cpHosts, cpNames, a, vars, b := e.dc, e.cpHosts, e.cpNames, e.a, e.vars, e.pki
	ctx := context.Background()
	k := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		return testenv.Kubectl(ctx, e.kubectl, e.admin, args...)
	}
	kOK := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := k(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	kd := e.deployment([]kaov1.MemberSpec{memberSpec(addonMember, kaov1.PushSyncMode)}, nil)
	on := &kaov1.AddonSpec{Enabled: true}
	kd.Spec.Addons = kaov1.AddonsSpec{Search: on, MetricsAdapter: on, Descheduler: on, SchedulerEstimator: on}
	kubeconfigs := map[string]string{addonMember: e.kubeconfigs[addonMember]}
	enabledInv := a.memberInventory(t, "addons-enabled.json", kd, kubeconfigs)
	estimator := "karmada-scheduler-estimator-" + addonMember
	allServices := append(slices.Clone(addonServices), estimator)

	testenv.Step(t, "installs every addon on the control-plane hosts", func(t *testing.T) {
		start := time.Now()
		r := a.playbookLong(t, enabledInv, vars, testdataPath(t, "addons-install.yml"))
		r.mustSucceed(t, cpNames...)
		t.Logf("addons installed in %s", time.Since(start).Round(time.Second))
		for _, task := range []string{
			"TASK [karmada_addons : Karmada addons | Wait for the services to be healthy]",
			"TASK [karmada_addons : Karmada addons | Wait for the API servers to serve]",
			"TASK [karmada_addons : Karmada addons | Wait for the API servers to be ready]",
			"TASK [karmada_addons : Karmada addons | Wait for the APIServices to be available]",
		} {
			if !strings.Contains(r.out, task) {
				t.Errorf("the run did not reach %q", task)
			}
		}
		// kao learns the versions that run from this report (status.components).
		for h, reported := range reportedVersions(t, r.out, cpNames) {
			for _, name := range append(slices.Clone(addonServices), "karmada-scheduler-estimator") {
				if reported[name] != e.m.Karmada {
					t.Errorf("%s reports %s running %q, want %s (all reported: %v)", h, name, reported[name], e.m.Karmada, reported)
				}
			}
		}
		for _, h := range cpNames {
			out, err := dc.Run(ctx, h, "systemctl is-active "+strings.Join(allServices, " ")+" || true")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(out); !slices.Equal(got, []string{"active", "active", "active", "active"}) {
				t.Errorf("%s: %v are %q, want all active", h, allServices, got)
			}
			out, err = dc.Run(ctx, h, "stat -c '%n %a' /etc/karmada/addons/pki/*.key /etc/karmada/addons/*.kubeconfig /etc/karmada/addons/members/*")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if f := strings.Fields(line); len(f) != 2 || f[1] != "600" {
					t.Errorf("%s: %q: a key or kubeconfig not 0600", h, line)
				}
			}
			if !strings.Contains(out, "/etc/karmada/addons/members/"+addonMember+".kubeconfig") {
				t.Errorf("no kubeconfig of %s on %s:\n%s", addonMember, h, out)
			}
		}
	})

	testenv.Step(t, "karmada-apiserver serves the addons' APIs", func(t *testing.T) {
		for _, path := range []string{
			"/apis/search.karmada.io/v1alpha1",
			"/apis/metrics.k8s.io/v1beta1",
			"/apis/custom.metrics.k8s.io/v1beta2",
			"/apis/custom.metrics.k8s.io/v1beta1",
		} {
			out := kOK(t, "get", "--raw", path)
			if !strings.Contains(out, `"kind":"APIResourceList"`) {
				t.Errorf("%s answered %.200q, want an APIResourceList", path, out)
			}
		}
		if out := kOK(t, "get", "--raw", "/apis/search.karmada.io/v1alpha1"); !strings.Contains(out, `"name":"resourceregistries"`) {
			t.Errorf("search.karmada.io serves no resourceregistries: %.300s", out)
		}
		// karmada-search stores in etcd: a ResourceRegistry round-trips.
		kOK(t, "apply", "-f", a.writeFile(t, "registry.yaml", []byte(`apiVersion: search.karmada.io/v1alpha1
kind: ResourceRegistry
metadata:
  name: kao-probe
spec:
  targetCluster:
    clusterNames: [`+addonMember+`]
  resourceSelectors:
    - apiVersion: v1
      kind: ConfigMap
`)))
		if got := kOK(t, "get", "resourceregistry", "kao-probe", "-o", "jsonpath={.metadata.name}"); got != "kao-probe" {
			t.Errorf("the ResourceRegistry reads back as %q", got)
		}
		kOK(t, "delete", "resourceregistry", "kao-probe")
	})

	testenv.Step(t, "the descheduler and the estimator are healthy", func(t *testing.T) {
		for _, h := range cpNames {
			for _, url := range []string{"http://127.0.0.1:10358/healthz", "http://127.0.0.1:10600/healthz"} {
				out, err := dc.Run(ctx, h, `python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' `+url)
				if err != nil || strings.TrimSpace(out) != "ok" {
					t.Errorf("%s on %s: %q, %v; want ok", url, h, out, err)
				}
			}
			argv := processArgv(ctx, t, dc, h, estimator)
			for _, want := range []string{"--cluster-name=" + addonMember, "--server-port=10400",
				"--kubeconfig=/etc/karmada/addons/members/" + addonMember + ".kubeconfig"} {
				if !slices.Contains(argv, want) {
					t.Errorf("%s on %s lacks %q: %q", estimator, h, want, argv)
				}
			}
		}
	})

	testenv.Step(t, "the estimator serves gRPC over mutual TLS with kao's certificates", func(t *testing.T) {
		cert, err := tls.X509KeyPair(b[pki.CertFile(pki.EstimatorClient)], b[pki.KeyFile(pki.EstimatorClient)])
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range cpHosts {
			addr := net.JoinHostPort(cp.Address, "10400")
			cfg := &tls.Config{RootCAs: caPool(t, b), Certificates: []tls.Certificate{cert}, ServerName: cp.Address,
				NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
			if err != nil {
				t.Fatalf("a TLS handshake with %s, verified against kao's CA: %v", addr, err)
			}
			if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
				t.Errorf("%s negotiated %q, want h2 (gRPC)", addr, p)
			}
			_ = conn.Close()
			// Without a client certificate the estimator hangs up.
			noClient := cfg.Clone()
			noClient.Certificates = nil
			conn, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, noClient)
			if err == nil {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, err = conn.Read(make([]byte, 1))
				_ = conn.Close()
			}
			if err == nil || !strings.Contains(err.Error(), "certificate") {
				t.Errorf("the estimator at %s served a client without a certificate (err %v)", addr, err)
			}
		}
	})

	testenv.Step(t, "a second addons run changes nothing", func(t *testing.T) {
		r := a.playbookLong(t, enabledInv, vars, testdataPath(t, "addons-install.yml"))
		r.mustSucceed(t, cpNames...)
		for _, h := range cpNames {
			if r.recap[h].Changed != 0 {
				t.Errorf("the second run changed %d things on %s:\n%s", r.recap[h].Changed, h, r.out)
			}
		}
	})
}

// reportedVersions reads the name=version pairs testdata/addons-install.yml
// prints from kao_common's version report, one report per host; it fails t
// unless each of hosts reported.
func reportedVersions(t *testing.T, out string, hosts []string) map[string]map[string]string {
	t.Helper()
	got := map[string]map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ok: \[([^\]]+)\] => \{\n\s+"msg": "kao-versions ([^"]*)"`).FindAllStringSubmatch(out, -1) {
		versions := map[string]string{}
		for _, kv := range strings.Fields(m[2]) {
			name, v, _ := strings.Cut(kv, "=")
			versions[name] = v
		}
		got[m[1]] = versions
	}
	for _, h := range hosts {
		if _, ok := got[h]; !ok {
			t.Fatalf("%s printed no version report:\n%s", h, out)
		}
	}
	return got
}
