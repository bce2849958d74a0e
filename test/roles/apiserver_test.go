package roles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/readiness"
)

// apiServerSteps install managed etcd on every host of e and
// karmada-apiserver on e.apiHosts with kao's real install playbook (no
// controlPlane hosts yet), prove that both API servers serve the same data
// to the administrator, that Karmada's APIs answer through the aggregated
// API server (aggregatedAPIServerSteps), that extra args pass literally, and
// roll renewed certificates out. They return the install's inventory, which
// uninstallStep removes the plane with.
func apiServerSteps(t *testing.T, e *planeEnv) string {
	t.Helper()
	root := repoRoot(t)
	kubectl, dc, hs, names, apiHosts, a, vars := e.kubectl, e.dc, e.hosts, e.names, e.apiHosts, e.a, e.vars
	ctx := context.Background()
	bundlePKI, pkiDir := e.pki, e.pkiDir
	install := filepath.Join(root, "playbooks", "install.yml")

	// An extra arg whose value systemd, a shell and Jinja would each
	// interpret: it must reach kube-apiserver byte for byte, and the lookup
	// must never run on the controller. --external-hostname takes any string.
	sentinel := filepath.Join(a.dir, "pwned")
	payload := "a b $HOME ${HOME} %n %% \"dq\" 'sq' \\ \\n \ttab\nline2 {{ lookup('pipe', 'touch " + sentinel + "') }}"
	kd := apiServerDeployment(hs, apiHosts)
	kd.Spec.APIServer.ExtraArgs = []kaov1.Arg{{Name: "external-hostname", Value: payload}}
	kd.Spec.APIServer.FeatureGates = []kaov1.FeatureGate{{Name: "APIResponseCompression", Enabled: false}}
	inv := a.inventory(t, "inventory.json", kd)

	testenv.Step(t, "installs etcd and two API servers", func(t *testing.T) {
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, names...)
		if !strings.Contains(r.out, "TASK [karmada_apiserver : Karmada apiserver | Wait for karmada-apiserver to be ready]") {
			t.Errorf("the run did not wait for the API servers:\n%s", r.out)
		}
		for _, h := range names {
			if r.recap[h].Changed == 0 {
				t.Errorf("the first run changed nothing on %s: %+v", h, r.recap[h])
			}
		}
	})

	client := adminHTTPClient(t, bundlePKI)
	kubeconfigs := e.adminKubeconfigs

	testenv.Step(t, "serves readyz and version on every API server", func(t *testing.T) {
		for i, h := range apiHosts {
			if got := readyz(ctx, t, client, h); got != "ok" {
				t.Errorf("%s /readyz says %q, want ok", h.Name, got)
			}
			if v := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[i], "get", "--raw", "/version"); !strings.Contains(v, `"gitVersion": "`+e.m.Kubernetes+`"`) {
				t.Errorf("%s /version is not %s: %s", h.Name, e.m.Kubernetes, v)
			}
		}
		// Anonymous requests are refused.
		anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(t, bundlePKI)}}}
		resp, err := anon.Get(apiURL(apiHosts[0]) + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("an anonymous /readyz got %s, want 401", resp.Status)
		}
	})

	testenv.Step(t, "shares etcd between the API servers", func(t *testing.T) {
		testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[0], "create", "namespace", "kao-shared")
		if out := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[1], "get", "namespace", "kao-shared", "-o", "jsonpath={.metadata.name}"); out != "kao-shared" {
			t.Errorf("%s does not see the namespace created via %s: %q", apiHosts[1].Name, apiHosts[0].Name, out)
		}
	})

	testenv.Step(t, "installs tight modes and no API server on the etcd-only host", func(t *testing.T) {
		for _, h := range apiHosts {
			out, err := dc.Run(ctx, h.Name, "stat -c '%n %a %U' /etc/karmada/pki/*.key /etc/karmada/pki/*.crt /etc/karmada/pki/sa.pub; "+
				"test ! -e /etc/karmada/pki/admin-client.key || echo admin-key-on-host")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) != 3 {
					t.Errorf("%s: unexpected line %q", h.Name, line)
					continue
				}
				want := "644"
				if strings.HasSuffix(f[0], ".key") {
					want = "600"
				}
				if f[1] != want || f[2] != "root" {
					t.Errorf("%s: %s has mode %s owner %s, want %s root", h.Name, f[0], f[1], f[2], want)
				}
			}
		}
		out, err := dc.Run(ctx, names[2], "test ! -e /etc/systemd/system/karmada-apiserver.service || echo unit")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s got karmada-apiserver although it is not an apiServer host: %q, %v", names[2], out, err)
		}
	})

	testenv.Step(t, "passes extra args and feature gates literally", func(t *testing.T) {
		argv := processArgv(ctx, t, dc, apiHosts[0].Name, "karmada-apiserver")
		for _, want := range []string{
			"--external-hostname=" + payload,
			"--feature-gates=APIResponseCompression=false",
			"--secure-port=5443",
			"--authentication-config=/etc/karmada/karmada-apiserver-authentication.yaml",
			"--advertise-address=" + apiHosts[0].Address,
			"--etcd-servers=" + strings.Join(clientURLs(hs), ","),
		} {
			if !slices.Contains(argv, want) {
				t.Errorf("kube-apiserver did not get %q; its argv is %q", want, argv)
			}
		}
		if _, err := os.Stat(sentinel); err == nil {
			t.Error("a Jinja lookup from an extra arg ran on the controller")
		}
	})

	// install.yml put karmada-aggregated-apiserver and Karmada's objects on
	// the apiServer hosts too.
	aggregatedAPIServerSteps(t, a, dc, kubectl, inv, vars, kubeconfigs)

	testenv.Step(t, "refuses an extra arg karmada_apiserver manages", func(t *testing.T) {
		bad := apiServerDeployment(hs, apiHosts)
		bad.Spec.APIServer.ExtraArgs = []kaov1.Arg{{Name: "anonymous-auth", Value: "true"}}
		r := a.playbook(t, a.inventory(t, "inventory-bad-apiserver.json", bad), vars, install)
		if r.err == nil {
			t.Fatalf("the install accepted --anonymous-auth as an extra arg:\n%s", r.out)
		}
		if !strings.Contains(r.out, "--anonymous-auth is not a flag the karmada_apiserver role can pass on") {
			t.Errorf("the failure does not name the flag:\n%s", r.out)
		}
		if got := readyz(ctx, t, client, apiHosts[0]); got != "ok" {
			t.Errorf("the refused run disturbed %s: /readyz says %q", apiHosts[0].Name, got)
		}
	})

	testenv.Step(t, "rolls renewed certificates out one host at a time, never without a ready API server", func(t *testing.T) {
		// Every leaf is re-issued, the controllers' and addons' too (they
		// are not installed yet); the CA stays, so the certificates of
		// e.pki the later steps use stay valid.
		req := e.pkiReq
		req.Reissue = true
		renewed, _, changed, err := pki.Ensure(bundlePKI, req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range renewed {
			if err := os.WriteFile(filepath.Join(pkiDir, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		admin, err := tls.X509KeyPair(bundlePKI[pki.CertFile(pki.AdminClient)], bundlePKI[pki.KeyFile(pki.AdminClient)])
		if err != nil {
			t.Fatal(err)
		}
		urls := []string{apiURL(apiHosts[0]), apiURL(apiHosts[1])}
		started := time.Now()
		prober := readiness.Start(urls, admin, caPool(t, bundlePKI), 200*time.Millisecond)
		r := a.playbook(t, inv, vars, install)
		report := prober.Stop()
		r.mustSucceed(t, names...)
		t.Logf("renewed %d certificates in %s: %s", len(changed), time.Since(started).Round(time.Second), report)
		for _, o := range report.Outages() {
			t.Errorf("no API server was in rotation at %s (each failed %d checks in a row): %v", o.At.Format(time.RFC3339Nano), readiness.Fall, o.Errors)
		}
		want := certSerial(t, renewed, pki.APIServerServer)
		for _, u := range urls {
			if got := report.LastSerial(u); got == nil || got.Cmp(want) != 0 {
				t.Errorf("%s serves certificate %v after the run, want the renewed %v", u, got, want)
			}
		}
		// Each member and each API server went down only after the previous
		// one was back, and the leader handed its leadership on first.
		for _, unit := range []struct {
			name string
			on   []string
		}{{"karmada-etcd", names}, {"karmada-apiserver", []string{apiHosts[0].Name, apiHosts[1].Name}}} {
			ws := restartWindows(ctx, t, dc, unit.name, unit.on)
			for i := 1; i < len(ws); i++ {
				if ws[i].down < ws[i-1].up {
					t.Errorf("two %s were down at once: %+v", unit.name, ws)
				}
			}
		}
		if !strings.Contains(r.out, "Etcd | Restart | Hand the leadership to another member") {
			t.Errorf("the run did not move etcd's leadership before restarting the leader:\n%s", r.out)
		}
	})

	return inv
}

// uninstallStep removes the whole control plane with uninstall.yml and the
// inventory of apiServerSteps' install (the controllers and the addons are
// gone by then), and proves that the API servers left their hosts.
func uninstallStep(t *testing.T, e *planeEnv, inv string) {
	t.Helper()
	ctx := context.Background()
	uninstall := filepath.Join(repoRoot(t), "playbooks", "uninstall.yml")
	testenv.Step(t, "uninstalls the control plane", func(t *testing.T) {
		r := e.a.playbook(t, inv, e.vars, uninstall)
		r.mustSucceed(t, e.names...)
		for _, h := range e.apiHosts {
			out, err := e.dc.Run(ctx, h.Name, "for p in /etc/systemd/system/karmada-apiserver.service /etc/karmada/pki/ca.crt "+
				"/etc/karmada/pki/karmada-apiserver-server.key /etc/karmada/pki/sa.key "+
				"/etc/systemd/system/karmada-aggregated-apiserver.service /etc/karmada/karmada-aggregated-apiserver.kubeconfig "+
				"/etc/karmada/pki/karmada-aggregated-apiserver-server.key; do test ! -e $p || echo $p; done; "+
				"systemctl is-active karmada-apiserver karmada-aggregated-apiserver || true")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Fields(out); len(got) != 2 || got[0] != "inactive" || got[1] != "inactive" {
				t.Errorf("%s still has karmada-apiserver or karmada-aggregated-apiserver after the uninstall: %q", h.Name, out)
			}
		}
	})
}

// apiServerDeployment is a Binary KarmadaDeployment with managed etcd on hs
// and karmada-apiserver on apiHosts.
func apiServerDeployment(hs, apiHosts []hosts.Host) *kaov1.KarmadaDeployment {
	kd := etcdDeployment(hs, kaov1.ManagedEtcd{PurgeDataOnDelete: true})
	for i := range kd.Spec.Hosts {
		kd.Spec.Hosts[i].Roles = []kaov1.HostRole{kaov1.EtcdRole}
		if slices.ContainsFunc(apiHosts, func(h hosts.Host) bool { return h.Name == kd.Spec.Hosts[i].Name }) {
			kd.Spec.Hosts[i].Roles = append(kd.Spec.Hosts[i].Roles, kaov1.APIServerRole)
		}
	}
	return kd
}

// apiURL is the karmada-apiserver URL of h.
func apiURL(h hosts.Host) string { return "https://" + h.Address + ":5443" }

func caPool(t *testing.T, b pki.Bundle) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b[pki.CertFile(pki.CA)]) {
		t.Fatal("ca.crt holds no certificate")
	}
	return pool
}

// adminHTTPClient trusts kao's CA and presents the administrator's certificate.
func adminHTTPClient(t *testing.T, b pki.Bundle) *http.Client {
	t.Helper()
	cert, err := tls.X509KeyPair(b[pki.CertFile(pki.AdminClient)], b[pki.KeyFile(pki.AdminClient)])
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: caPool(t, b), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
}

// readyz is the body of h's /readyz, fetched as the administrator.
func readyz(ctx context.Context, t *testing.T, c *http.Client, h hosts.Host) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL(h)+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s /readyz: %v", h.Name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// processArgv is the command line of the main process of a systemd service on
// host.
func processArgv(ctx context.Context, t *testing.T, dc *hosts.Cluster, host, service string) []string {
	t.Helper()
	out, err := dc.Run(ctx, host, `base64 -w0 "/proc/$(systemctl show -p MainPID --value `+service+`)/cmdline"`)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("cmdline of %s on %s: %v", service, host, err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

// certSerial is the serial number of name's certificate in b.
func certSerial(t *testing.T, b pki.Bundle, name string) *big.Int {
	t.Helper()
	block, _ := pem.Decode(b[pki.CertFile(name)])
	if block == nil {
		t.Fatalf("no %s in the bundle", pki.CertFile(name))
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// window is when a service last went down and came up again, in the host's
// monotonic clock (the test hosts share the machine's).
type window struct{ down, up int64 }

// restartWindows reads the last restart of unit on each host, sorted by when
// it went down; a unit that was not restarted fails the test.
func restartWindows(ctx context.Context, t *testing.T, dc *hosts.Cluster, unit string, on []string) []window {
	t.Helper()
	var ws []window
	for _, h := range on {
		out, err := dc.Run(ctx, h, "systemctl show -p InactiveEnterTimestampMonotonic -p ActiveEnterTimestampMonotonic "+unit)
		if err != nil {
			t.Fatal(err)
		}
		props := map[string]int64{}
		for _, line := range strings.Fields(out) {
			k, v, _ := strings.Cut(line, "=")
			props[k], _ = strconv.ParseInt(v, 10, 64)
		}
		down, up := props["InactiveEnterTimestampMonotonic"], props["ActiveEnterTimestampMonotonic"]
		if down == 0 || up < down {
			t.Fatalf("%s was not restarted on %s: %q", unit, h, out)
		}
		ws = append(ws, window{down: down, up: up})
	}
	slices.SortFunc(ws, func(x, y window) int { return int(x.down - y.down) })
	return ws
}
