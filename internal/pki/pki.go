// Package pki issues and renews every certificate a Karmada control plane
// needs: three CAs (Karmada, front proxy, etcd), the serving certificates of
// karmada-apiserver, karmada-aggregated-apiserver, karmada-webhook and each
// etcd member, one client certificate per component identity (following
// Karmada's certificate framework, website
// docs/administrator/security/cert-framework.md), and the service-account
// signing key pair.
//
// Everything is PEM in a flat Bundle (file name → bytes) that the operator
// keeps in a Secret, so every name is a valid Secret key. Ensure is a pure
// function of the existing bundle, the request and the clock: it keeps what is
// still good byte for byte and issues only what is missing, broken, about to
// expire or no longer matching the request.
//
// Trust roots (the CAs and sa.key) are never replaced while something that
// depends on them is still valid; see Ensure and TrustRootError.
package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults applied by Ensure when a Request leaves a field empty. They match
// the defaults documented on spec.certificates and spec.apiServer.
const (
	// DefaultValidity is how long leaf certificates are valid: one year.
	DefaultValidity = 8760 * time.Hour
	// DefaultCAValidity is how long CAs are valid: ten years.
	DefaultCAValidity = 87600 * time.Hour
	// DefaultRenewBefore is how long before expiry a leaf is renewed: 30 days.
	DefaultRenewBefore = 720 * time.Hour
	// DefaultServiceSubnet is karmada-apiserver's default service IP range.
	DefaultServiceSubnet = "10.96.0.0/12"
)

// clockSkew backdates every NotBefore so that a host whose clock runs a little
// behind the operator's still accepts a certificate issued a moment ago.
const clockSkew = 5 * time.Minute

// Host is a machine of the control plane.
type Host struct {
	// Name is the host's name; it becomes part of file names (etcd-server-<name>)
	// and a DNS SAN, so it may use only [-._a-zA-Z0-9].
	Name string
	// Address is an IP address or DNS name; it becomes a SAN.
	Address string
	// SANs are more IP addresses or DNS names of the host's etcd certificates:
	// the Service names a Containerized etcd member is reached at.
	SANs []string
}

// Request describes what to issue.
type Request struct {
	// EtcdHosts get etcd-server-<name> and etcd-peer-<name> certificates.
	EtcdHosts []Host
	// APIServerHosts run karmada-apiserver and karmada-aggregated-apiserver;
	// their names and addresses go into both serving certificates.
	APIServerHosts []Host
	// ControlPlaneHosts run karmada-webhook and the controllers; their names and
	// addresses go into karmada-webhook's serving certificate.
	ControlPlaneHosts []Host
	// Endpoint is the external host:port clients use (VIP or load balancer); its
	// host goes into karmada-apiserver's SANs. Empty adds nothing.
	Endpoint string
	// ExtraSANs are spec.apiServer.certSANs: IPs or DNS names (wildcards
	// allowed) added to karmada-apiserver's serving certificate.
	ExtraSANs []string
	// ServerSANs are more IP addresses or DNS names for the serving
	// certificates of karmada-apiserver, karmada-aggregated-apiserver,
	// karmada-webhook and the addons' servers, keyed by certificate name
	// (APIServerServer, AggregatedAPIServerServer, WebhookServer,
	// SearchServer, MetricsAdapterServer, EstimatorServer): in Containerized
	// mode the names of the host cluster Services they are reached at. A
	// name of an addon that is not enabled is ignored.
	ServerSANs map[string][]string
	// ServiceSubnet is the service IP range (one CIDR); its first IP, the
	// address of the in-cluster "kubernetes" Service, goes into
	// karmada-apiserver's SANs. Empty means DefaultServiceSubnet.
	ServiceSubnet string
	// PullMembers are the names of the pull-mode member clusters (Karmada
	// Cluster names, DNS-1123 labels). Each gets a karmada-agent-<name>
	// client certificate signed by the Karmada CA, with the identity
	// system:karmada:agent:<name> in group system:karmada:agents, which
	// kao hands to that member's karmada-agent instead of an admin
	// credential. A member that leaves the list loses its certificate.
	PullMembers []string
	// Addons are the addons enabled in spec.addons; each gets the
	// certificates it needs (see Addons). Disabling one drops them.
	Addons Addons
	// ExternalEtcd means the user brings etcd and its certificates: no etcd CA,
	// etcd server, peer, client or health-check certificates are issued.
	ExternalEtcd bool
	// Validity is the lifetime of leaf certificates (zero: DefaultValidity).
	Validity time.Duration
	// CAValidity is the lifetime of new CAs (zero: DefaultCAValidity).
	CAValidity time.Duration
	// RenewBefore is how long before expiry a leaf is re-issued (zero:
	// DefaultRenewBefore). It must be shorter than Validity.
	RenewBefore time.Duration
	// Reissue re-issues every leaf certificate, each with a new key, whatever
	// its state: a rotation asked for by a person. CAs and sa.key are kept.
	Reissue bool
}

