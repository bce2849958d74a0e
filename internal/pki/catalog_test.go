package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The SANs every apiserver host list of testRequest contributes.
var apiServerHostSANs = []string{"a1", "10.0.0.21", "a2", "api2.dc.example"}

func TestIssuedCertificatesHaveTheirIdentity(t *testing.T) {
	b := fresh(t)
	tests := []struct {
		name   string             // certificate name
		issuer string             // CA expected to sign it; empty for a CA
		cn     string             // subject common name
		orgs   []string           // subject organizations
		usages []x509.ExtKeyUsage // extended key usages
		sans   []string           // every DNS and IP SAN, in any order
	}{
		{name: CA, cn: "karmada"},
		{name: FrontProxyCA, cn: "front-proxy-ca"},
		{name: EtcdCA, cn: "etcd-ca"},
		{
			name: APIServerServer, issuer: CA, cn: "system:karmada:karmada-apiserver",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			sans: slices.Concat(apiServerHostSANs, []string{
				"vip.dc.example", "karmada.example.com", "*.karmada.example.com", "192.0.2.10", "2001:db8::10",
				"localhost", "127.0.0.1", "10.96.0.1",
				"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
				"karmada-apiserver", "karmada-apiserver.karmada-system.svc", "karmada-apiserver.karmada-system.svc.cluster.local",
			}),
		},
		{
			name: AggregatedAPIServerServer, issuer: CA, cn: "system:karmada:karmada-aggregated-apiserver",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			sans: slices.Concat(apiServerHostSANs, []string{
				"localhost", "127.0.0.1",
				"karmada-aggregated-apiserver.karmada-system.svc", "karmada-aggregated-apiserver.karmada-system.svc.cluster.local",
			}),
		},
		{
			name: WebhookServer, issuer: CA, cn: "system:karmada:karmada-webhook",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			sans: []string{"c1", "10.0.0.31", "localhost", "127.0.0.1",
				"karmada-webhook.karmada-system.svc", "karmada-webhook.karmada-system.svc.cluster.local"},
		},
		{
			name: "etcd-server-e1", issuer: EtcdCA, cn: "system:karmada:etcd-server",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			sans:   []string{"e1", "10.0.0.11", "localhost", "127.0.0.1"},
		},
		{
			name: "etcd-peer-e3", issuer: EtcdCA, cn: "system:karmada:etcd-peer",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			sans:   []string{"e3", "etcd3.dc.example", "localhost", "127.0.0.1"},
		},
		{
			name: AdminClient, issuer: CA, cn: "system:admin", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: KubeControllerManagerClient, issuer: CA, cn: "system:kube-controller-manager",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: ControllerManagerClient, issuer: CA, cn: "system:karmada:karmada-controller-manager", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: SchedulerClient, issuer: CA, cn: "system:karmada:karmada-scheduler", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: AggregatedAPIServerClient, issuer: CA, cn: "system:karmada:karmada-aggregated-apiserver", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: WebhookClient, issuer: CA, cn: "system:karmada:karmada-webhook", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: APIServerEtcdClient, issuer: EtcdCA, cn: "system:karmada:karmada-apiserver-etcd-client", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: AggregatedAPIServerEtcdClient, issuer: EtcdCA, cn: "system:karmada:karmada-aggregated-apiserver-etcd-client", orgs: []string{"system:masters"},
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: EtcdHealthcheckClient, issuer: EtcdCA, cn: "system:karmada:etcd-etcd-client",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
		{
			name: FrontProxyClient, issuer: FrontProxyCA, cn: "front-proxy-client",
			usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCert(t, b, tc.name)
			if c.Subject.CommonName != tc.cn || !slices.Equal(c.Subject.Organization, tc.orgs) {
				t.Errorf("subject CN=%q O=%q, want CN=%q O=%q", c.Subject.CommonName, c.Subject.Organization, tc.cn, tc.orgs)
			}
			if c.SignatureAlgorithm != x509.ECDSAWithSHA256 {
				t.Errorf("signature algorithm %s, want ECDSA-SHA256", c.SignatureAlgorithm)
			}
			if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
			}
			if c.SerialNumber.Sign() <= 0 {
				t.Errorf("serial number %s is not positive", c.SerialNumber)
			}
			if !c.NotBefore.Equal(testNow.Add(-clockSkew)) {
				t.Errorf("NotBefore %s, want %s (backdated for clock skew)", c.NotBefore, testNow.Add(-clockSkew))
			}

			if tc.issuer == "" {
				if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign|x509.KeyUsageDigitalSignature {
					t.Errorf("IsCA=%v BasicConstraintsValid=%v KeyUsage=%b, want a CA", c.IsCA, c.BasicConstraintsValid, c.KeyUsage)
				}
				if want := testNow.Add(DefaultCAValidity); !c.NotAfter.Equal(want) {
					t.Errorf("NotAfter %s, want %s", c.NotAfter, want)
				}
				return
			}

			if c.IsCA || c.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(c.ExtKeyUsage, tc.usages) {
				t.Errorf("IsCA=%v KeyUsage=%b ExtKeyUsage=%v, want a leaf for %v", c.IsCA, c.KeyUsage, c.ExtKeyUsage, tc.usages)
			}
			if want := testNow.Add(DefaultValidity); !c.NotAfter.Equal(want) {
				t.Errorf("NotAfter %s, want %s", c.NotAfter, want)
			}
			for _, u := range tc.usages {
				if err := verifyChain(c, mustCert(t, b, tc.issuer), u); err != nil {
					t.Errorf("does not chain to %s for usage %v: %v", tc.issuer, u, err)
				}
			}
			for _, other := range []string{CA, FrontProxyCA, EtcdCA} {
				if other != tc.issuer && verifyChain(c, mustCert(t, b, other), x509.ExtKeyUsageAny) == nil {
					t.Errorf("also chains to %s", other)
				}
			}

			var got []string
			got = append(got, c.DNSNames...)
			for _, ip := range c.IPAddresses {
				got = append(got, ip.String())
			}
			wantDNS, wantIPs := splitSANs(tc.sans)
			want := slices.Clone(wantDNS)
			for _, ip := range wantIPs {
				want = append(want, ip.String())
			}
			if !sameSet(got, want, strings.Compare) || len(got) != len(want) {
				t.Errorf("SANs %q, want %q", got, want)
			}
		})
	}
}

