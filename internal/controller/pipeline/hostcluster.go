package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/kubeconfig"
	"github.com/kao-io/kao/internal/pki"
)

// Names of a Containerized control plane's objects in its host cluster
// namespace. The karmada_workloads role creates the workloads under the same
// names (its defaults), and kao's certificates name the Services.
const (
	HostAPIServer = "karmada-apiserver"

	HostAggregatedAPIServer = "karmada-aggregated-apiserver"

	HostWebhook = "karmada-webhook"

	// The addons' Deployments and Services; each member's estimator is
	// karmada-scheduler-estimator-<member> (EstimatorComponentPfx).
	HostSearch = "karmada-search"

	HostMetricsAdapter = "karmada-metrics-adapter"

	// HostEtcd is the etcd StatefulSet and its headless Service, which gives
	// every member (inventory.EtcdPodNames) the DNS name
	// <HostEtcd>-<i>.<HostEtcd>.<namespace>.svc.
	HostEtcd = inventory.EtcdStatefulSet

	// hostEtcdClient is the Service etcd clients use.
	hostEtcdClient = "karmada-etcd-client"

	defaultHostNamespace = "karmada-system"

	defaultDNSDomain = "cluster.local"
)

// HostCluster is the host cluster of a Containerized deployment as one
// reconcile uses it.
type HostCluster struct {
	// Client talks to the host cluster.
	Client kubernetes.Interface
	// REST is Client's configuration, for what a typed client does not do
	// (port-forwards).
	REST *rest.Config
	// Kubeconfig reaches the host cluster from a run (kubernetes.core); it
	// holds credentials.
	Kubeconfig []byte
	// Secrets are the credential values in kubeconfig, for redaction.
	Secrets [][]byte
	// Namespace is spec.hostCluster.namespace with its default.
	Namespace string
	// DNSDomain is spec.hostCluster.dnsDomain with its default.
	DNSDomain string
	// InCluster says the host cluster is the operator's own cluster, whose
	// Service names the operator resolves.
	InCluster bool
}

// HostNamespace is the host cluster namespace of a Containerized deployment.
func HostNamespace(kd *kaov1.KarmadaDeployment) string {
	if hc := kd.Spec.HostCluster; hc != nil && hc.Namespace != "" {
		return hc.Namespace
	}
	return defaultHostNamespace
}

// HostDNSDomain is the host cluster's DNS domain.
func HostDNSDomain(kd *kaov1.KarmadaDeployment) string {
	if hc := kd.Spec.HostCluster; hc != nil && hc.DNSDomain != "" {
		return hc.DNSDomain
	}
	return defaultDNSDomain
}

// ServiceNames are the two DNS names of a host cluster Service: short
// (<name>.<namespace>.svc, what kube-apiserver verifies for a service
// reference) and fully qualified (with the DNS domain, what pods resolve).
func ServiceNames(kd *kaov1.KarmadaDeployment, name string) []string {
	short := name + "." + HostNamespace(kd) + ".svc"
	return []string{short, short + "." + HostDNSDomain(kd)}
}

// EtcdMemberURL is the client URL of a Containerized etcd member.
func EtcdMemberURL(kd *kaov1.KarmadaDeployment, pod string) string {
	return "https://" + net.JoinHostPort(pod+"."+ServiceNames(kd, HostEtcd)[1], strconv.Itoa(EtcdClientPort))
}