// Addons says which addons run on the controlPlane hosts.
type Addons struct {
	// Search gets karmada-search's serving certificate (the controlPlane
	// hosts and karmada-search.karmada-system.svc), its client identity and,
	// with managed etcd, its etcd client certificate.
	Search bool
	// MetricsAdapter gets karmada-metrics-adapter's serving certificate and
	// client identity.
	MetricsAdapter bool
	// Descheduler gets karmada-descheduler's client identity; with
	// SchedulerEstimator it also presents the estimator client certificate.
	Descheduler bool
	// SchedulerEstimator gets the estimators' serving certificate (the
	// controlPlane hosts and loopback, where karmada-scheduler dials them)
	// and the client certificate karmada-scheduler and karmada-descheduler
	// present to them.
	SchedulerEstimator bool
}

// Bundle maps file names to PEM contents: <name>.crt and <name>.key for every
// certificate, plus sa.key and sa.pub.
type Bundle map[string][]byte

// Cert describes one issued certificate, for status.certificates.
type Cert struct {
	// Name is the certificate's name, its file name without .crt.
	Name string
	// Issuer is the name of the CA that signed it; empty for a CA.
	Issuer string
	// NotBefore is when it became valid.
	NotBefore time.Time
	// NotAfter is when it expires.
	NotAfter time.Time
}

// TrustRootError is returned by Ensure when a CA or the service-account key is
// missing, unusable or expired, and replacing it would orphan something that
// still depends on it: a leaf in the bundle that is still valid (for a CA) or
// tokens verified by sa.pub (for sa.key). Ensure never rotates a trust root
// under live dependents; a person restores the old material or removes the
// dependents from the Secret to accept a re-issue of everything under a new root.
type TrustRootError struct {
	// Name is the trust root: ca, front-proxy-ca, etcd-ca or sa.key.
	Name string
	// Problem says what is wrong with it.
	Problem string
	// Dependents are the names that still depend on it.
	Dependents []string
}

// Error implements error.
func (e *TrustRootError) Error() string {
	return fmt.Sprintf("%s is %s, yet these still depend on it: %s; restore %s, or delete them from the Secret to issue a new one",
		e.Name, e.Problem, strings.Join(e.Dependents, ", "), e.Name)
}

// ErrInvalidRequest wraps every error caused by the Request itself.
var ErrInvalidRequest = errors.New("invalid certificate request")

// Ensure returns a bundle for req, reusing everything in existing that is
// still good, byte for byte.
//
// CAs (ca, front-proxy-ca, etcd-ca) are kept while they parse, match their
// key, are CAs and have not expired; a user may therefore put their own CA
// pair into the Secret before the first install. A CA that is missing,
// unusable or expired is issued anew only when no certificate it signs is
// still valid at now. Because every leaf's NotAfter is capped by its CA's,
// an expired CA has only expired leaves: Ensure then issues a new CA and every
// leaf under it, which is a recovery, and changed names the CA. Otherwise
// (for example ca.key was lost while the leaves still work) Ensure returns a
// *TrustRootError and no bundle. CAs are never renewed ahead of expiry (CA
// rotation is a later feature); NextCheck tells when one expires. When
// changed names a CA on an existing deployment, everything outside the bundle
// that trusts it must be refreshed too: exported kubeconfigs, webhook and
// APIService caBundles, and pull-mode karmada-agents (which re-register).
//
// Changing Validity or CAValidity does not re-issue anything; the new
// lifetime applies at the next issue.
//
// A leaf is re-issued, with a new key, when it is missing, unparsable, does
// not match its key, is not signed by the current CA, expires within
// RenewBefore, or when its subject, SANs or usages no longer match req, and
// every leaf when req.Reissue is set. A leaf
// whose NotAfter already equals its CA's NotAfter is not re-issued for being
// close to expiry, since a new one could not live longer; it is re-issued with
// the new CA once the CA has expired.
//
// sa.key is kept forever once made; sa.pub is re-derived from it when missing
// or wrong. A lost sa.key with sa.pub still present is a *TrustRootError.
//
// Files in existing that req does not call for (for example the certificates
// of a removed etcd host) are dropped and not listed in changed. The file
// names of b depend only on req. certs lists every certificate in b sorted by
// name; changed lists the sorted names (as in Cert.Name, and "sa") that were
// issued or re-issued, for logs and Events.
func Ensure(existing Bundle, req Request, now time.Time) (b Bundle, certs []Cert, changed []string, err error) {
	r, err := normalize(req)
	if err != nil {
		return nil, nil, nil, err
	}
	// Certificates carry whole seconds; comparing against a truncated clock
	// keeps decisions stable between calls.
	now = now.UTC().Truncate(time.Second)
	specs := catalog(r)

	b = Bundle{}
	cas := map[string]*keyPair{}
	for _, s := range specs {
		if s.kind != kindCA {
			continue
		}
		ca, problem := loadCA(existing, s.name, now)
		if problem == "" {
			cas[s.name] = ca
			copyPair(b, existing, s.name)
			continue
		}
		if deps := liveDependents(existing, specs, s.name, now); len(deps) > 0 {
			return nil, nil, nil, &TrustRootError{Name: s.name, Problem: problem, Dependents: deps}
		}
		ca, err := issue(s, nil, r, now)
		if err != nil {
			return nil, nil, nil, err
		}
		cas[s.name] = ca
		b[CertFile(s.name)], b[KeyFile(s.name)] = ca.certPEM, ca.keyPEM
		changed = append(changed, s.name)
	}

	saChanged, err := ensureServiceAccount(b, existing)
	if err != nil {
		return nil, nil, nil, err
	}
	if saChanged {
		changed = append(changed, ServiceAccount)
	}

	for _, s := range specs {
		if s.kind == kindCA {
			continue
		}
		ca := cas[s.issuer]
		if problem := leafProblem(existing, s, ca, r, now); problem == "" && !r.Reissue {
			copyPair(b, existing, s.name)
			continue
		}
		leaf, err := issue(s, ca, r, now)
		if err != nil {
			return nil, nil, nil, err
		}
		b[CertFile(s.name)], b[KeyFile(s.name)] = leaf.certPEM, leaf.keyPEM
		changed = append(changed, s.name)
	}

	certs, err = b.describe(specs)
	if err != nil {
		return nil, nil, nil, err
	}
	slices.Sort(changed)
	return b, certs, changed, nil
}

