package roles

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// addonServices are the single-service addons.
var addonServices = []string{"karmada-search", "karmada-metrics-adapter", "karmada-descheduler"}

// addonMember is the member cluster whose estimator the test runs.
const addonMember = "member-a"

// TestKarmadaAddons installs managed etcd, karmada-apiserver,
// karmada-aggregated-apiserver and Karmada's objects on the first of two
// hosts and the controllers on the second, then enables every addon with one
// member cluster (a real kube-apiserver on this machine), and proves that
// each addon runs on the control-plane host, that karmada-apiserver serves
// search.karmada.io, metrics.k8s.io and custom.metrics.k8s.io through them,
// that the member's estimator serves gRPC over mutual TLS with kao's
// certificates and that karmada-scheduler, given the estimator flags,
// connects to it once the member's Cluster exists. A second run changes
// nothing. Then every addon is disabled, and the test proves that the
// services, units, files and registrations are gone.
func TestKarmadaAddons(t *testing.T) {
	requirePrerequisites(t)
	bundle, m := buildBundle(t)
	kubectl := filepath.Join(bundle, "kubernetes", m.Kubernetes, "bin", "kubectl")
	dc := hosts.Start(t, 2)
	hs := dc.Hosts()
	apiHosts, cpHosts := hs[:1], hs[1:]
	cp := cpHosts[0]
	ctx := context.Background()
	a := newAnsible(t, dc)

	b, pkiDir := issuePKI(t, pki.Request{
		EtcdHosts:         pkiHosts(apiHosts),
		APIServerHosts:    pkiHosts(apiHosts),
		ControlPlaneHosts: pkiHosts(cpHosts),
		Endpoint:          apiHosts[0].Address + ":5443",
		Addons:            pki.Addons{Search: true, MetricsAdapter: true, Descheduler: true, SchedulerEstimator: true},
	})
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pkiDir})
	kc, err := b.Kubeconfig(pki.AdminClient, apiURL(apiHosts[0]))
	if err != nil {
		t.Fatal(err)
	}
	admin := a.writeFile(t, "admin.kubeconfig", kc)
	k := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		return testenv.Kubectl(ctx, kubectl, admin, args...)
	}
	kOK := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := k(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	member := members.Start(t, 1, members.Options{Address: dc.Gateway()})[0]
	memberKubeconfig := a.writeFile(t, addonMember+".kubeconfig", member.Kubeconfig)
	deployment := func(enabled bool) *kaov1.KarmadaDeployment {
		kd := etcdDeployment(apiHosts, kaov1.ManagedEtcd{PurgeDataOnDelete: true})
		kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: cp.Name, Address: cp.Address, Port: int32(cp.Port), User: cp.User,
			Roles: []kaov1.HostRole{kaov1.ControlPlaneRole}})
		on := &kaov1.AddonSpec{Enabled: enabled}
		kd.Spec.Addons = kaov1.AddonsSpec{Search: on, MetricsAdapter: on, Descheduler: on, SchedulerEstimator: on}
		kd.Spec.Members = []kaov1.MemberSpec{memberSpec(addonMember, kaov1.PushSyncMode)}
		return kd
	}
	kubeconfigs := map[string]string{addonMember: memberKubeconfig}
	enabledInv := a.memberInventory(t, "enabled.json", deployment(true), kubeconfigs)
	disabledInv := a.memberInventory(t, "disabled.json", deployment(false), kubeconfigs)
	estimator := "karmada-scheduler-estimator-" + addonMember
	allServices := append(slices.Clone(addonServices), estimator)

	testenv.Step(t, "installs the control plane", func(t *testing.T) {
		a.playbookLong(t, enabledInv, vars, testdataPath(t, "aggregated-install.yml")).mustSucceed(t, apiHosts[0].Name)
		a.playbookLong(t, enabledInv, vars, testdataPath(t, "controllers-install.yml")).mustSucceed(t, cp.Name)
	})

	testenv.Step(t, "installs every addon on the control-plane host", func(t *testing.T) {
		start := time.Now()
		r := a.playbookLong(t, enabledInv, vars, testdataPath(t, "addons-install.yml"))
		r.mustSucceed(t, cp.Name)
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
		reported := reportedVersions(t, r.out)
		for _, name := range append(slices.Clone(addonServices), "karmada-scheduler-estimator") {
			if reported[name] != m.Karmada {
				t.Errorf("%s reports %s running %q, want %s (all reported: %v)", cp.Name, name, reported[name], m.Karmada, reported)
			}
		}
		out, err := dc.Run(ctx, cp.Name, "systemctl is-active "+strings.Join(allServices, " ")+" || true")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(out); !slices.Equal(got, []string{"active", "active", "active", "active"}) {
			t.Errorf("%v are %q, want all active", allServices, got)
		}
		out, err = dc.Run(ctx, cp.Name, "stat -c '%n %a' /etc/karmada/addons/pki/*.key /etc/karmada/addons/*.kubeconfig /etc/karmada/addons/members/*")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) != 2 || f[1] != "600" {
				t.Errorf("%q: a key or kubeconfig not 0600", line)
			}
		}
		if !strings.Contains(out, "/etc/karmada/addons/members/"+addonMember+".kubeconfig") {
			t.Errorf("no kubeconfig of %s on the host:\n%s", addonMember, out)
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
		for _, url := range []string{"http://127.0.0.1:10358/healthz", "http://127.0.0.1:10600/healthz"} {
			out, err := dc.Run(ctx, cp.Name, `python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' `+url)
			if err != nil || strings.TrimSpace(out) != "ok" {
				t.Errorf("%s on %s: %q, %v; want ok", url, cp.Name, out, err)
			}
		}
		argv := processArgv(ctx, t, dc, cp.Name, estimator)
		for _, want := range []string{"--cluster-name=" + addonMember, "--server-port=10400",
			"--kubeconfig=/etc/karmada/addons/members/" + addonMember + ".kubeconfig"} {
			if !slices.Contains(argv, want) {
				t.Errorf("%s lacks %q: %q", estimator, want, argv)
			}
		}
	})

	testenv.Step(t, "the estimator serves gRPC over mutual TLS with kao's certificates", func(t *testing.T) {
		addr := net.JoinHostPort(cp.Address, "10400")
		cert, err := tls.X509KeyPair(b[pki.CertFile(pki.EstimatorClient)], b[pki.KeyFile(pki.EstimatorClient)])
		if err != nil {
			t.Fatal(err)
		}
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
			t.Errorf("the estimator served a client without a certificate (err %v)", err)
		}
	})

	testenv.Step(t, "karmada-scheduler connects to the member's estimator", func(t *testing.T) {
		argv := processArgv(ctx, t, dc, cp.Name, "karmada-scheduler")
		for _, want := range []string{"--enable-scheduler-estimator=true", "--scheduler-estimator-port=10352",
			"--scheduler-estimator-cert-file=/etc/karmada/controllers/pki/karmada-scheduler-estimator-client.crt"} {
			if !slices.Contains(argv, want) {
				t.Errorf("karmada-scheduler lacks %q: %q", want, argv)
			}
		}
		svc := kOK(t, "-n", "karmada-system", "get", "service", estimator, "-o",
			"jsonpath={.spec.type} {.spec.externalName} {.spec.ports[0].port} {.spec.ports[0].targetPort}")
		if svc != "ExternalName 127.0.0.1 10352 10400" {
			t.Errorf("Service %s is %q, want ExternalName 127.0.0.1 10352 10400", estimator, svc)
		}
		kOK(t, "apply", "-f", a.writeFile(t, "cluster.yaml", []byte(`apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: `+addonMember+`
spec:
  syncMode: Push
  apiEndpoint: `+member.Server+`
`)))
		eventually(t, 90*time.Second, "karmada-scheduler's connection to the estimator", func() (bool, string) {
			out, err := dc.Run(ctx, cp.Name, "journalctl -u karmada-scheduler --no-pager -o cat | grep -E 'estimator server.*"+addonMember+"' | tail -3")
			return err == nil && strings.Contains(out, "has been established"), out
		})
		kOK(t, "delete", "cluster", addonMember, "--wait=false")
	})

	testenv.Step(t, "a second run changes nothing", func(t *testing.T) {
		r := a.playbookLong(t, enabledInv, vars, testdataPath(t, "addons-install.yml"))
		r.mustSucceed(t, cp.Name)
		if r.recap[cp.Name].Changed != 0 {
			t.Errorf("the second run changed %d things:\n%s", r.recap[cp.Name].Changed, r.out)
		}
	})

	testenv.Step(t, "disabling the addons removes them", func(t *testing.T) {
		r := a.playbookLong(t, disabledInv, vars, testdataPath(t, "addons-install.yml"))
		r.mustSucceed(t, cp.Name)
		a.playbookLong(t, disabledInv, vars, testdataPath(t, "controllers-install.yml")).mustSucceed(t, cp.Name)
		reported := reportedVersions(t, r.out)
		for _, name := range append(slices.Clone(addonServices), "karmada-scheduler-estimator") {
			if v, ok := reported[name]; ok {
				t.Errorf("%s still reports %s (%q) after its removal", cp.Name, name, v)
			}
		}
		for _, s := range allServices {
			out, _ := dc.Run(ctx, cp.Name, "systemctl show -p LoadState,ActiveState --value "+s+".service | tr '\\n' ' '")
			if strings.TrimSpace(out) != "not-found inactive" {
				t.Errorf("%s: %q, want not-found inactive", s, out)
			}
		}
		out, err := dc.Run(ctx, cp.Name, "ls /etc/karmada/addons /etc/systemd/system/karmada-s* /etc/systemd/system/karmada-d* "+
			"/etc/systemd/system/karmada-m* /etc/karmada/controllers/pki/karmada-scheduler-estimator-client.crt 2>&1 || true")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.Contains(line, "No such file") && !strings.HasSuffix(line, "karmada-scheduler.service") {
				t.Errorf("left on the host: %q", line)
			}
		}
		for _, obj := range []string{
			"apiservice/v1alpha1.search.karmada.io", "apiservice/v1beta1.metrics.k8s.io",
			"apiservice/v1beta2.custom.metrics.k8s.io", "apiservice/v1beta1.custom.metrics.k8s.io",
		} {
			if out, err := k(t, "get", obj); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Errorf("%s is still there: %v %s", obj, err, out)
			}
		}
		for _, svc := range []string{"karmada-search", "karmada-metrics-adapter", estimator} {
			if out, err := k(t, "-n", "karmada-system", "get", "service", svc); err == nil || !strings.Contains(err.Error(), "NotFound") {
				t.Errorf("Service %s is still there: %v %s", svc, err, out)
			}
		}
		if _, err := k(t, "get", "--raw", "/apis/search.karmada.io/v1alpha1"); err == nil {
			t.Error("karmada-apiserver still serves search.karmada.io")
		}
		if argv := processArgv(ctx, t, dc, cp.Name, "karmada-scheduler"); slices.Contains(argv, "--enable-scheduler-estimator=true") {
			t.Errorf("karmada-scheduler still calls the estimators: %q", argv)
		}
	})
}

// reportedVersions reads the name=version pairs testdata/addons-install.yml
// prints from kao_common's version report (one host).
func reportedVersions(t *testing.T, out string) map[string]string {
	t.Helper()
	m := regexp.MustCompile(`"msg": "kao-versions ([^"]*)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the run printed no version report:\n%s", out)
	}
	got := map[string]string{}
	for _, kv := range strings.Fields(m[1]) {
		name, v, _ := strings.Cut(kv, "=")
		got[name] = v
	}
	return got
}
