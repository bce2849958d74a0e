package roles

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// aggregatedAPIServerSteps prove, on a control plane that install.yml put on
// hs with karmada-apiserver on apiHosts (apiServerSteps'), that the
// Cluster API answers through karmada-apiserver's aggregation on both API
// servers, that karmada-aggregated-apiserver runs only on the apiServer
// hosts with the flags kao gives it, and that an apply routes only to the
// hosts whose aggregated API server answers. kubeconfigs are the
// administrator's, one per API server.
func aggregatedAPIServerSteps(t *testing.T, a *ansible, dc *hosts.Cluster, kubectl, inv, vars string, kubeconfigs []string) {
	t.Helper()
	ctx := context.Background()
	hs := dc.Hosts()
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	apiHosts := hs[:2]

	testenv.Step(t, "serves Karmada's APIs through both API servers", func(t *testing.T) {
		for i, h := range apiHosts {
			resources := strings.Fields(testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[i], "api-resources", "-o", "name"))
			for _, want := range []string{"clusters.cluster.karmada.io", "propagationpolicies.policy.karmada.io", "resourcebindings.work.karmada.io"} {
				if !slices.Contains(resources, want) {
					t.Errorf("%s: kubectl api-resources does not list %s: %q", h.Name, want, resources)
				}
			}
			if out := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[i], "get", "clusters"); !strings.Contains(out, "No resources found") {
				t.Errorf("%s: kubectl get clusters says %q, want No resources found", h.Name, out)
			}
			avail := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[i], "get", "apiservice", "v1alpha1.cluster.karmada.io",
				"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
			if avail != "True" {
				t.Errorf("%s: APIService v1alpha1.cluster.karmada.io Available=%q, want True", h.Name, avail)
			}
		}
		// The Cluster API lists every apiServer host on the aggregated
		// API server's port, and the APIService trusts kao's CA, not any
		// certificate.
		addrs := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[0], "-n", "karmada-system", "get", "endpointslice", "karmada-aggregated-apiserver-hosts",
			"-o", "jsonpath={.endpoints[*].addresses[0]} {.ports[0].port}")
		if want := apiHosts[0].Address + " " + apiHosts[1].Address + " 7443"; addrs != want {
			t.Errorf("the EndpointSlice lists %q, want %q", addrs, want)
		}
		spec := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[0], "get", "apiservice", "v1alpha1.cluster.karmada.io",
			"-o", "jsonpath={.spec.insecureSkipTLSVerify} {.spec.caBundle}")
		if strings.HasPrefix(spec, "true") || !strings.Contains(spec, " LS0t") {
			t.Errorf("the APIService does not verify the aggregated API server with a caBundle: %q", spec)
		}
		if out := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[0], "get", "clusterrolebinding", "cluster-proxy-admin", "-o", "jsonpath={.subjects[0].name}"); out != "system:admin" {
			t.Errorf("cluster-proxy-admin binds %q, want system:admin", out)
		}
	})

	testenv.Step(t, "runs the aggregated API server only on the apiServer hosts", func(t *testing.T) {
		argv := processArgv(ctx, t, dc, apiHosts[0].Name, "karmada-aggregated-apiserver")
		for _, want := range []string{
			"--secure-port=7443",
			"--bind-address=0.0.0.0",
			"--audit-log-path=-",
			"--tls-min-version=VersionTLS13",
			"--etcd-servers=" + strings.Join(clientURLs(hs), ","),
		} {
			if !slices.Contains(argv, want) {
				t.Errorf("karmada-aggregated-apiserver did not get %q; its argv is %q", want, argv)
			}
		}
		out, err := dc.Run(ctx, names[2], "test ! -e /etc/systemd/system/karmada-aggregated-apiserver.service || echo unit")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("%s got karmada-aggregated-apiserver although it is not an apiServer host: %q, %v", names[2], out, err)
		}
	})

	testenv.Step(t, "an apply routes only to the hosts whose aggregated API server answers", func(t *testing.T) {
		resources := absPath(t, filepath.Join("testdata", "aggregated-resources.yml"))
		ready := func() string {
			return testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[0], "-n", "karmada-system", "get", "endpointslice", "karmada-aggregated-apiserver-hosts",
				"-o", "jsonpath={range .endpoints[*]}{.addresses[0]}={.conditions.ready} {end}")
		}
		down := apiHosts[1]
		if _, err := dc.Run(ctx, down.Name, "systemctl stop karmada-aggregated-apiserver"); err != nil {
			t.Fatal(err)
		}
		a.playbook(t, inv, vars, resources).mustSucceed(t, apiHosts[0].Name)
		if got, want := ready(), apiHosts[0].Address+"=true "+down.Address+"=false "; got != want {
			t.Errorf("with %s's aggregated API server stopped the EndpointSlice says %q, want %q", down.Name, got, want)
		}
		// Every Cluster API request now reaches the host that serves.
		for i := range 10 {
			if out := testenv.MustKubectl(ctx, t, kubectl, kubeconfigs[i%2], "get", "clusters"); !strings.Contains(out, "No resources found") {
				t.Errorf("kubectl get clusters with %s down: %q", down.Name, out)
			}
		}
		if _, err := dc.Run(ctx, down.Name, "systemctl start karmada-aggregated-apiserver"); err != nil {
			t.Fatal(err)
		}
		// The role's own wait for the Cluster API covers the restart; the
		// host answers again once its server is up.
		deadline := time.Now().Add(time.Minute)
		for {
			a.playbook(t, inv, vars, resources).mustSucceed(t, apiHosts[0].Name)
			got, want := ready(), apiHosts[0].Address+"=true "+down.Address+"=true "
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s's aggregated API server started again the EndpointSlice says %q, want %q", down.Name, got, want)
			}
			time.Sleep(2 * time.Second)
		}
	})

}

// absPath is p made absolute: ansible-playbook runs in the runner's directory.
func absPath(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
