package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Validate checks that every certificate in b matches its private key, that
// every CA is a CA certificate allowed to sign, that every leaf chains to the CA that signs it
// (ca, front-proxy-ca or etcd-ca, decided by its name), and that sa.key and
// sa.pub belong together. It does not check expiry (see Ensure and NextCheck)
// or that b holds everything a Request calls for. All problems are reported,
// sorted by file name.
func (b Bundle) Validate() error {
	files := make([]string, 0, len(b))
	for f := range b {
		files = append(files, f)
	}
	slices.Sort(files)

	var errs []error
	for _, f := range files {
		switch {
		case f == ServiceAccountKeyFile || f == ServiceAccountPubFile:
			continue
		case strings.HasSuffix(f, ".key"):
			if _, ok := b[CertFile(strings.TrimSuffix(f, ".key"))]; !ok {
				errs = append(errs, fmt.Errorf("%s has no certificate", f))
			}
			continue
		case !strings.HasSuffix(f, ".crt"):
			errs = append(errs, fmt.Errorf("%s is not a file of a certificate bundle", f))
			continue
		}
		if err := b.validateCert(strings.TrimSuffix(f, ".crt")); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.validateServiceAccount(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateCert checks the certificate name: key, CA-ness and chain.
func (b Bundle) validateCert(name string) error {
	kp, problem := loadPair(b, name)
	if problem != "" {
		return fmt.Errorf("%s is %s", CertFile(name), problem)
	}
	issuer := issuerOf(name)
	if issuer == "" {
		// Not necessarily self-signed: a user may bring an intermediate CA of
		// their own PKI, which Go clients accept as a trust anchor.
		if !kp.cert.IsCA || !kp.cert.BasicConstraintsValid || kp.cert.KeyUsage&x509.KeyUsageCertSign == 0 {
			return fmt.Errorf("%s is not a CA", CertFile(name))
		}
		return nil
	}
	caPEM, ok := b[CertFile(issuer)]
	if !ok {
		return fmt.Errorf("%s: its CA %s is not in the bundle", CertFile(name), CertFile(issuer))
	}
	ca, err := parseCert(caPEM)
	if err != nil {
		return fmt.Errorf("%s: its CA %s: %w", CertFile(name), CertFile(issuer), err)
	}
	if err := verifyChain(kp.cert, ca, x509.ExtKeyUsageAny); err != nil {
		return fmt.Errorf("%s does not chain to %s: %w", CertFile(name), CertFile(issuer), err)
	}
	return nil
}

// validateServiceAccount checks that sa.key and sa.pub, if present, match.
func (b Bundle) validateServiceAccount() error {
	keyPEM, hasKey := b[ServiceAccountKeyFile]
	pubPEM, hasPub := b[ServiceAccountPubFile]
	switch {
	case !hasKey && !hasPub:
		return nil
	case !hasKey || !hasPub:
		return fmt.Errorf("%s and %s must come together", ServiceAccountKeyFile, ServiceAccountPubFile)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", ServiceAccountKeyFile, err)
	}
	if !publicMatches(pubPEM, key) {
		return fmt.Errorf("%s is not the public key of %s", ServiceAccountPubFile, ServiceAccountKeyFile)
	}
	return nil
}

// verifyChain checks that leaf is signed by ca and allowed for usage, at a
// moment when both are valid, so that the answer does not depend on the clock.
func verifyChain(leaf, ca *x509.Certificate, usage x509.ExtKeyUsage) error {
	at := leaf.NotBefore
	if ca.NotBefore.After(at) {
		at = ca.NotBefore
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("verifying the chain: %w", err)
	}
	return nil
}