func TestCatalogAgreesWithIssuerOfAndFileNames(t *testing.T) {
	r, err := normalize(testRequest())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range catalog(r) {
		if got := issuerOf(s.name); got != s.issuer {
			t.Errorf("issuerOf(%q) = %q, catalog says %q", s.name, got, s.issuer)
		}
		if !fileSafe.MatchString(CertFile(s.name)) {
			t.Errorf("%q is not a valid Secret key", CertFile(s.name))
		}
	}
}

func TestServiceSubnetFirstIPIsASAN(t *testing.T) {
	tests := []struct {
		subnet string // spec.apiServer.serviceSubnet
		want   string // the IP of the kubernetes Service
	}{
		{subnet: "", want: "10.96.0.1"},
		{subnet: "10.96.0.0/12", want: "10.96.0.1"},
		{subnet: "172.20.5.0/24", want: "172.20.5.1"},
		{subnet: "10.100.7.9/16", want: "10.100.0.1"},
		{subnet: "fd00:10:96::/108", want: "fd00:10:96::1"},
	}
	for _, tc := range tests {
		t.Run(tc.subnet, func(t *testing.T) {
			req := testRequest()
			req.ServiceSubnet = tc.subnet
			r, err := normalize(req)
			if err != nil {
				t.Fatal(err)
			}
			if want := netip.MustParseAddr(tc.want); r.serviceIP != want {
				t.Errorf("service IP %s, want %s", r.serviceIP, want)
			}
		})
	}
}

// TestHostClusterServiceNamesAreSANs checks the SANs a Containerized control
// plane adds: each serving certificate names the host cluster Services it is
// reached at, and each etcd member's certificates its Service names.
func TestHostClusterServiceNamesAreSANs(t *testing.T) {
	req := Request{
		EtcdHosts: []Host{{Name: "karmada-etcd-0", Address: "karmada-etcd-0.karmada-etcd.kd.svc.example.org",
			SANs: []string{"karmada-etcd-0.karmada-etcd.kd.svc", "karmada-etcd-client.kd.svc"}}},
		ServerSANs: map[string][]string{
			APIServerServer:           {"karmada-apiserver.kd.svc", "192.0.2.7"},
			AggregatedAPIServerServer: {"karmada-aggregated-apiserver.kd.svc"},
			WebhookServer:             {"karmada-webhook.kd.svc.example.org"},
		},
	}
	b, _, _ := mustEnsure(t, nil, req, testNow)
	tests := []struct {
		cert string   // certificate name
		want []string // SANs it must carry, among others
	}{
		{cert: APIServerServer, want: []string{"karmada-apiserver.kd.svc", "192.0.2.7", "karmada-apiserver.karmada-system.svc"}},
		{cert: AggregatedAPIServerServer, want: []string{"karmada-aggregated-apiserver.kd.svc", "karmada-aggregated-apiserver.karmada-system.svc"}},
		{cert: WebhookServer, want: []string{"karmada-webhook.kd.svc.example.org", "karmada-webhook.karmada-system.svc"}},
		{cert: EtcdServer("karmada-etcd-0"), want: []string{"karmada-etcd-0.karmada-etcd.kd.svc.example.org",
			"karmada-etcd-0.karmada-etcd.kd.svc", "karmada-etcd-client.kd.svc", "127.0.0.1"}},
		{cert: EtcdPeer("karmada-etcd-0"), want: []string{"karmada-etcd-0.karmada-etcd.kd.svc", "localhost"}},
	}
	for _, tc := range tests {
		c := mustCert(t, b, tc.cert)
		for _, san := range tc.want {
			if err := c.VerifyHostname(san); err != nil {
				t.Errorf("%s does not name %s: %v", tc.cert, san, err)
			}
		}
	}

	req.ServerSANs = map[string][]string{AdminClient: {"x.example"}}
	if _, _, _, err := Ensure(nil, req, testNow); err == nil || !strings.Contains(err.Error(), "only karmada-apiserver-server") {
		t.Errorf("server SANs for a client certificate: err = %v, want a refusal", err)
	}
	req.ServerSANs = nil
	req.EtcdHosts[0].SANs = []string{"bad name"}
	if _, _, _, err := Ensure(nil, req, testNow); err == nil {
		t.Error("an etcd host SAN with a space was accepted")
	}
}
