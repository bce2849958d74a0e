package pki

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Names of the certificates in a Bundle. Each has <name>.crt and <name>.key.
const (
	// CA is the Karmada CA. It signs the servers and clients of the Karmada
	// API, and kube-controller-manager signs karmada-agent CSRs with it.
	CA = "ca"
	// FrontProxyCA signs front-proxy-client, which karmada-apiserver presents
	// to aggregated API servers.
	FrontProxyCA = "front-proxy-ca"
	// EtcdCA signs the etcd servers, peers and clients (absent with ExternalEtcd).
	EtcdCA = "etcd-ca"

	// APIServerServer is karmada-apiserver's serving certificate.
	APIServerServer = "karmada-apiserver-server"
	// AggregatedAPIServerServer is karmada-aggregated-apiserver's serving certificate.
	AggregatedAPIServerServer = "karmada-aggregated-apiserver-server"
	// WebhookServer is karmada-webhook's serving certificate.
	WebhookServer = "karmada-webhook-server"

	// AdminClient is the administrator (system:admin in system:masters).
	AdminClient = "admin-client"
	// KubeControllerManagerClient is kube-controller-manager's identity.
	KubeControllerManagerClient = "kube-controller-manager-client"
	// ControllerManagerClient is karmada-controller-manager's identity.
	ControllerManagerClient = "karmada-controller-manager-client"
	// SchedulerClient is karmada-scheduler's identity.
	SchedulerClient = "karmada-scheduler-client"
	// AggregatedAPIServerClient is karmada-aggregated-apiserver's identity.
	AggregatedAPIServerClient = "karmada-aggregated-apiserver-client"
	// WebhookClient is karmada-webhook's identity.
	WebhookClient = "karmada-webhook-client"

	// APIServerEtcdClient is karmada-apiserver's etcd client certificate.
	APIServerEtcdClient = "karmada-apiserver-etcd-client"
	// AggregatedAPIServerEtcdClient is karmada-aggregated-apiserver's etcd client certificate.
	AggregatedAPIServerEtcdClient = "karmada-aggregated-apiserver-etcd-client"
	// EtcdHealthcheckClient is the client that probes etcd health.
	EtcdHealthcheckClient = "etcd-healthcheck-client"

	// SearchServer is karmada-search's serving certificate.
	SearchServer = "karmada-search-server"
	// SearchClient is karmada-search's identity.
	SearchClient = "karmada-search-client"
	// SearchEtcdClient is karmada-search's etcd client certificate.
	SearchEtcdClient = "karmada-search-etcd-client"
	// MetricsAdapterServer is karmada-metrics-adapter's serving certificate.
	MetricsAdapterServer = "karmada-metrics-adapter-server"
	// MetricsAdapterClient is karmada-metrics-adapter's identity.
	MetricsAdapterClient = "karmada-metrics-adapter-client"
	// DeschedulerClient is karmada-descheduler's identity.
	DeschedulerClient = "karmada-descheduler-client"
	// EstimatorServer is the serving certificate of every
	// karmada-scheduler-estimator (gRPC, mutual TLS).
	EstimatorServer = "karmada-scheduler-estimator-server"
	// EstimatorClient is what karmada-scheduler and karmada-descheduler
	// present to the estimators.
	EstimatorClient = "karmada-scheduler-estimator-client"

	// FrontProxyClient is karmada-apiserver's client certificate towards
	// aggregated API servers (--proxy-client-cert-file).
	FrontProxyClient = "front-proxy-client"

	// ServiceAccount is the name reported in changed for the service-account
	// key pair, stored as ServiceAccountKeyFile and ServiceAccountPubFile.
	ServiceAccount = "sa"
	// ServiceAccountKeyFile is the service-account signing key
	// (--service-account-signing-key-file, --service-account-private-key-file).
	ServiceAccountKeyFile = "sa.key"
	// ServiceAccountPubFile is its public key (--service-account-key-file).
	ServiceAccountPubFile = "sa.pub"
)

// Prefixes of the per-host etcd certificate names and of the per-member
// karmada-agent certificate names.
const (
	etcdServerPrefix  = "etcd-server-"
	etcdPeerPrefix    = "etcd-peer-"
	agentClientPrefix = "karmada-agent-"
)

