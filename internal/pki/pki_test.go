package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"maps"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEnsureIssuesEveryFileOnAFreshStart(t *testing.T) {
	b, certs, changed := mustEnsure(t, nil, testRequest(), testNow)

	names := []string{
		"admin-client", "ca", "etcd-ca", "etcd-healthcheck-client",
		"etcd-peer-e1", "etcd-peer-e2", "etcd-peer-e3",
		"etcd-server-e1", "etcd-server-e2", "etcd-server-e3",
		"front-proxy-ca", "front-proxy-client",
		"karmada-aggregated-apiserver-client", "karmada-aggregated-apiserver-etcd-client", "karmada-aggregated-apiserver-server",
		"karmada-apiserver-etcd-client", "karmada-apiserver-server",
		"karmada-controller-manager-client", "karmada-scheduler-client",
		"karmada-webhook-client", "karmada-webhook-server",
		"kube-controller-manager-client",
	}
	var want []string
	for _, n := range names {
		want = append(want, CertFile(n), KeyFile(n))
	}
	want = append(want, "sa.key", "sa.pub")
	slices.Sort(want)
	if got := files(b); !slices.Equal(got, want) {
		t.Errorf("files:\n got %q\nwant %q", got, want)
	}
	if wantChanged := slices.Sorted(slices.Values(append(slices.Clone(names), "sa"))); !slices.Equal(changed, wantChanged) {
		t.Errorf("changed %q, want %q", changed, wantChanged)
	}
	var certNames []string
	for _, c := range certs {
		certNames = append(certNames, c.Name)
	}
	if !slices.Equal(certNames, names) {
		t.Errorf("certs %q, want %q (sorted by name)", certNames, names)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestEnsureOnItsOwnOutputChangesNothing(t *testing.T) {
	first, firstCerts, _ := mustEnsure(t, nil, testRequest(), testNow)
	for _, at := range []time.Duration{0, time.Hour, 100 * day, DefaultValidity - DefaultRenewBefore - time.Second} {
		b, certs, changed := mustEnsure(t, first, testRequest(), testNow.Add(at))
		if len(changed) != 0 {
			t.Errorf("at +%s: changed %q, want nothing", at, changed)
		}
		if !maps.EqualFunc(b, first, func(a, b []byte) bool { return string(a) == string(b) }) {
			t.Errorf("at +%s: bundle is not byte-identical", at)
		}
		if !slices.Equal(certs, firstCerts) {
			t.Errorf("at +%s: certs differ", at)
		}
	}
}

func TestEnsureRenewsALeafInsideRenewBeforeAndNothingElse(t *testing.T) {
	before := fresh(t)
	// Re-issue admin-client by hand so that it expires in 10 days, well inside
	// the 30-day renewal window, while everything else has a year left.
	reissue(t, before, client(AdminClient, CA, "system:admin", mastersGroup), Request{Validity: 10 * day, RenewBefore: day})

	after, _, changed := mustEnsure(t, before, testRequest(), testNow)
	if !slices.Equal(changed, []string{AdminClient}) {
		t.Errorf("changed %q, want only %s", changed, AdminClient)
	}
	assertUnchangedExcept(t, before, after, []string{AdminClient}, nil)
	if got, want := mustCert(t, after, AdminClient).NotAfter, testNow.Add(DefaultValidity); !got.Equal(want) {
		t.Errorf("renewed NotAfter %s, want %s", got, want)
	}
}

func TestEnsureNearAndAfterCAExpiry(t *testing.T) {
	// A 400-day CA with 365-day leaves: renewal at day 340 is capped by the
	// CA, later calls must not churn, and the CA's expiry re-issues everything.
	req := testRequest()
	req.CAValidity, req.Validity, req.RenewBefore = 400*day, 365*day, 30*day
	start, _, _ := mustEnsure(t, nil, req, testNow)
	caEnd := testNow.Add(400 * day)

	renewed, certs, changed := mustEnsure(t, start, req, testNow.Add(340*day))
	if want := leafNames(certs); !slices.Equal(changed, want) {
		t.Errorf("day 340: changed %q, want every leaf %q", changed, want)
	}
	for _, c := range certs {
		if !c.NotAfter.Equal(caEnd) {
			t.Errorf("day 340: %s expires %s, want capped at the CA's %s", c.Name, c.NotAfter, caEnd)
		}
	}
	if got := NextCheck(certs, req.RenewBefore); !got.Equal(caEnd) {
		t.Errorf("NextCheck %s, want the CA's expiry %s", got, caEnd)
	}

	same, _, changed := mustEnsure(t, renewed, req, testNow.Add(380*day))
	if len(changed) != 0 {
		t.Errorf("day 380: changed %q, want nothing (leaves cannot outlive their CA)", changed)
	}
	assertUnchangedExcept(t, renewed, same, nil, nil)

	recovered, certs, changed := mustEnsure(t, same, req, testNow.Add(401*day))
	if want := certNames(certs); !slices.Equal(changed, want) {
		t.Errorf("day 401: changed %q, want every CA and leaf %q", changed, want)
	}
	if string(recovered[ServiceAccountKeyFile]) != string(same[ServiceAccountKeyFile]) {
		t.Error("day 401: sa.key changed; it must be kept forever")
	}
	if err := recovered.Validate(); err != nil {
		t.Errorf("day 401: Validate: %v", err)
	}
}

// certNames lists the names of certs.
func certNames(certs []Cert) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = c.Name
	}
	return out
}

