package pki

import (
	"crypto/x509"
	"maps"
	"slices"
	"testing"
)

// addonRequest is testRequest with every addon enabled.
func addonRequest() Request {
	r := testRequest()
	r.Addons = Addons{Search: true, MetricsAdapter: true, Descheduler: true, SchedulerEstimator: true}
	return r
}

// addonCerts are the certificates the addons add with managed etcd.
var addonCerts = []string{
	SearchServer, SearchClient, SearchEtcdClient,
	MetricsAdapterServer, MetricsAdapterClient,
	DeschedulerClient,
	EstimatorServer, EstimatorClient,
}

func TestAddonCertificatesHaveTheirIdentity(t *testing.T) {
	b, _, _ := mustEnsure(t, nil, addonRequest(), testNow)
	tests := []struct {
		name   string           // certificate
		issuer string           // CA that must sign it
		cn     string           // subject CN
		orgs   []string         // subject O
		usage  x509.ExtKeyUsage // its only extended key usage
		sans   []string         // DNS and IP SANs it must carry (servers)
	}{
		{SearchServer, CA, "system:karmada:karmada-search", nil, x509.ExtKeyUsageServerAuth,
			[]string{"c1", "10.0.0.31", "localhost", "127.0.0.1", "karmada-search.karmada-system.svc"}},
		{SearchClient, CA, "system:karmada:karmada-search", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil},
		{SearchEtcdClient, EtcdCA, "system:karmada:karmada-search-etcd-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil},
		{MetricsAdapterServer, CA, "system:karmada:karmada-metrics-adapter", nil, x509.ExtKeyUsageServerAuth,
			[]string{"c1", "10.0.0.31", "127.0.0.1", "karmada-metrics-adapter.karmada-system.svc"}},
		{MetricsAdapterClient, CA, "system:karmada:karmada-metrics-adapter", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil},
		{DeschedulerClient, CA, "system:karmada:karmada-descheduler", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil},
		// karmada-scheduler dials its estimators on loopback.
		{EstimatorServer, CA, "system:karmada:karmada-scheduler-estimator", nil, x509.ExtKeyUsageServerAuth,
			[]string{"c1", "10.0.0.31", "127.0.0.1"}},
		{EstimatorClient, CA, "system:karmada:karmada-scheduler-estimator-client", nil, x509.ExtKeyUsageClientAuth, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCert(t, b, tc.name)
			if c.Subject.CommonName != tc.cn || !slices.Equal(c.Subject.Organization, tc.orgs) {
				t.Errorf("subject CN %q O %q, want CN %q O %q", c.Subject.CommonName, c.Subject.Organization, tc.cn, tc.orgs)
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{tc.usage}) {
				t.Errorf("ExtKeyUsage %v, want [%v]", c.ExtKeyUsage, tc.usage)
			}
			if err := verifyChain(c, mustCert(t, b, tc.issuer), tc.usage); err != nil {
				t.Errorf("does not chain to %s: %v", tc.issuer, err)
			}
			for _, san := range tc.sans {
				if err := c.VerifyHostname(san); err != nil {
					t.Errorf("does not name %s: %v", san, err)
				}
			}
			if tc.sans == nil && len(c.DNSNames)+len(c.IPAddresses) != 0 {
				t.Errorf("a client certificate with SANs %v %v", c.DNSNames, c.IPAddresses)
			}
		})
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestAddonCertificatesFollowTheSpec(t *testing.T) {
	without, _, _ := mustEnsure(t, nil, testRequest(), testNow)
	for _, name := range addonCerts {
		if _, ok := without[CertFile(name)]; ok {
			t.Errorf("%s issued with no addon enabled", name)
		}
	}

	// Enabling the addons adds their certificates and changes nothing else.
	with, _, changed := mustEnsure(t, without, addonRequest(), testNow.Add(day))
	if want := slices.Sorted(slices.Values(addonCerts)); !slices.Equal(changed, want) {
		t.Errorf("enabling every addon changed %q, want %q", changed, want)
	}
	assertUnchangedExcept(t, without, with, addonCerts, nil)

	// Enabling one addon issues only its own.
	onlySearch := testRequest()
	onlySearch.Addons.Search = true
	_, _, changed = mustEnsure(t, without, onlySearch, testNow.Add(day))
	if want := []string{SearchClient, SearchEtcdClient, SearchServer}; !slices.Equal(changed, want) {
		t.Errorf("enabling search changed %q, want %q", changed, want)
	}

	// Disabling them drops their files and keeps the rest byte for byte.
	after, _, changed := mustEnsure(t, with, testRequest(), testNow.Add(2*day))
	if len(changed) != 0 {
		t.Errorf("disabling the addons re-issued %q", changed)
	}
	if !maps.EqualFunc(after, without, func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Errorf("disabling the addons left %q, want the bundle without them", files(after))
	}
}

func TestSearchWithExternalEtcdHasNoEtcdClient(t *testing.T) {
	req := addonRequest()
	req.ExternalEtcd = true
	b, _, _ := mustEnsure(t, nil, req, testNow)
	if _, ok := b[CertFile(SearchEtcdClient)]; ok {
		t.Errorf("%s issued although etcd is external: the user's client certificate is used", SearchEtcdClient)
	}
	if _, ok := b[CertFile(SearchServer)]; !ok {
		t.Errorf("no %s with external etcd", SearchServer)
	}
}

// In Containerized mode the addons are reached through the host cluster's
// Services: their names go into the serving certificates, and a changed
// list (a member that joins) re-issues only the certificate it names.
func TestAddonServerSANs(t *testing.T) {
	req := addonRequest()
	req.ServerSANs = map[string][]string{
		SearchServer:         {"karmada-search.cp.svc"},
		MetricsAdapterServer: {"karmada-metrics-adapter.cp.svc"},
		EstimatorServer:      {"karmada-scheduler-estimator-m1.cp.svc"},
	}
	b, _, _ := mustEnsure(t, nil, req, testNow)
	for name, sans := range req.ServerSANs {
		c := mustCert(t, b, name)
		for _, san := range sans {
			if err := c.VerifyHostname(san); err != nil {
				t.Errorf("%s does not name %s: %v", name, san, err)
			}
		}
	}

	req.ServerSANs[EstimatorServer] = append(req.ServerSANs[EstimatorServer], "karmada-scheduler-estimator-m2.cp.svc")
	after, _, changed := mustEnsure(t, b, req, testNow.Add(day))
	if !slices.Equal(changed, []string{EstimatorServer}) {
		t.Errorf("a second estimator's name changed %q, want only %s", changed, EstimatorServer)
	}
	if err := mustCert(t, after, EstimatorServer).VerifyHostname("karmada-scheduler-estimator-m2.cp.svc"); err != nil {
		t.Errorf("the re-issued %s does not name the new member's Service: %v", EstimatorServer, err)
	}

	// A name for a certificate that takes none is refused.
	req.ServerSANs[DeschedulerClient] = []string{"x.example"}
	if _, _, _, err := Ensure(nil, req, testNow); err == nil {
		t.Errorf("ServerSANs for %s accepted", DeschedulerClient)
	}
}