// CertFile is the bundle file name of name's certificate.
func CertFile(name string) string { return name + ".crt" }

// KeyFile is the bundle file name of name's private key.
func KeyFile(name string) string { return name + ".key" }

// EtcdServer is the name of the etcd serving certificate of host.
func EtcdServer(host string) string { return etcdServerPrefix + host }

// EtcdPeer is the name of the etcd peer certificate of host.
func EtcdPeer(host string) string { return etcdPeerPrefix + host }

// AgentClient is the name of the client certificate karmada-agent of the
// pull-mode member cluster member presents to karmada-apiserver.
func AgentClient(member string) string { return agentClientPrefix + member }

// AgentUser is the user name of member's karmada-agent in karmada-apiserver,
// the subject of its AgentClient certificate, which Karmada's per-cluster
// agent RBAC names.
func AgentUser(member string) string { return agentIdentityPrefix + member }

// CAs are the names of the three CAs a bundle may hold; with the
// service-account key they are its trust roots, which Ensure never replaces
// while something depends on them.
var CAs = []string{CA, FrontProxyCA, EtcdCA}

// issuerOf names the CA that signs name. It follows the naming scheme of the
// catalog (catalog_test.go checks that they agree), so that Validate needs no
// Request.
func issuerOf(name string) string {
	switch {
	case slices.Contains(CAs, name):
		return ""
	case name == FrontProxyClient:
		return FrontProxyCA
	case strings.HasPrefix(name, agentClientPrefix):
		// Before the etcd suffix rule: a member may be named "x-etcd-client".
		return CA
	case strings.HasPrefix(name, etcdServerPrefix), strings.HasPrefix(name, etcdPeerPrefix),
		name == EtcdHealthcheckClient, strings.HasSuffix(name, "-etcd-client"):
		return EtcdCA
	default:
		return CA
	}
}

// kind is what a certificate is for; it decides its usages.
type kind int

const (
	// kindCA signs other certificates.
	kindCA kind = iota
	// kindServer serves TLS.
	kindServer
	// kindClient authenticates a client.
	kindClient
	// kindPeer both serves and authenticates as a client, as etcd servers and
	// peers need (etcd dials its peers and, for the gateway, its own clients).
	kindPeer
)

// extKeyUsages are the extended key usages of a certificate of kind k.
func (k kind) extKeyUsages() []x509.ExtKeyUsage {
	switch k {
	case kindServer:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	case kindClient:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case kindPeer:
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	default:
		return nil
	}
}

// keyUsage is the key usage of a certificate of kind k.
func (k kind) keyUsage() x509.KeyUsage {
	if k == kindCA {
		return x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	}
	return x509.KeyUsageDigitalSignature
}

// spec is one certificate the control plane needs.
type spec struct {
	name   string
	kind   kind
	issuer string // CA name; empty for a CA
	cn     string
	orgs   []string
	dns    []string     // sorted, unique, lower case
	ips    []netip.Addr // sorted, unique, unmapped
}

// Well-known identities. Server and component client CNs follow Karmada's
// certificate framework (website docs/administrator/security/cert-framework.md,
// as implemented in hack/deploy-karmada.sh).
const (
	identityPrefix = "system:karmada:"
	mastersGroup   = "system:masters"
	// agentIdentityPrefix and agentsGroup are the user name prefix and group
	// of karmada-agent identities: the ones `karmadactl register` obtains
	// through a CSR and Karmada's per-cluster agent RBAC names.
	agentIdentityPrefix = identityPrefix + "agent:"
	agentsGroup         = identityPrefix + "agents"
)

