package node

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// layout names the files of one cluster directory.
type layout string

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{string(l)}, elem...)...)
}
func (l layout) pki(name string) string        { return l.path("pki", name) }
func (l layout) kubeconfig(who string) string  { return l.path(who + ".kubeconfig") }
func (l layout) log(component string) string   { return l.path("logs", component+".log") }
func (l layout) containerd(elem string) string { return l.path("containerd", elem) }
func (l layout) containerdSocket() string      { return l.containerd("containerd.sock") }
func (l layout) kubeletRoot() string           { return l.path("kubelet") }
func (l layout) podLogs() string               { return l.path("pod-logs") }
func (l layout) cniConfDir() string            { return l.path("cni", "net.d") }
func (l layout) cniIPAMDir() string            { return l.path("cni", "ipam") }
func (l layout) etcdData() string              { return l.path("etcd") }

// clients are the client certificates and kubeconfigs the harness issues:
// file name, user (common name) and groups. The control plane components
// and the node use their own identities, so RBAC's bootstrap roles and the
// Node authorizer apply to them as in a real cluster.
var clients = []struct {
	name, user string
	groups     []string
}{
	{"admin", "kao-test-admin", []string{"system:masters"}},
	{"controller-manager", "system:kube-controller-manager", nil},
	{"scheduler", "system:kube-scheduler", nil},
	{"proxy", "system:kube-proxy", nil},
	// The kubelet's user is set per node, see writePKI.
	{"kubelet", "", []string{"system:nodes"}},
	// apiserver-kubelet-client is how the API server calls the kubelet (logs,
	// exec); no kubeconfig.
	{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}},
}

// writePKI writes the cluster's CA, serving and client certificates, the
// service account key pair and the kubeconfigs.
func writePKI(l layout, a addresses, node string) error {
	if err := os.MkdirAll(l.path("pki"), 0o700); err != nil {
		return err
	}
	authority, err := newCA(l.path("pki"))
	if err != nil {
		return err
	}
	node4 := net.IP(a.Node.AsSlice())
	err = authority.issue(l.path("pki"), "apiserver", certSpec{
		cn:     "kube-apiserver",
		ips:    []net.IP{node4, net.IP(a.APIService.AsSlice()), net.ParseIP("127.0.0.1")},
		dns:    []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + dnsDomain, "localhost"},
		server: true,
	})
	if err != nil {
		return err
	}
	err = authority.issue(l.path("pki"), "kubelet-serving", certSpec{cn: node, ips: []net.IP{node4}, dns: []string{node}, server: true})
	if err != nil {
		return err
	}
	for _, c := range clients {
		user := c.user
		if c.name == "kubelet" {
			user = "system:node:" + node
		}
		if err := authority.issue(l.path("pki"), c.name, certSpec{cn: user, orgs: c.groups, client: true}); err != nil {
			return err
		}
		if c.name == "apiserver-kubelet-client" {
			continue
		}
		if err := writeKubeconfig(l, c.name, a); err != nil {
			return err
		}
	}
	return newKeyPair(l.path("pki"), "sa")
}

func writeKubeconfig(l layout, who string, a addresses) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kao-test-node
  cluster:
    server: https://%s
    certificate-authority: %s
users:
- name: %s
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: kao-test-node
  context:
    cluster: kao-test-node
    user: %s
current-context: kao-test-node
`, net.JoinHostPort(a.Node.String(), fmt.Sprint(apiServerPort)), l.pki("ca.crt"), who, l.pki(who+".crt"), l.pki(who+".key"), who)
	return writeFile(l.kubeconfig(who), cfg)
}

// writeContainerdConfig writes containerd's config: every directory and
// socket under the cluster directory, runc with cgroupfs, the local pause
// image, and the settings this machine needs (see the package doc).
func writeContainerdConfig(l layout) error {
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  enable_selinux = false
  disable_apparmor = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
`, l.containerd("root"), l.containerd("state"), l.containerdSocket(), l.containerdSocket()+".ttrpc",
		l.containerd("opt"), PauseImage, l.containerd("runc"), cniBinDir, l.cniConfDir())
	return writeFile(l.containerd("config.toml"), cfg)
}

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// cniNetworkName names the cluster's CNI network; libcni's cache files
// (/var/lib/cni/results/NAME-...) carry it, which is how teardown finds them.
func cniNetworkName(idx int) string { return fmt.Sprintf("kao-node-%d", idx) }

// writeCNIConfig writes the pod network: a bridge in the node's network
// namespace holding the pod subnet's .1, host-local addresses kept in the
// cluster directory, and portmap for hostPort.
func writeCNIConfig(l layout, a addresses, idx int) error {
	cfg := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, cniNetworkName(idx), l.cniIPAMDir(), a.Pods.String(), addAddr(a.Pods.Addr(), 1).String())
	return writeFile(filepath.Join(l.cniConfDir(), "10-kao.conflist"), cfg)
}

// writeKubeletConfig writes the kubelet's configuration. The settings that
// differ from a kubeadm node are the ones this kind of machine needs: see
// the package doc.
func writeKubeletConfig(l layout, a addresses) error {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
podLogsDir: %s
resolvConf: ""
clusterDNS:
- %s
clusterDomain: %s
rotateCertificates: false
serverTLSBootstrap: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
`, l.containerdSocket(), a.Node, kubeletPort, l.pki("kubelet-serving.crt"), l.pki("kubelet-serving.key"),
		l.pki("ca.crt"), l.podLogs(), a.DNSService, dnsDomain)
	return writeFile(l.path("kubelet.yaml"), cfg)
}

// writeKubeProxyConfig writes kube-proxy's configuration: iptables mode, in
// the node's network namespace, touching no machine-wide sysctl.
func writeKubeProxyConfig(l layout, a addresses, node string) error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, l.kubeconfig("proxy"), node, a.Pods, a.Node)
	return writeFile(l.path("kube-proxy.yaml"), cfg)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// flags joins name=value pairs into command line flags.
func flags(pairs ...string) []string {
	out := make([]string, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, "--"+strings.TrimPrefix(pairs[i], "--")+"="+pairs[i+1])
	}
	return out
}
