package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// keyPair is a parsed certificate with its key and the PEM they came from.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// publicKey is what every crypto/* public key implements.
type publicKey interface {
	Equal(crypto.PublicKey) bool
}

// loadPair reads name's certificate and key from b and returns them, or why
// they are unusable.
func loadPair(b Bundle, name string) (*keyPair, string) {
	certPEM, keyPEM := b[CertFile(name)], b[KeyFile(name)]
	switch {
	case len(certPEM) == 0:
		return nil, "missing"
	case len(keyPEM) == 0:
		return nil, "missing its key"
	}
	c, err := parseCert(certPEM)
	if err != nil {
		return nil, "unparsable: " + err.Error()
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, "unparsable key: " + err.Error()
	}
	if !keyMatches(c, key) {
		return nil, "not matching its key"
	}
	return &keyPair{cert: c, key: key, certPEM: certPEM, keyPEM: keyPEM}, ""
}

// parseCert parses the first certificate of a PEM file.
func parseCert(data []byte) (*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate: %w", err)
	}
	return certs[0], nil
}

// parseKey parses a PEM private key that can sign.
func parseKey(data []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("parsing private key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", k)
	}
	return s, nil
}

// keyMatches tells whether key is the private half of c's public key.
func keyMatches(c *x509.Certificate, key crypto.Signer) bool {
	pub, ok := c.PublicKey.(publicKey)
	return ok && pub.Equal(key.Public())
}

// leafProblem says why the leaf s in existing must be (re)issued under ca, or
// "" when it is still good.
func leafProblem(existing Bundle, s spec, ca *keyPair, r *request, now time.Time) string {
	kp, problem := loadPair(existing, s.name)
	if problem != "" {
		return problem
	}
	c := kp.cert
	if !bytes.Equal(c.RawIssuer, ca.cert.RawSubject) || c.CheckSignatureFrom(ca.cert) != nil {
		return "not signed by the current " + s.issuer
	}
	if !now.Add(r.RenewBefore).Before(c.NotAfter) && leafNotAfter(r, ca, now).After(c.NotAfter) {
		return "expiring at " + c.NotAfter.Format(time.RFC3339)
	}
	if c.IsCA || c.KeyUsage != s.kind.keyUsage() || len(c.UnknownExtKeyUsage) > 0 ||
		!sameSet(c.ExtKeyUsage, s.kind.extKeyUsages(), func(a, b x509.ExtKeyUsage) int { return int(a) - int(b) }) {
		return "usages changed"
	}
	if c.Subject.CommonName != s.cn || !sameSet(c.Subject.Organization, s.orgs, strings.Compare) {
		return "subject changed"
	}
	dns := make([]string, len(c.DNSNames))
	for i, d := range c.DNSNames {
		dns[i] = strings.ToLower(d)
	}
	ips := make([]netip.Addr, 0, len(c.IPAddresses))
	for _, ip := range c.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			return "SANs changed"
		}
		ips = append(ips, a.Unmap())
	}
	if !sameSet(dns, s.dns, strings.Compare) || !sameSet(ips, s.ips, func(a, b netip.Addr) int { return a.Compare(b) }) {
		return "SANs changed"
	}
	return ""
}

// sameSet tells whether a and b hold the same elements, ignoring order and
// repeats.
func sameSet[T comparable](a, b []T, cmp func(T, T) int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, cmp)
	slices.SortFunc(b, cmp)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// leafNotAfter is when a leaf issued now under ca expires: after Validity, but
// never after the CA itself.
func leafNotAfter(r *request, ca *keyPair, now time.Time) time.Time {
	end := now.Add(r.Validity)
	if ca.cert.NotAfter.Before(end) {
		return ca.cert.NotAfter
	}
	return end
}