func TestEnsureReissuesOnlyWhatTheRequestChanged(t *testing.T) {
	tests := []struct {
		name   string         // what changed in the request
		mutate func(*Request) // the change
		want   []string       // names Ensure must re-issue, sorted
		gone   []string       // files that must disappear
	}{
		{
			name:   "adding an etcd host issues only that host's etcd certificates",
			mutate: func(r *Request) { r.EtcdHosts = append(r.EtcdHosts, Host{Name: "e4", Address: "10.0.0.14"}) },
			want:   []string{"etcd-peer-e4", "etcd-server-e4"},
		},
		{
			name:   "removing an etcd host drops its files and re-issues nothing",
			mutate: func(r *Request) { r.EtcdHosts = r.EtcdHosts[:2] },
			gone:   []string{"etcd-peer-e3.crt", "etcd-peer-e3.key", "etcd-server-e3.crt", "etcd-server-e3.key"},
		},
		{
			name:   "changing an etcd host's address re-issues only its certificates",
			mutate: func(r *Request) { r.EtcdHosts[1].Address = "10.0.1.12" },
			want:   []string{"etcd-peer-e2", "etcd-server-e2"},
		},
		{
			name:   "changing extra SANs re-issues only karmada-apiserver-server",
			mutate: func(r *Request) { r.ExtraSANs = append(r.ExtraSANs, "karmada.other.example") },
			want:   []string{APIServerServer},
		},
		{
			name:   "changing the endpoint host re-issues only karmada-apiserver-server",
			mutate: func(r *Request) { r.Endpoint = "192.0.2.99:5443" },
			want:   []string{APIServerServer},
		},
		{
			name:   "changing only the endpoint port re-issues nothing",
			mutate: func(r *Request) { r.Endpoint = "vip.dc.example:6443" },
		},
		{
			name:   "changing the service subnet re-issues only karmada-apiserver-server",
			mutate: func(r *Request) { r.ServiceSubnet = "172.20.0.0/16" },
			want:   []string{APIServerServer},
		},
		{
			name:   "adding an apiServer host re-issues both apiserver serving certificates",
			mutate: func(r *Request) { r.APIServerHosts = append(r.APIServerHosts, Host{Name: "a3", Address: "10.0.0.23"}) },
			want:   []string{AggregatedAPIServerServer, APIServerServer},
		},
		{
			name:   "changing a controlPlane host re-issues only karmada-webhook-server",
			mutate: func(r *Request) { r.ControlPlaneHosts[0].Address = "10.0.0.32" },
			want:   []string{WebhookServer},
		},
		{
			name: "reordering, repeating and upper-casing SANs re-issues nothing",
			mutate: func(r *Request) {
				r.ExtraSANs = []string{"2001:db8:0::10", "KARMADA.example.com", "192.0.2.10", "*.karmada.example.com", "192.0.2.10", "a1"}
			},
		},
		{
			name:   "changing validity re-issues nothing; it applies at the next renewal",
			mutate: func(r *Request) { r.Validity, r.RenewBefore = 90*day, 10*day },
		},
	}
	base := fresh(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := testRequest()
			tc.mutate(&req)
			after, _, changed := mustEnsure(t, base, req, testNow.Add(day))
			if !slices.Equal(changed, tc.want) {
				t.Errorf("changed %q, want %q", changed, tc.want)
			}
			assertUnchangedExcept(t, base, after, tc.want, tc.gone)
			if err := after.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestEnsureWithExternalEtcdIssuesNoEtcdFiles(t *testing.T) {
	req := testRequest()
	req.ExternalEtcd = true
	b, _, _ := mustEnsure(t, nil, req, testNow)
	for f := range b {
		if strings.Contains(f, "etcd") {
			t.Errorf("%s issued although etcd is external", f)
		}
	}
	if _, ok := b[CertFile(APIServerServer)]; !ok {
		t.Errorf("%s missing", CertFile(APIServerServer))
	}

	// Switching a managed-etcd bundle to external drops the etcd files and
	// keeps everything else.
	managed := fresh(t)
	switched, _, changed := mustEnsure(t, managed, req, testNow)
	if len(changed) != 0 {
		t.Errorf("switching to external etcd changed %q, want nothing", changed)
	}
	var gone []string
	for f := range managed {
		if strings.Contains(f, "etcd") {
			gone = append(gone, f)
		}
	}
	assertUnchangedExcept(t, managed, switched, nil, gone)
}

func TestEnsureReplacesBrokenLeaves(t *testing.T) {
	tests := []struct {
		name   string                   // how the leaf is broken
		leaf   string                   // the broken certificate
		breakI func(*testing.T, Bundle) // breaks it in place
	}{
		{
			name: "garbage certificate", leaf: AdminClient,
			breakI: func(_ *testing.T, b Bundle) { b[CertFile(AdminClient)] = []byte("not a certificate") },
		},
		{
			name: "truncated certificate", leaf: APIServerServer,
			breakI: func(_ *testing.T, b Bundle) { b[CertFile(APIServerServer)] = b[CertFile(APIServerServer)][:200] },
		},
		{
			name: "missing key", leaf: "etcd-server-e2",
			breakI: func(_ *testing.T, b Bundle) { delete(b, KeyFile("etcd-server-e2")) },
		},
		{
			name: "missing certificate", leaf: FrontProxyClient,
			breakI: func(_ *testing.T, b Bundle) { delete(b, CertFile(FrontProxyClient)) },
		},
		{
			name: "key of another certificate", leaf: SchedulerClient,
			breakI: func(_ *testing.T, b Bundle) { b[KeyFile(SchedulerClient)] = b[KeyFile(WebhookClient)] },
		},
		{
			name: "garbage key", leaf: WebhookServer,
			breakI: func(_ *testing.T, b Bundle) {
				b[KeyFile(WebhookServer)] = []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n")
			},
		},
		{
			name: "signed by the wrong CA", leaf: FrontProxyClient,
			breakI: func(t *testing.T, b Bundle) {
				// The right subject and usages, but from the Karmada CA.
				reissue(t, b, client(FrontProxyClient, CA, "front-proxy-client"), Request{})
			},
		},
		{
			name: "wrong subject", leaf: KubeControllerManagerClient,
			breakI: func(t *testing.T, b Bundle) {
				reissue(t, b, client(KubeControllerManagerClient, CA, "system:kube-controller-manager", mastersGroup), Request{})
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := fresh(t)
			broken := maps.Clone(good)
			tc.breakI(t, broken)
			input := maps.Clone(broken)
			after, _, changed := mustEnsure(t, broken, testRequest(), testNow)
			if !maps.EqualFunc(broken, input, func(a, b []byte) bool { return string(a) == string(b) }) {
				t.Error("Ensure modified its input")
			}
			if !slices.Equal(changed, []string{tc.leaf}) {
				t.Errorf("changed %q, want only %s", changed, tc.leaf)
			}
			assertUnchangedExcept(t, good, after, []string{tc.leaf}, nil)
			if err := after.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestEnsureNeverOrphansLiveDependentsOfATrustRoot(t *testing.T) {
	tests := []struct {
		name     string                   // what happened to the trust root
		breakI   func(*testing.T, Bundle) // the damage
		wantRoot string                   // TrustRootError.Name expected; empty for success
		want     []string                 // on success, the names re-issued
	}{
		{
			name:     "lost ca.key with live leaves is refused",
			breakI:   func(_ *testing.T, b Bundle) { delete(b, KeyFile(CA)) },
			wantRoot: CA,
		},
		{
			name:     "corrupted etcd-ca.crt with live leaves is refused",
			breakI:   func(_ *testing.T, b Bundle) { b[CertFile(EtcdCA)] = []byte("junk") },
			wantRoot: EtcdCA,
		},
		{
			name: "lost front-proxy-ca with a broken leaf is re-issued with it",
			breakI: func(_ *testing.T, b Bundle) {
				delete(b, CertFile(FrontProxyCA))
				delete(b, KeyFile(FrontProxyCA))
				b[CertFile(FrontProxyClient)] = []byte("junk")
			},
			want: []string{FrontProxyCA, FrontProxyClient},
		},
		{
			name:     "lost sa.key with sa.pub present is refused",
			breakI:   func(_ *testing.T, b Bundle) { delete(b, ServiceAccountKeyFile) },
			wantRoot: ServiceAccountKeyFile,
		},
		{
			name:   "lost sa.pub is derived again from sa.key",
			breakI: func(_ *testing.T, b Bundle) { delete(b, ServiceAccountPubFile) },
			want:   []string{ServiceAccount},
		},
		{
			name: "a user-supplied CA is kept and its leaves re-issued under it",
			breakI: func(t *testing.T, b Bundle) {
				reissue(t, b, spec{name: CA, kind: kindCA, cn: "Example Corp Karmada CA"}, Request{})
			},
			want: []string{
				AdminClient, AggregatedAPIServerClient, AggregatedAPIServerServer, APIServerServer,
				ControllerManagerClient, SchedulerClient, WebhookClient, WebhookServer, KubeControllerManagerClient,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := fresh(t)
			broken := maps.Clone(good)
			tc.breakI(t, broken)
			after, _, changed, err := Ensure(broken, testRequest(), testNow)
			if tc.wantRoot != "" {
				var tre *TrustRootError
				if !errors.As(err, &tre) || tre.Name != tc.wantRoot || len(tre.Dependents) == 0 {
					t.Fatalf("err = %v, want a TrustRootError for %s with dependents", err, tc.wantRoot)
				}
				if after != nil || changed != nil {
					t.Errorf("got a bundle with the error; the caller must not write anything")
				}
				return
			}
			if err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(changed, want) {
				t.Errorf("changed %q, want %q", changed, want)
			}
			if err := after.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if string(after[ServiceAccountPubFile]) != string(good[ServiceAccountPubFile]) {
				t.Errorf("sa.pub is not byte-identical to the one derived at first")
			}
		})
	}
}

func TestEnsureRejectsInvalidRequests(t *testing.T) {
	tests := []struct {
		name   string         // what is wrong
		mutate func(*Request) // makes the request invalid
	}{
		{name: "host name with a slash", mutate: func(r *Request) { r.EtcdHosts[0].Name = "../e1" }},
		{name: "empty host name", mutate: func(r *Request) { r.APIServerHosts[0].Name = "" }},
		{name: "duplicate etcd host", mutate: func(r *Request) { r.EtcdHosts[1].Name = "e1" }},
		{name: "empty address", mutate: func(r *Request) { r.ControlPlaneHosts[0].Address = "" }},
		{name: "address with a space", mutate: func(r *Request) { r.APIServerHosts[0].Address = "a b" }},
		{name: "empty extra SAN", mutate: func(r *Request) { r.ExtraSANs = []string{""} }},
		{name: "endpoint without port", mutate: func(r *Request) { r.Endpoint = "vip.dc.example" }},
		{name: "service subnet not a CIDR", mutate: func(r *Request) { r.ServiceSubnet = "10.96.0.0" }},
		{name: "service subnet of one address", mutate: func(r *Request) { r.ServiceSubnet = "10.96.0.0/32" }},
		{name: "renewBefore as long as validity", mutate: func(r *Request) { r.Validity, r.RenewBefore = 30*day, 30*day }},
		{name: "negative renewBefore", mutate: func(r *Request) { r.RenewBefore = -time.Hour }},
		{name: "negative validity", mutate: func(r *Request) { r.Validity = -time.Hour }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := testRequest()
			tc.mutate(&req)
			if _, _, _, err := Ensure(nil, req, testNow); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

func TestNextCheck(t *testing.T) {
	ca := Cert{Name: CA, NotAfter: testNow.Add(3650 * day)}
	tests := []struct {
		name  string    // situation
		certs []Cert    // as Ensure reports them
		want  time.Time // when Ensure next has work
	}{
		{name: "no certificates", certs: nil},
		{
			name: "a leaf's renewal window opens first",
			certs: []Cert{ca,
				{Name: AdminClient, Issuer: CA, NotAfter: testNow.Add(365 * day)},
				{Name: SchedulerClient, Issuer: CA, NotAfter: testNow.Add(100 * day)}},
			want: testNow.Add(70 * day),
		},
		{
			name:  "a leaf capped by its CA waits for the CA's expiry",
			certs: []Cert{ca, {Name: AdminClient, Issuer: CA, NotAfter: ca.NotAfter}},
			want:  ca.NotAfter,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextCheck(tc.certs, 0); !got.Equal(tc.want) {
				t.Errorf("NextCheck = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEnsureKeepsAUserSuppliedIntermediateCA(t *testing.T) {
	// A data centre's own PKI: a root that stays offline and an intermediate
	// handed to kao as ca.crt and ca.key.
	newCA := func(cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		key, err := newKey()
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: testNow.Add(-day), NotAfter: testNow.Add(5 * 365 * day),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	}
	root, rootKey, _ := newCA("Example Corp Root", nil, nil)
	_, interKey, interPEM := newCA("Example Corp Karmada Intermediate", root, rootKey)
	interKeyPEM, err := encodeKey(interKey)
	if err != nil {
		t.Fatal(err)
	}

	b, _, changed := mustEnsure(t, Bundle{CertFile(CA): interPEM, KeyFile(CA): interKeyPEM}, testRequest(), testNow)
	if slices.Contains(changed, CA) || string(b[CertFile(CA)]) != string(interPEM) {
		t.Errorf("the intermediate CA was replaced (changed %q)", changed)
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if _, err := handshake(t, b, APIServerServer, CA, AdminClient, CA, "vip.dc.example"); err != nil {
		t.Errorf("handshake trusting only the intermediate: %v", err)
	}
}

func TestEnsureReissueRenewsEveryLeafAndKeepsTheTrustRoots(t *testing.T) {
	before := fresh(t)
	req := testRequest()
	req.Reissue = true
	later := testNow.Add(time.Hour)
	after, certs, changed := mustEnsure(t, before, req, later)

	roots := []string{CA, FrontProxyCA, EtcdCA}
	var leaves []string
	for _, c := range certs {
		if c.Issuer != "" {
			leaves = append(leaves, c.Name)
		}
	}
	if !slices.Equal(changed, leaves) {
		t.Errorf("changed %q, want every leaf %q", changed, leaves)
	}
	for _, name := range roots {
		if string(after[CertFile(name)]) != string(before[CertFile(name)]) || string(after[KeyFile(name)]) != string(before[KeyFile(name)]) {
			t.Errorf("%s changed: a rotation keeps the CAs", name)
		}
	}
	if string(after[ServiceAccountKeyFile]) != string(before[ServiceAccountKeyFile]) {
		t.Error("sa.key changed: a rotation keeps it")
	}
	for _, name := range leaves {
		if string(after[KeyFile(name)]) == string(before[KeyFile(name)]) {
			t.Errorf("%s kept its key: a rotation issues new keys", name)
		}
		if got, want := mustCert(t, after, name).NotAfter, later.Add(DefaultValidity); !got.Equal(want) {
			t.Errorf("%s expires at %s, want %s", name, got, want)
		}
	}
	// Without Reissue, the rotated bundle is kept byte for byte.
	if _, _, again := mustEnsure(t, after, testRequest(), later); len(again) != 0 {
		t.Errorf("a call after the rotation changed %q", again)
	}
}
