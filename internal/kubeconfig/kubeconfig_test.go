package kubeconfig

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// base is a usable kubeconfig with two contexts; cases change it by
// replacing one line.
const base = `apiVersion: v1
kind: Config
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0EtREFUQQ==
- name: c2
  cluster:
    server: https://10.0.0.2:6443
    certificate-authority-data: Q0EtVFdP
users:
- name: u1
  user:
    token: TOKEN-ONE-5ecret
- name: u2
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZLTJzZWNyZXQ=
contexts:
- name: one
  context: {cluster: c1, user: u1}
- name: two
  context: {cluster: c2, user: u2}
current-context: one
`

func TestMinimizeRefusesWhatAClientWouldActOn(t *testing.T) {
	cases := []struct {
		name string
		// from and to replace one piece of base.
		from, to string
		// want is part of the error message.
		want string
	}{
		{"exec plugin", "token: TOKEN-ONE-5ecret", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'id > /tmp/owned']}", "credential plugin"},
		{"auth provider", "token: TOKEN-ONE-5ecret", "auth-provider: {name: oidc, config: {idp-issuer-url: https://x}}", "credential plugin"},
		{"token file", "token: TOKEN-ONE-5ecret", "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token", "from a file"},
		{"client certificate file", "token: TOKEN-ONE-5ecret", "client-certificate: /etc/kao/tls.crt\n    client-key-data: S0VZ", "from a file"},
		{"client key file", "token: TOKEN-ONE-5ecret", "client-certificate-data: Q0VSVA==\n    client-key: /root/.ssh/id_ed25519", "from a file"},
		{"CA file", "certificate-authority-data: Q0EtREFUQQ==", "certificate-authority: /etc/shadow", "CA from a file"},
		{"proxy", "certificate-authority-data: Q0EtREFUQQ==", "certificate-authority-data: Q0EtREFUQQ==\n    proxy-url: http://10.9.9.9:3128", "proxy"},
		{"plain http", "https://10.0.0.1:6443", "http://10.0.0.1:6443", "talks http"},
		{"credentials in the URL", "https://10.0.0.1:6443", "https://admin:pw@10.0.0.1:6443", "credentials in its server URL"},
		{"no host", "https://10.0.0.1:6443", "https:///path", "not a URL with a host"},
		{"insecure", "certificate-authority-data: Q0EtREFUQQ==", "insecure-skip-tls-verify: true", "skips TLS verification"},
		{"impersonation", "token: TOKEN-ONE-5ecret", "token: TOKEN-ONE-5ecret\n    as: system:admin", "impersonates"},
		{"basic auth", "token: TOKEN-ONE-5ecret", "username: admin\n    password: pw", "user name and password"},
		{"no credential", "token: TOKEN-ONE-5ecret", "{}", "no credential"},
		{"certificate without key", "token: TOKEN-ONE-5ecret", "client-certificate-data: Q0VSVA==", "without its key"},
		{"no current context", "current-context: one", "current-context: \"\"", "no current-context"},
		{"unknown context", "current-context: one", "current-context: three", "no context \"three\""},
		{"unknown cluster", "context: {cluster: c1, user: u1}", "context: {cluster: c9, user: u1}", "does not define with a server"},
		{"unknown user", "context: {cluster: c1, user: u1}", "context: {cluster: c1, user: u9}", "does not define"},
		{"not YAML", "apiVersion: v1", "apiVersion: [", "does not parse"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := strings.Replace(base, c.from, c.to, 1)
			if data == base {
				t.Fatalf("the case does not change the kubeconfig (%q not found)", c.from)
			}
			_, err := Minimize([]byte(data), "")
			if err == nil {
				t.Fatalf("accepted:\n%s", data)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			for _, secret := range []string{"TOKEN-ONE-5ecret", "S0VZLTJzZWNyZXQ=", "/etc/shadow", "id > /tmp"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q quotes the file (%s)", err, secret)
				}
			}
		})
	}
}

func TestMinimizeKeepsOnlyTheChosenContext(t *testing.T) {
	// Unused entries may say anything: only the chosen context is checked
	// and kept.
	data := strings.Replace(base, "token: TOKEN-ONE-5ecret", "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/false}", 1)
	m, err := Minimize([]byte(data), "two")
	if err != nil {
		t.Fatal(err)
	}
	if m.Context != "two" || m.Server != "https://10.0.0.2:6443" {
		t.Errorf("context %q server %q, want two at https://10.0.0.2:6443", m.Context, m.Server)
	}
	if bytes.Contains(m.Data, []byte("exec")) || bytes.Contains(m.Data, []byte("10.0.0.1")) || bytes.Contains(m.Data, []byte("u1")) {
		t.Errorf("the minimal kubeconfig keeps other entries:\n%s", m.Data)
	}
	cfg, err := clientcmd.Load(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Contexts) != 1 || len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || cfg.CurrentContext != "two" {
		t.Errorf("not one context, cluster and user with the context current: %+v", cfg)
	}
	u := cfg.AuthInfos[UserName]
	if string(u.ClientCertificateData) != "CERT" || string(u.ClientKeyData) != "KEY-2secret" || string(cfg.Clusters[ClusterName].CertificateAuthorityData) != "CA-TWO" {
		t.Errorf("the credentials or the CA were not carried over: %+v", u)
	}
	// Redaction covers the key raw and base64, and the files.
	want := [][]byte{[]byte("KEY-2secret"), []byte("S0VZLTJzZWNyZXQ="), m.Data, []byte(data)}
	for _, w := range want {
		found := false
		for _, s := range m.Secrets {
			found = found || bytes.Equal(s, w)
		}
		if !found {
			t.Errorf("Secrets lacks %q", w)
		}
	}
}