// issue creates s with a new ECDSA P-256 key, signed by ca, or self-signed
// when s is a CA (ca is then ignored).
func issue(s spec, ca *keyPair, r *request, now time.Time) (*keyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", s.name, err)
	}
	// 128 random bits, as RFC 5280 and the CA/Browser Forum ask for at least 64.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("issuing %s: drawing a serial number: %w", s.name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial.Add(serial, big.NewInt(1)), // never zero
		Subject:               pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:             now.Add(-clockSkew),
		KeyUsage:              s.kind.keyUsage(),
		ExtKeyUsage:           s.kind.extKeyUsages(),
		BasicConstraintsValid: true,
		DNSNames:              s.dns,
	}
	for _, ip := range s.ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(ip.AsSlice()))
	}
	parent, signer := tmpl, crypto.Signer(key)
	if s.kind == kindCA {
		tmpl.IsCA = true
		tmpl.MaxPathLenZero = true // our CAs sign only leaves
		tmpl.NotAfter = now.Add(r.CAValidity)
	} else {
		if ca == nil {
			return nil, fmt.Errorf("issuing %s: no CA %s to sign it", s.name, s.issuer)
		}
		parent, signer = ca.cert, ca.key
		if ca.cert.NotBefore.After(tmpl.NotBefore) {
			tmpl.NotBefore = ca.cert.NotBefore
		}
		tmpl.NotAfter = leafNotAfter(r, ca, now)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", s.name, err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: reading it back: %w", s.name, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, fmt.Errorf("issuing %s: %w", s.name, err)
	}
	return &keyPair{
		cert:    c,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

// newKey generates an ECDSA P-256 key: quick to make, and accepted by
// kube-apiserver, kube-controller-manager, etcd and the Karmada components.
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating an ECDSA P-256 key: %w", err)
	}
	return key, nil
}

// encodeKey is key as a SEC 1 "EC PRIVATE KEY" PEM block.
func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: der}), nil
}

// encodePublic is pub as a PKIX "PUBLIC KEY" PEM block.
func encodePublic(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: der}), nil
}

// publicMatches tells whether data is a PEM public key equal to key's.
func publicMatches(data []byte, key crypto.Signer) bool {
	pubs, err := keyutil.ParsePublicKeysPEM(data)
	if err != nil || len(pubs) != 1 {
		return false
	}
	pub, ok := pubs[0].(publicKey)
	return ok && pub.Equal(key.Public())
}

// ensureServiceAccount puts the service-account key pair into b: the one in
// existing while sa.key parses (re-deriving sa.pub if needed), a new one when
// there is none. It reports whether it wrote anything new.
func ensureServiceAccount(b, existing Bundle) (bool, error) {
	keyPEM := existing[ServiceAccountKeyFile]
	key, err := parseKey(keyPEM)
	if err == nil {
		b[ServiceAccountKeyFile] = keyPEM
		if old := existing[ServiceAccountPubFile]; publicMatches(old, key) {
			b[ServiceAccountPubFile] = old
			return false, nil
		}
		pubPEM, err := encodePublic(key.Public())
		if err != nil {
			return false, fmt.Errorf("deriving %s: %w", ServiceAccountPubFile, err)
		}
		b[ServiceAccountPubFile] = pubPEM
		return true, nil
	}

	problem := "missing"
	if len(keyPEM) > 0 {
		problem = "unparsable"
	}
	if pubs, perr := keyutil.ParsePublicKeysPEM(existing[ServiceAccountPubFile]); perr == nil && len(pubs) > 0 {
		// Tokens already handed out were signed by the lost key and are
		// verified with sa.pub; a new key would silently invalidate them.
		return false, &TrustRootError{Name: ServiceAccountKeyFile, Problem: problem, Dependents: []string{ServiceAccountPubFile}}
	}

	newSA, err := newKey()
	if err != nil {
		return false, fmt.Errorf("issuing %s: %w", ServiceAccountKeyFile, err)
	}
	keyPEM, err = encodeKey(newSA)
	if err != nil {
		return false, fmt.Errorf("issuing %s: %w", ServiceAccountKeyFile, err)
	}
	pubPEM, err := encodePublic(newSA.Public())
	if err != nil {
		return false, fmt.Errorf("issuing %s: %w", ServiceAccountPubFile, err)
	}
	b[ServiceAccountKeyFile], b[ServiceAccountPubFile] = keyPEM, pubPEM
	return true, nil
}
