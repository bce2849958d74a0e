package roles

import (
	"context"
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

// externalKeyPrefix is spec.etcd.external.keyPrefix in TestExternalEtcd.
const externalKeyPrefix = "/kao-external"

// TestExternalEtcd runs karmada-apiserver and karmada-aggregated-apiserver
// against an etcd cluster kao does not manage: one host plays someone else's
// etcd (the etcd role with its own openssl-made CA), the other gets the API
// servers from a spec.etcd.external inventory and the PKI directory the
// operator writes for it. The test proves the roles refuse an external etcd
// without endpoints, that the API servers serve and store their objects under
// the key prefix of that etcd, and that the
// uninstall leaves the etcd and its data alone.
func TestExternalEtcd(t *testing.T) {
	requirePrerequisites(t)
	testenv.Lane(t)
	bundle, m := buildBundle(t)
	kubectl := filepath.Join(bundle, "kubernetes", m.Kubernetes, "bin", "kubectl")
	etcdctlBin := filepath.Join(bundle, "etcd", m.Etcd, "bin", "etcdctl")
	dc := hosts.Start(t, 2)
	hs := dc.Hosts()
	api, theirs := hs[0], hs[1]
	ctx := context.Background()
	a := newAnsible(t, dc)

	// Someone else's etcd: a one-member cluster on the second host, with a
	// CA that kao never sees the key of.
	etcdPKI := genEtcdPKI(t, []hosts.Host{theirs})
	etcdKD := etcdDeployment([]hosts.Host{theirs}, kaov1.ManagedEtcd{PurgeDataOnDelete: true})
	etcdKD.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole}
	etcdInv := a.inventory(t, "their-etcd.json", etcdKD)
	etcdVars := a.extraVars(t, "their-etcd-vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": etcdPKI})
	endpoints := clientURLs([]hosts.Host{theirs})

	// kao's side: the API servers on the first host, the etcd named in
	// spec.etcd.external, and the PKI directory of such a run.
	bundlePKI, pkiDir := externalEtcdPKI(t, api, etcdPKI)
	vars := a.extraVars(t, "vars.json", map[string]string{"kao_artifacts_dir": bundle, "kao_pki_dir": pkiDir})
	inv := a.inventory(t, "inventory.json", externalEtcdDeployment(api, endpoints))
	install := absPath(t, filepath.Join("testdata", "external-etcd-install.yml"))
	uninstall := absPath(t, filepath.Join("testdata", "aggregated-uninstall.yml"))

	client := adminHTTPClient(t, bundlePKI)
	kc, err := bundlePKI.Kubeconfig(pki.AdminClient, apiURL(api))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := a.writeFile(t, "admin.kubeconfig", kc)
	// keys lists the keys of their etcd under prefix.
	keys := func(t *testing.T, prefix string) []string {
		t.Helper()
		out, err := etcdctl(ctx, etcdctlBin, etcdPKI, endpoints, "get", "--prefix", "--keys-only", prefix)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Fields(out)
	}

	var registryBefore []string
	testenv.Step(t, "someone else's etcd runs on the second host", func(t *testing.T) {
		r := a.playbook(t, etcdInv, etcdVars, a.writeFile(t, "their-etcd.yml", []byte(installPlaybook)))
		r.mustSucceed(t, theirs.Name)
		if _, err := etcdctl(ctx, etcdctlBin, etcdPKI, endpoints, "endpoint", "health"); err != nil {
			t.Fatal(err)
		}
		registryBefore = keys(t, "/registry/")
	})

	testenv.Step(t, "refuses an external etcd without endpoints", func(t *testing.T) {
		// The API requires at least one endpoint, but Build does not check
		// it: a hand-made CR file gives such an inventory.
		r := a.playbook(t, a.inventory(t, "inventory-no-endpoints.json", externalEtcdDeployment(api, nil)), vars, install)
		if r.err == nil {
			t.Fatalf("the install accepted an external etcd without endpoints:\n%s", r.out)
		}
		if !strings.Contains(r.out, "karmada-apiserver needs etcd: the managed cluster of the etcd group, or the endpoints of spec.etcd.external") {
			t.Errorf("the failure does not say what is missing:\n%s", r.out)
		}
		out, err := dc.Run(ctx, api.Name, "ls -A /usr/local/bin; test ! -e /etc/karmada || echo /etc/karmada")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "" {
			t.Errorf("%s got files although the run was refused: %q", api.Name, out)
		}
	})

	testenv.Step(t, "installs the API servers against the external etcd", func(t *testing.T) {
		r := a.playbook(t, inv, vars, install)
		r.mustSucceed(t, api.Name)
		for _, task := range []string{
			"TASK [karmada_apiserver : Karmada apiserver | Wait for karmada-apiserver to be ready]",
			"TASK [karmada_aggregated_apiserver : Karmada aggregated apiserver | Wait for karmada-aggregated-apiserver to be ready]",
			"TASK [karmada_resources : Karmada resources | Wait for the Cluster API to be available]",
		} {
			if !strings.Contains(r.out, task) {
				t.Errorf("the run did not reach %q:\n%s", task, r.out)
			}
		}
		if _, ok := r.recap[theirs.Name]; ok {
			t.Errorf("the run touched %s, which kao does not manage: %+v", theirs.Name, r.recap[theirs.Name])
		}
	})

	testenv.Step(t, "serves readyz and passes the endpoints and key prefix", func(t *testing.T) {
		if got := readyz(ctx, t, client, api); got != "ok" {
			t.Errorf("%s /readyz says %q, want ok", api.Name, got)
		}
		for _, service := range []string{"karmada-apiserver", "karmada-aggregated-apiserver"} {
			argv := processArgv(ctx, t, dc, api.Name, service)
			for _, want := range []string{
				"--etcd-servers=" + endpoints[0],
				"--etcd-prefix=" + externalKeyPrefix,
				"--etcd-cafile=/etc/karmada/pki/etcd-ca.crt",
			} {
				if !slices.Contains(argv, want) {
					t.Errorf("%s did not get %q; its argv is %q", service, want, argv)
				}
			}
			out, err := dc.Run(ctx, api.Name, "systemctl is-active "+service+" || true")
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out); got != "active" {
				t.Errorf("%s is %q, want active", service, got)
			}
		}
	})

	testenv.Step(t, "stores Karmada's objects under the key prefix", func(t *testing.T) {
		// A Cluster goes through the aggregated API server into etcd.
		cluster := a.writeFile(t, "cluster.yaml", []byte("apiVersion: cluster.karmada.io/v1alpha1\nkind: Cluster\n"+
			"metadata:\n  name: kao-external-probe\nspec:\n  syncMode: Pull\n"))
		testenv.MustKubectl(ctx, t, kubectl, kubeconfig, "create", "-f", cluster)
		got := keys(t, externalKeyPrefix+"/")
		for _, want := range []string{
			externalKeyPrefix + "/namespaces/default",
			externalKeyPrefix + "/namespaces/karmada-system",
			externalKeyPrefix + "/apiregistration.k8s.io/apiservices/v1alpha1.cluster.karmada.io",
			externalKeyPrefix + "/cluster.karmada.io/clusters/kao-external-probe",
		} {
			if !slices.Contains(got, want) {
				t.Errorf("their etcd has no key %s; under %s/ it has %q", want, externalKeyPrefix, got)
			}
		}
		if after := keys(t, "/registry/"); !slices.Equal(after, registryBefore) {
			t.Errorf("the API servers wrote under /registry/: before %q, after %q", registryBefore, after)
		}
	})

	testenv.Step(t, "uninstall leaves their etcd and its data alone", func(t *testing.T) {
		r := a.playbook(t, inv, vars, uninstall)
		r.mustSucceed(t, api.Name)
		out, err := dc.Run(ctx, api.Name, "systemctl is-active karmada-apiserver karmada-aggregated-apiserver || true")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(out); !slices.Equal(got, []string{"inactive", "inactive"}) {
			t.Errorf("the API servers still run after the uninstall: %q", got)
		}
		if _, err := etcdctl(ctx, etcdctlBin, etcdPKI, endpoints, "endpoint", "health"); err != nil {
			t.Fatal(err)
		}
		if got := keys(t, externalKeyPrefix+"/namespaces/default"); len(got) != 1 {
			t.Errorf("Karmada's data left their etcd with the uninstall: %q", got)
		}
	})
}