// catalog lists every certificate r calls for, CAs first, in a fixed order.
func catalog(r *request) []spec {
	loopback := []string{"localhost", "127.0.0.1"}
	specs := []spec{
		{name: CA, kind: kindCA, cn: "karmada"},
		{name: FrontProxyCA, kind: kindCA, cn: "front-proxy-ca"},
	}
	if !r.ExternalEtcd {
		specs = append(specs, spec{name: EtcdCA, kind: kindCA, cn: "etcd-ca"})
	}

	apiServerSANs := slices.Concat(hostSANs(r.APIServerHosts), r.ExtraSANs, loopback, []string{
		r.serviceIP.String(),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
		"karmada-apiserver", "karmada-apiserver.karmada-system.svc", "karmada-apiserver.karmada-system.svc.cluster.local",
	})
	if r.endpointHost != "" {
		apiServerSANs = append(apiServerSANs, r.endpointHost)
	}
	specs = append(specs,
		server(APIServerServer, "karmada-apiserver", slices.Concat(apiServerSANs, r.ServerSANs[APIServerServer])),
		server(AggregatedAPIServerServer, "karmada-aggregated-apiserver", slices.Concat(hostSANs(r.APIServerHosts), loopback, []string{
			"karmada-aggregated-apiserver.karmada-system.svc", "karmada-aggregated-apiserver.karmada-system.svc.cluster.local",
		}, r.ServerSANs[AggregatedAPIServerServer])),
		server(WebhookServer, "karmada-webhook", slices.Concat(hostSANs(r.ControlPlaneHosts), loopback, []string{
			"karmada-webhook.karmada-system.svc", "karmada-webhook.karmada-system.svc.cluster.local",
		}, r.ServerSANs[WebhookServer])),

		client(AdminClient, CA, "system:admin", mastersGroup),
		// kube-controller-manager's default RBAC binds the user itself; no group.
		client(KubeControllerManagerClient, CA, "system:kube-controller-manager"),
		// Karmada's certificate framework puts every component identity into
		// system:masters (its choice, kept here so that Karmada's own RBAC
		// needs no extra bindings); the CN still tells the components apart in
		// audit logs.
		client(ControllerManagerClient, CA, identityPrefix+"karmada-controller-manager", mastersGroup),
		client(SchedulerClient, CA, identityPrefix+"karmada-scheduler", mastersGroup),
		client(AggregatedAPIServerClient, CA, identityPrefix+"karmada-aggregated-apiserver", mastersGroup),
		client(WebhookClient, CA, identityPrefix+"karmada-webhook", mastersGroup),
		// kube-apiserver's --requestheader-allowed-names=front-proxy-client.
		client(FrontProxyClient, FrontProxyCA, "front-proxy-client"),
	)
	specs = append(specs, addonSpecs(r, loopback)...)
	// One identity per pull-mode member, never system:masters: Karmada's
	// per-cluster agent RBAC grants it only what that member's agent needs.
	for _, m := range r.PullMembers {
		specs = append(specs, client(AgentClient(m), CA, AgentUser(m), agentsGroup))
	}

	if !r.ExternalEtcd {
		for _, h := range r.EtcdHosts {
			sans := slices.Concat(hostSANs([]Host{h}), h.SANs, loopback)
			s := server(EtcdServer(h.Name), "etcd-server", sans)
			s.kind, s.issuer = kindPeer, EtcdCA
			p := server(EtcdPeer(h.Name), "etcd-peer", sans)
			p.kind, p.issuer = kindPeer, EtcdCA
			specs = append(specs, s, p)
		}
		// etcd clients: the framework's system:karmada:<component>-etcd-client;
		// the health check is etcd's own client (component "etcd"). The O is
		// the framework's too; etcd itself ignores it.
		specs = append(specs,
			client(APIServerEtcdClient, EtcdCA, identityPrefix+"karmada-apiserver-etcd-client", mastersGroup),
			client(AggregatedAPIServerEtcdClient, EtcdCA, identityPrefix+"karmada-aggregated-apiserver-etcd-client", mastersGroup),
			client(EtcdHealthcheckClient, EtcdCA, identityPrefix+"etcd-etcd-client"),
		)
	}
	return specs
}

// serverSANTakers are the serving certificates Request.ServerSANs may add
// names to.
var serverSANTakers = []string{APIServerServer, AggregatedAPIServerServer, WebhookServer, SearchServer, MetricsAdapterServer, EstimatorServer}

