package pki

import (
	"crypto/x509"
	"fmt"
	"net/url"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigCluster is the cluster and context name in every kubeconfig
// Kubeconfig renders, as karmadactl names them.
const KubeconfigCluster = "karmada-apiserver"

// Kubeconfig renders a kubeconfig that authenticates with the named client
// certificate (for example AdminClient) against server (https://host:port),
// trusting ca.crt. The user is named after client; cluster and context are
// KubeconfigCluster. It fails when the certificate is not a client
// certificate signed by ca.
func (b Bundle) Kubeconfig(client, server string) ([]byte, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("rendering a kubeconfig for %s: server %q must be https://host:port", client, server)
	}
	kp, problem := loadPair(b, client)
	if problem != "" {
		return nil, fmt.Errorf("rendering a kubeconfig for %s: %s is %s", client, CertFile(client), problem)
	}
	caPEM := b[CertFile(CA)]
	ca, err := parseCert(caPEM)
	if err != nil {
		return nil, fmt.Errorf("rendering a kubeconfig for %s: %s: %w", client, CertFile(CA), err)
	}
	if err := verifyChain(kp.cert, ca, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, fmt.Errorf("rendering a kubeconfig for %s: not a client certificate of %s: %w", client, CA, err)
	}

	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[KubeconfigCluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[client] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.certPEM, ClientKeyData: kp.keyPEM}
	cfg.Contexts[KubeconfigCluster] = &clientcmdapi.Context{Cluster: KubeconfigCluster, AuthInfo: client}
	cfg.CurrentContext = KubeconfigCluster
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("rendering a kubeconfig for %s: %w", client, err)
	}
	return out, nil
}