// NextCheck returns the earliest time at which Ensure would re-issue
// something in certs (as returned by Ensure with the same renewBefore; zero
// means DefaultRenewBefore): a leaf entering its renewal window, or a CA
// expiring. A leaf capped by its CA's expiry counts at the CA's expiry, not
// at its renewal window, so the result is never stuck in the past while
// nothing can be done. The zero time means certs is empty.
func NextCheck(certs []Cert, renewBefore time.Duration) time.Time {
	if renewBefore <= 0 {
		renewBefore = DefaultRenewBefore
	}
	caEnd := map[string]time.Time{}
	for _, c := range certs {
		if c.Issuer == "" {
			caEnd[c.Name] = c.NotAfter
		}
	}
	var next time.Time
	for _, c := range certs {
		at := c.NotAfter // a CA: CAs are not renewed ahead of expiry
		if c.Issuer != "" {
			at = c.NotAfter.Add(-renewBefore)
			if end, ok := caEnd[c.Issuer]; ok && !c.NotAfter.Before(end) {
				at = end
			}
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// copyPair copies name's certificate and key from src to dst unchanged.
func copyPair(dst, src Bundle, name string) {
	dst[CertFile(name)] = src[CertFile(name)]
	dst[KeyFile(name)] = src[KeyFile(name)]
}

// liveDependents lists the certificates in existing, signed by ca according
// to specs, that parse and have not expired at now.
func liveDependents(existing Bundle, specs []spec, ca string, now time.Time) []string {
	var deps []string
	for _, s := range specs {
		if s.issuer != ca {
			continue
		}
		c, err := parseCert(existing[CertFile(s.name)])
		if err == nil && now.Before(c.NotAfter) {
			deps = append(deps, s.name)
		}
	}
	return deps
}

// describe lists every certificate in b for status, sorted by name.
func (b Bundle) describe(specs []spec) ([]Cert, error) {
	certs := make([]Cert, 0, len(specs))
	for _, s := range specs {
		c, err := parseCert(b[CertFile(s.name)])
		if err != nil {
			return nil, fmt.Errorf("reading back %s: %w", CertFile(s.name), err)
		}
		certs = append(certs, Cert{Name: s.name, Issuer: s.issuer, NotBefore: c.NotBefore, NotAfter: c.NotAfter})
	}
	slices.SortFunc(certs, func(a, b Cert) int { return strings.Compare(a.Name, b.Name) })
	return certs, nil
}

// loadCA reads the CA name from b and returns it, or why it cannot sign.
func loadCA(b Bundle, name string, now time.Time) (*keyPair, string) {
	kp, problem := loadPair(b, name)
	if problem != "" {
		return nil, problem
	}
	switch {
	case !kp.cert.IsCA || !kp.cert.BasicConstraintsValid:
		return nil, "not a CA"
	case kp.cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, "not allowed to sign certificates"
	case !now.Before(kp.cert.NotAfter):
		return nil, "expired since " + kp.cert.NotAfter.Format(time.RFC3339)
	}
	return kp, ""
}

// NotAfter returns when name's certificate in b expires; ok is false when b
// has no such certificate or it does not parse.
func (b Bundle) NotAfter(name string) (notAfter time.Time, ok bool) {
	c, err := parseCert(b[CertFile(name)])
	if err != nil {
		return time.Time{}, false
	}
	return c.NotAfter, true
}