// addonSpecs are the certificates of the enabled addons, which run on the
// controlPlane hosts. Their client identities follow the framework like the
// core components' (system:karmada:<component> in system:masters).
func addonSpecs(r *request, loopback []string) []spec {
	var specs []spec
	cp := hostSANs(r.ControlPlaneHosts)
	svc := func(name string) []string {
		return []string{name + ".karmada-system.svc", name + ".karmada-system.svc.cluster.local"}
	}
	if r.Addons.Search {
		specs = append(specs,
			server(SearchServer, "karmada-search", slices.Concat(cp, loopback, svc("karmada-search"), r.ServerSANs[SearchServer])),
			client(SearchClient, CA, identityPrefix+"karmada-search", mastersGroup))
		if !r.ExternalEtcd {
			specs = append(specs, client(SearchEtcdClient, EtcdCA, identityPrefix+"karmada-search-etcd-client", mastersGroup))
		}
	}
	if r.Addons.MetricsAdapter {
		specs = append(specs,
			server(MetricsAdapterServer, "karmada-metrics-adapter", slices.Concat(cp, loopback, svc("karmada-metrics-adapter"), r.ServerSANs[MetricsAdapterServer])),
			client(MetricsAdapterClient, CA, identityPrefix+"karmada-metrics-adapter", mastersGroup))
	}
	if r.Addons.Descheduler {
		specs = append(specs, client(DeschedulerClient, CA, identityPrefix+"karmada-descheduler", mastersGroup))
	}
	if r.Addons.SchedulerEstimator {
		specs = append(specs,
			server(EstimatorServer, "karmada-scheduler-estimator", slices.Concat(cp, loopback, r.ServerSANs[EstimatorServer])),
			// The estimators check only that kao's CA signed it.
			client(EstimatorClient, CA, identityPrefix+"karmada-scheduler-estimator-client"))
	}
	return specs
}

// server is a serving certificate signed by CA, with the framework's CN
// system:karmada:<component>.
func server(name, component string, sans []string) spec {
	dns, ips := splitSANs(sans)
	return spec{name: name, kind: kindServer, issuer: CA, cn: identityPrefix + component, dns: dns, ips: ips}
}

// client is a client certificate.
func client(name, issuer, cn string, orgs ...string) spec {
	return spec{name: name, kind: kindClient, issuer: issuer, cn: cn, orgs: orgs}
}

// hostSANs lists the names and addresses of hosts.
func hostSANs(hosts []Host) []string {
	out := make([]string, 0, 2*len(hosts))
	for _, h := range hosts {
		out = append(out, h.Name, h.Address)
	}
	return out
}

// splitSANs sorts SANs into unique lower-case DNS names and unique IPs, both
// sorted, so that equal sets compare equal.
func splitSANs(sans []string) ([]string, []netip.Addr) {
	var dns []string
	var ips []netip.Addr
	for _, s := range sans {
		if ip, err := netip.ParseAddr(s); err == nil {
			ips = append(ips, ip.Unmap())
			continue
		}
		dns = append(dns, strings.ToLower(s))
	}
	slices.Sort(dns)
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(dns), slices.Compact(ips)
}

// request is a Request with defaults applied and derived values computed.
type request struct {
	Request
	serviceIP    netip.Addr
	endpointHost string
}

// fileSafe is what a host name may look like: it becomes part of a Secret key.
var fileSafe = regexp.MustCompile(`^[a-zA-Z0-9]([-._a-zA-Z0-9]*[a-zA-Z0-9])?$`)

