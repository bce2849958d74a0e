package roles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// apiServerSteps install managed etcd on every host of e and
// karmada-apiserver on e.apiHosts with kao's real install playbook (no
// controlPlane hosts yet), prove that both API servers serve the same data
// to the administrator, that Karmada's APIs answer through the aggregated
// API server (aggregatedAPIServerSteps) and that extra args pass literally.
// The test hosts go with the test: removing the plane with uninstall.yml is
// TestBinaryInstall's deletion, on the same hosts' layout, and
// TestInstallFaults' (test/e2e). Rolling renewed certificates out over the
// same layout, one host at a time and never without a ready API server, is
// TestBinaryInstall's rotation step (test/e2e certificates_test.go).
func apiServerSteps(t *testing.T, e *planeEnv) {
	t.Helper()
	root := repoRoot(t)
	kubectl, dc, hs, names, apiHosts, a, vars := e.kubectl, e.dc, e.hosts, e.names, e.apiHosts, e.a, e.vars
	ctx := context.Background()
	bundlePKI := e.pki
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
	argv, err := dc.ServiceArgv(ctx, host, service)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}
