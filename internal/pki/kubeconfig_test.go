package pki

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestKubeconfigParsesAndItsClientCertificateVerifies(t *testing.T) {
	b := fresh(t)
	tests := []struct {
		client string // client certificate name
		cn     string // identity the apiserver will see
	}{
		{client: AdminClient, cn: "system:admin"},
		{client: KubeControllerManagerClient, cn: "system:kube-controller-manager"},
		{client: ControllerManagerClient, cn: "system:karmada:karmada-controller-manager"},
		{client: SchedulerClient, cn: "system:karmada:karmada-scheduler"},
		{client: AggregatedAPIServerClient, cn: "system:karmada:karmada-aggregated-apiserver"},
		{client: WebhookClient, cn: "system:karmada:karmada-webhook"},
	}
	const server = "https://vip.dc.example:5443"
	for _, tc := range tests {
		t.Run(tc.client, func(t *testing.T) {
			data, err := b.Kubeconfig(tc.client, server)
			if err != nil {
				t.Fatalf("Kubeconfig: %v", err)
			}
			cfg, err := clientcmd.Load(data)
			if err != nil {
				t.Fatalf("clientcmd.Load: %v", err)
			}
			if err := clientcmd.Validate(*cfg); err != nil {
				t.Fatalf("clientcmd.Validate: %v", err)
			}
			// The path client-go itself takes to a REST config.
			rest, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
			if err != nil {
				t.Fatalf("ClientConfig: %v", err)
			}
			if rest.Host != server || string(rest.CAData) != string(b[CertFile(CA)]) {
				t.Errorf("host %q and CA data %d bytes, want %q and ca.crt", rest.Host, len(rest.CAData), server)
			}

			pair, err := tls.X509KeyPair(rest.CertData, rest.KeyData)
			if err != nil {
				t.Fatalf("client certificate and key do not pair: %v", err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(rest.CAData) {
				t.Fatal("ca.crt from the kubeconfig does not parse")
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client certificate does not verify against ca.crt: %v", err)
			}
			if leaf.Subject.CommonName != tc.cn {
				t.Errorf("CN %q, want %q", leaf.Subject.CommonName, tc.cn)
			}
		})
	}
}

func TestKubeconfigRefusesWhatCannotWork(t *testing.T) {
	b := fresh(t)
	tests := []struct {
		name    string // why it cannot work
		client  string // client certificate name
		server  string // server URL
		wantErr string // part of the error
	}{
		{name: "plain http", client: AdminClient, server: "http://vip.dc.example:5443", wantErr: "https"},
		{name: "no host", client: AdminClient, server: "https://", wantErr: "https"},
		{name: "unknown client", client: "nobody-client", server: "https://vip:5443", wantErr: "missing"},
		{name: "a serving certificate", client: APIServerServer, server: "https://vip:5443", wantErr: "not a client certificate"},
		{name: "an etcd client", client: APIServerEtcdClient, server: "https://vip:5443", wantErr: "not a client certificate"},
		{name: "the front-proxy client", client: FrontProxyClient, server: "https://vip:5443", wantErr: "not a client certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Kubeconfig(tc.client, tc.server)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