// memberName is what a member cluster name may look like (spec.members[].name):
// it becomes part of a Secret key and of the agent's user name.
var memberName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// normalize applies defaults and checks req.
func normalize(req Request) (*request, error) {
	r := &request{Request: req}
	if r.Validity == 0 {
		r.Validity = DefaultValidity
	}
	if r.CAValidity == 0 {
		r.CAValidity = DefaultCAValidity
	}
	if r.RenewBefore == 0 {
		r.RenewBefore = DefaultRenewBefore
	}
	if r.ServiceSubnet == "" {
		r.ServiceSubnet = DefaultServiceSubnet
	}
	switch {
	case r.Validity < time.Minute || r.CAValidity < time.Minute:
		return nil, fmt.Errorf("%w: validity %s and caValidity %s must be at least a minute", ErrInvalidRequest, r.Validity, r.CAValidity)
	case r.RenewBefore < 0 || r.RenewBefore >= r.Validity:
		// Otherwise every leaf would be due for renewal the moment it is issued.
		return nil, fmt.Errorf("%w: renewBefore %s must be between 0 and validity %s", ErrInvalidRequest, r.RenewBefore, r.Validity)
	}

	roles := []struct {
		role  string
		hosts []Host
	}{{"etcd", r.EtcdHosts}, {"apiServer", r.APIServerHosts}, {"controlPlane", r.ControlPlaneHosts}}
	for _, rh := range roles {
		role, seen := rh.role, map[string]bool{}
		for _, h := range rh.hosts {
			if len(h.Name) > 63 || !fileSafe.MatchString(h.Name) {
				return nil, fmt.Errorf("%w: %s host name %q must be at most 63 characters of [-._a-zA-Z0-9]", ErrInvalidRequest, role, h.Name)
			}
			if seen[h.Name] {
				return nil, fmt.Errorf("%w: %s host %q is listed twice", ErrInvalidRequest, role, h.Name)
			}
			seen[h.Name] = true
			if err := checkSAN(h.Address); err != nil {
				return nil, fmt.Errorf("%w: address of %s host %q: %w", ErrInvalidRequest, role, h.Name, err)
			}
			for _, san := range h.SANs {
				if err := checkSAN(san); err != nil {
					return nil, fmt.Errorf("%w: SAN of %s host %q: %w", ErrInvalidRequest, role, h.Name, err)
				}
			}
		}
	}
	for _, s := range r.ExtraSANs {
		if err := checkSAN(s); err != nil {
			return nil, fmt.Errorf("%w: extra SAN: %w", ErrInvalidRequest, err)
		}
	}
	for name, sans := range r.ServerSANs {
		if !slices.Contains(serverSANTakers, name) {
			return nil, fmt.Errorf("%w: server SANs for %q: only %s take more SANs",
				ErrInvalidRequest, name, strings.Join(serverSANTakers, ", "))
		}
		for _, s := range sans {
			if err := checkSAN(s); err != nil {
				return nil, fmt.Errorf("%w: SAN of %s: %w", ErrInvalidRequest, name, err)
			}
		}
	}
	seenMembers := map[string]bool{}
	for _, m := range r.PullMembers {
		if len(m) > 48 || !memberName.MatchString(m) {
			return nil, fmt.Errorf("%w: pull member name %q must be a DNS-1123 label of at most 48 characters", ErrInvalidRequest, m)
		}
		if seenMembers[m] {
			return nil, fmt.Errorf("%w: pull member %q is listed twice", ErrInvalidRequest, m)
		}
		seenMembers[m] = true
	}

	if r.Endpoint != "" {
		host, _, err := net.SplitHostPort(r.Endpoint)
		if err != nil {
			return nil, fmt.Errorf("%w: endpoint %q must be host:port: %w", ErrInvalidRequest, r.Endpoint, err)
		}
		if err := checkSAN(host); err != nil {
			return nil, fmt.Errorf("%w: endpoint host: %w", ErrInvalidRequest, err)
		}
		r.endpointHost = host
	}

	prefix, err := netip.ParsePrefix(r.ServiceSubnet)
	if err != nil {
		return nil, fmt.Errorf("%w: serviceSubnet %q: %w", ErrInvalidRequest, r.ServiceSubnet, err)
	}
	first := prefix.Masked().Addr().Next()
	if !first.IsValid() || !prefix.Contains(first) {
		return nil, fmt.Errorf("%w: serviceSubnet %q has no room for a service IP", ErrInvalidRequest, r.ServiceSubnet)
	}
	r.serviceIP = first.Unmap()
	return r, nil
}

// checkSAN rejects strings that cannot be a SAN: empty, too long, or holding
// anything but printable ASCII without spaces.
func checkSAN(s string) error {
	if s == "" || len(s) > 253 {
		return fmt.Errorf("%q must be 1 to 253 characters", s)
	}
	for _, c := range s {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%q must be an IP address or a DNS name", s)
		}
	}
	return nil
}
