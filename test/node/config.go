package node

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

const (
	// DefaultStateRoot holds one directory per cluster index: its state,
	// certificates, configs, logs, etcd data and the container runtime's root
	// and state. On disk, not on /run: images and logs can grow.
	DefaultStateRoot = "/var/lib/kao-node"

	// DefaultSubnetPool is the private range the harness owns; each cluster
	// takes one /22 of it (see addresses).
	DefaultSubnetPool = "10.214.0.0/16"

	// DefaultStartTimeout bounds Start: from the first process until the node
	// is Ready, the cluster's default service account exists and the
	// cluster DNS answers.
	DefaultStartTimeout = 3 * time.Minute

	// EnvStateRoot overrides DefaultStateRoot.
	EnvStateRoot = "KAO_NODE_STATE_ROOT"
	// EnvSubnetPool overrides DefaultSubnetPool.
	EnvSubnetPool = "KAO_NODE_SUBNET_POOL"

	// PauseImage is the sandbox image, built from test/node/cmd/pause and
	// imported before the kubelet starts.
	PauseImage = "kao.test/pause:1"

	// CoreDNSImage is the cluster DNS's image, written around the coredns
	// tool set's binary and imported before the kubelet starts.
	CoreDNSImage = "kao.test/coredns:1"

	// apiServerPort is the API server's port on the node address.
	apiServerPort = 6443
	// kubeletPort is the kubelet's port on the node address.
	kubeletPort = 10250
	// maxClusters bounds cluster indexes: a /16 pool holds 64 /22s.
	maxClusters = 64
	// dnsDomain is the cluster domain: the kubelet's clusterDomain, the
	// cluster DNS's zone and the domain the service account issuer names.
	dnsDomain = "cluster.local"
)

// Options change how Start builds a cluster. The zero value is the default.
type Options struct {
	// StateRoot is where the clusters' directories live; default
	// $KAO_NODE_STATE_ROOT, else DefaultStateRoot.
	StateRoot string
	// SubnetPool is an IPv4 /16 to /22 the harness may use; default
	// $KAO_NODE_SUBNET_POOL, else DefaultSubnetPool.
	SubnetPool string
	// StartTimeout bounds Start; default DefaultStartTimeout.
	StartTimeout time.Duration
}

func (o Options) complete() (Options, error) {
	o.StateRoot = firstNonEmpty(o.StateRoot, os.Getenv(EnvStateRoot), DefaultStateRoot)
	o.SubnetPool = firstNonEmpty(o.SubnetPool, os.Getenv(EnvSubnetPool), DefaultSubnetPool)
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if !filepath.IsAbs(o.StateRoot) {
		return o, fmt.Errorf("state root %q is not an absolute path", o.StateRoot)
	}
	p, err := netip.ParsePrefix(o.SubnetPool)
	if err != nil || !p.Addr().Is4() || p.Bits() < 16 || p.Bits() > 22 || p.Masked() != p {
		return o, fmt.Errorf("invalid subnet pool %q: want an IPv4 prefix between /16 and /22, host bits clear", o.SubnetPool)
	}
	return o, nil
}

// addresses are the networks of cluster idx: the /22 at offset idx of the
// pool, cut into four /24s.
type addresses struct {
	// Link is the /24 of the veth between the machine and the node's network
	// namespace; Host (.1) is the machine's end, Node (.2) the node's: the
	// node IP, where the API server and the kubelet listen.
	Link       netip.Prefix
	Host, Node netip.Addr
	// Pods is the CNI bridge's subnet; its .1 is the bridge (the pods' gateway).
	Pods netip.Prefix
	// Services is the service cluster IP range; its .1 is the kubernetes
	// Service, its .10 the kube-dns Service (as kubeadm picks them).
	Services netip.Prefix
	// APIService is the kubernetes Service's cluster IP.
	APIService netip.Addr
	// DNSService is the kube-dns Service's cluster IP: the kubelet's
	// clusterDNS, the nameserver of the pods' resolv.conf.
	DNSService netip.Addr
	// LoadBalancers is the load-balancer pool: the allocator gives Services
	// of type LoadBalancer its addresses .1 to .254 (see loadbalancer.go).
	LoadBalancers netip.Prefix
}

func addressesFor(pool netip.Prefix, idx int) (addresses, error) {
	if count := 1 << (22 - pool.Bits()); idx < 0 || idx >= count || idx >= maxClusters {
		return addresses{}, fmt.Errorf("cluster index %d out of range of pool %s", idx, pool)
	}
	base := pool.Addr()
	at := func(off int) netip.Addr { return addAddr(base, idx*1024+off) }
	return addresses{
		Link:          netip.PrefixFrom(at(0), 24),
		Host:          at(1),
		Node:          at(2),
		Pods:          netip.PrefixFrom(at(256), 24),
		Services:      netip.PrefixFrom(at(512), 24),
		APIService:    at(513),
		DNSService:    at(522),
		LoadBalancers: netip.PrefixFrom(at(768), 24),
	}, nil
}

// block is the whole /22 of a cluster.
func (a addresses) block() netip.Prefix { return netip.PrefixFrom(a.Link.Addr(), 22) }

// addAddr returns the IPv4 address n after a.
func addAddr(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Names of a cluster's resources on the machine, by index.
func netnsName(idx int) string { return fmt.Sprintf("kao-node-%d", idx) }
func vethName(idx int) string  { return fmt.Sprintf("kaonode%d", idx) }
func nodeName(idx int) string  { return fmt.Sprintf("kao-node-%d", idx) }

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