// externalEtcdDeployment is a Binary KarmadaDeployment with karmada-apiserver
// on api and the external etcd cluster at endpoints.
func externalEtcdDeployment(api hosts.Host, endpoints []string) *kaov1.KarmadaDeployment {
	kd := etcdDeployment([]hosts.Host{api}, kaov1.ManagedEtcd{})
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.APIServerRole}
	kd.Spec.Etcd = kaov1.EtcdSpec{External: &kaov1.ExternalEtcd{
		Endpoints:            endpoints,
		CASecretRef:          kaov1.SecretKeyReference{Name: "their-etcd", Key: "ca.crt"},
		ClientCertSecretName: "their-etcd-client",
		KeyPrefix:            externalKeyPrefix,
	}}
	return kd
}

// externalEtcdPKI writes the PKI directory of an external-etcd run as the
// operator does: kao's own bundle for api issued with ExternalEtcd, plus the
// external etcd's CA as etcd-ca.crt and the user's client certificate (here
// their etcd-healthcheck-client) under both API servers' etcd client names.
func externalEtcdPKI(t *testing.T, api hosts.Host, etcdPKI string) (pki.Bundle, string) {
	t.Helper()
	b, _, _, err := pki.Ensure(nil, pki.Request{
		APIServerHosts: []pki.Host{{Name: api.Name, Address: api.Address}},
		Endpoint:       api.Address + ":5443",
		ExternalEtcd:   true,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b[pki.CertFile(pki.EtcdCA)]; ok {
		t.Fatal("pki.Ensure issued an etcd CA although the etcd is external")
	}
	read := func(name string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(etcdPKI, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	b[pki.CertFile(pki.EtcdCA)] = read("etcd-ca.crt")
	for _, c := range []string{pki.APIServerEtcdClient, pki.AggregatedAPIServerEtcdClient} {
		b[pki.CertFile(c)] = read("etcd-healthcheck-client.crt")
		b[pki.KeyFile(c)] = read("etcd-healthcheck-client.key")
	}
	dir := t.TempDir()
	for name, data := range b {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return b, dir
}