// HostCluster connects to the host cluster of a Containerized deployment:
// with the kubeconfig Secret spec.hostCluster names, or, with inCluster,
// as the operator itself. Problems the user can fix are reason.Missing errors.
func (g *Gatherer) HostCluster(ctx context.Context, kd *kaov1.KarmadaDeployment) (*HostCluster, error) {
	spec := kd.Spec.HostCluster
	if spec == nil {
		return nil, reason.Missing("spec.hostCluster is required in Containerized mode")
	}
	hc := &HostCluster{Namespace: HostNamespace(kd), DNSDomain: HostDNSDomain(kd), InCluster: spec.InCluster}
	var cfg *clientcmdapi.Config
	if spec.InCluster {
		if err := g.checkInCluster(kd); err != nil {
			return nil, err
		}
		if g.InClusterConfig == nil {
			return nil, reason.Missing("spec.hostCluster.inCluster is set, but the operator has no configuration for its own cluster")
		}
		cfg = kubeconfigFromREST(g.InClusterConfig)
		var err error
		if hc.Kubeconfig, err = clientcmd.Write(*cfg); err != nil {
			return nil, fmt.Errorf("encoding the host cluster's kubeconfig: %w", err)
		}
		hc.Secrets = kubeconfigSecrets(cfg, hc.Kubeconfig)
	} else {
		ref := spec.KubeconfigSecretRef
		data, err := g.secretValue(ctx, kd.Namespace, *ref, "spec.hostCluster.kubeconfigSecretRef")
		if err != nil {
			return nil, err
		}
		min, err := kubeconfig.Minimize(data, "")
		if err != nil {
			return nil, reason.Missing("Secret %s/%s key %q named in spec.hostCluster.kubeconfigSecretRef: %v",
				kd.Namespace, ref.Name, ref.Key, err)
		}
		cfg, hc.Kubeconfig, hc.Secrets = min.Config, min.Data, min.Secrets
	}
	restConfig, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, reason.Missing("%s", "the host cluster's kubeconfig is unusable: "+sanitizeKubeconfigError(err))
	}
	restConfig.UserAgent = "kao-operator"
	hc.REST = restConfig
	if hc.Client, err = kubernetes.NewForConfig(restConfig); err != nil {
		return nil, reason.Missing("%s", "the host cluster's kubeconfig is unusable: "+sanitizeKubeconfigError(err))
	}
	return hc, nil
}

// kubeconfigFromREST writes the operator's own client configuration as a
// kubeconfig for runs. A service-account token stays a file reference: the
// kubelet renews the file, and Ansible runs in the operator's pod.
func kubeconfigFromREST(rc *rest.Config) *clientcmdapi.Config {
	cluster := &clientcmdapi.Cluster{
		Server:                   rc.Host,
		CertificateAuthority:     rc.CAFile,
		CertificateAuthorityData: rc.CAData,
		TLSServerName:            rc.ServerName,
	}
	user := &clientcmdapi.AuthInfo{
		ClientCertificate:     rc.CertFile,
		ClientCertificateData: rc.CertData,
		ClientKey:             rc.KeyFile,
		ClientKeyData:         rc.KeyData,
		TokenFile:             rc.BearerTokenFile,
	}
	if rc.BearerTokenFile == "" {
		user.Token = rc.BearerToken
	}
	return &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"host": cluster},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"kao": user},
		Contexts:       map[string]*clientcmdapi.Context{"host": {Cluster: "host", AuthInfo: "kao"}},
		CurrentContext: "host",
	}
}

// KubeconfigSecrets lists the credential values of a kubeconfig and the file
// itself, in every form a log could show them.
func kubeconfigSecrets(cfg *clientcmdapi.Config, file []byte) [][]byte {
	out := [][]byte{file}
	for _, u := range cfg.AuthInfos {
		for _, v := range [][]byte{u.ClientKeyData, []byte(u.Token), []byte(u.Password)} {
			if len(v) == 0 {
				continue
			}
			out = append(out, v, []byte(base64.StdEncoding.EncodeToString(v)))
		}
	}
	return out
}

// sanitizeKubeconfigError keeps client-go's first line, which names what is
// wrong without the file's content.
func sanitizeKubeconfigError(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return TruncateString(msg, 300)
}

// EtcdClientPort is the port managed etcd members serve clients on.
const EtcdClientPort = 2379

// HostsWithRole lists the hosts that have a role, in spec order.
func HostsWithRole(kd *kaov1.KarmadaDeployment, role kaov1.HostRole) []kaov1.Host {
	out := []kaov1.Host{}
	for _, h := range kd.Spec.Hosts {
		for _, r := range h.Roles {
			if r == role {
				out = append(out, h)
			}
		}
	}
	return out
}

// ClientTLS builds the TLS settings of a probe client from the PKI bundle:
// the CA that signed the servers and a client certificate pair.
func ClientTLS(bundle pki.Bundle, caFile, client string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle[caFile]) {
		return nil, fmt.Errorf("the PKI Secret has no %s", caFile)
	}
	cert, err := tls.X509KeyPair(bundle[client+".crt"], bundle[client+".key"])
	if err != nil {
		return nil, fmt.Errorf("the PKI Secret's %s pair is unusable: %w", client, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
