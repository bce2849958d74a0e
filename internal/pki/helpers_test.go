package pki

import (
	"crypto/x509"
	"maps"
	"slices"
	"testing"
	"time"
)

// testNow is the fixed clock of every test, so that validity windows are exact.
var testNow = time.Date(2026, time.March, 1, 10, 0, 0, 0, time.UTC)

// day is a calendar day, for readable offsets from testNow.
const day = 24 * time.Hour

// testRequest is a three-etcd, two-apiserver, one-controlplane control plane
// behind a VIP, with extra SANs of every kind.
func testRequest() Request {
	return Request{
		EtcdHosts: []Host{
			{Name: "e1", Address: "10.0.0.11"},
			{Name: "e2", Address: "10.0.0.12"},
			{Name: "e3", Address: "etcd3.dc.example"},
		},
		APIServerHosts: []Host{
			{Name: "a1", Address: "10.0.0.21"},
			{Name: "a2", Address: "api2.dc.example"},
		},
		ControlPlaneHosts: []Host{{Name: "c1", Address: "10.0.0.31"}},
		Endpoint:          "vip.dc.example:5443",
		ExtraSANs:         []string{"karmada.example.com", "*.karmada.example.com", "192.0.2.10", "2001:db8::10"},
		ServiceSubnet:     "10.96.0.0/12",
	}
}

// mustEnsure runs Ensure and fails the test on error.
func mustEnsure(t *testing.T, existing Bundle, req Request, now time.Time) (Bundle, []Cert, []string) {
	t.Helper()
	b, certs, changed, err := Ensure(existing, req, now)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return b, certs, changed
}

// fresh is a bundle for testRequest issued at testNow.
func fresh(t *testing.T) Bundle {
	t.Helper()
	b, _, _ := mustEnsure(t, nil, testRequest(), testNow)
	return b
}

// mustCert parses name's certificate from b.
func mustCert(t *testing.T, b Bundle, name string) *x509.Certificate {
	t.Helper()
	c, err := parseCert(b[CertFile(name)])
	if err != nil {
		t.Fatalf("parsing %s: %v", CertFile(name), err)
	}
	return c
}

// files lists the file names of b, sorted.
func files(b Bundle) []string {
	return slices.Sorted(maps.Keys(b))
}

// assertUnchangedExcept fails unless every file of before is byte-identical
// in after, except the certificates named in except and the files in gone
// (which must be absent from after).
func assertUnchangedExcept(t *testing.T, before, after Bundle, except, gone []string) {
	t.Helper()
	skip := map[string]bool{}
	for _, n := range except {
		skip[CertFile(n)], skip[KeyFile(n)] = true, true
	}
	for _, f := range gone {
		if _, ok := after[f]; ok {
			t.Errorf("%s is still in the bundle", f)
		}
		skip[f] = true
	}
	for f, data := range before {
		if skip[f] {
			continue
		}
		if string(after[f]) != string(data) {
			t.Errorf("%s changed", f)
		}
	}
	for _, n := range except {
		if string(after[CertFile(n)]) == string(before[CertFile(n)]) {
			t.Errorf("%s was not re-issued", CertFile(n))
		}
	}
}

// leafNames lists the names of the certificates of b that are not CAs.
func leafNames(certs []Cert) []string {
	var out []string
	for _, c := range certs {
		if c.Issuer != "" {
			out = append(out, c.Name)
		}
	}
	return out
}

// reissue replaces s in b with a new certificate issued at testNow under req's
// validity, signed by s.issuer from b (self-signed for a CA).
func reissue(t *testing.T, b Bundle, s spec, req Request) {
	t.Helper()
	r, err := normalize(req)
	if err != nil {
		t.Fatal(err)
	}
	var ca *keyPair
	if s.kind != kindCA {
		var problem string
		if ca, problem = loadCA(b, s.issuer, testNow); problem != "" {
			t.Fatalf("%s is %s", s.issuer, problem)
		}
	}
	kp, err := issue(s, ca, r, testNow)
	if err != nil {
		t.Fatal(err)
	}
	b[CertFile(s.name)], b[KeyFile(s.name)] = kp.certPEM, kp.keyPEM
}
