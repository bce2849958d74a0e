package badinput

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// material is the key and certificate material the corpus refers to as
// "@NAME@" placeholders. It is made fresh for every test run so that no
// private key lives in the repository.
type material map[string]string

// testHosts are the addresses of every host in the corpus: TEST-NET-3
// (RFC 5737), which no run can reach. TEST-NET-1 (192.0.2.0/24) is not used:
// some machines, the CI one among them, sit on it.
var testHosts = []string{"203.0.113.11", "203.0.113.12", "203.0.113.13"}

// newMaterial generates the material with ssh-keygen and crypto/x509.
func newMaterial(t *testing.T) material {
	t.Helper()
	dir := t.TempDir()
	m := material{}

	m["SSH_PRIVATE_KEY"] = sshKey(t, dir, "id", "")
	m["SSH_PRIVATE_KEY_PASSPHRASE"] = sshKey(t, dir, "id-pass", "correct horse battery staple")
	sshKey(t, dir, "host", "")
	hostPub, err := os.ReadFile(filepath.Join(dir, "host.pub"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(hostPub))
	known := &strings.Builder{}
	for _, h := range testHosts {
		fmt.Fprintf(known, "%s %s %s\n", h, fields[0], fields[1])
	}
	m["KNOWN_HOSTS"] = known.String()

	m["MEMBER_KUBECONFIG"] = fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: edge
  cluster:
    server: https://203.0.113.50:6443
users:
- name: admin
  user:
    token: kao-badinput-member-token-%s
contexts:
- name: edge
  context: {cluster: edge, user: admin}
current-context: edge
`, randomHex(t, 16))

	// Member kubeconfigs that would make a client act: run a program, read
	// a file of the operator's, go through a proxy, talk plain http. The
	// exec one would write EXEC_MARKER, which the corpus checks is never
	// written.
	m["EXEC_MARKER"] = filepath.Join(dir, "exec-plugin-ran")
	hostile := map[string]string{
		"EXEC":          "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, 'id > " + m["EXEC_MARKER"] + "'], interactiveMode: Never}",
		"AUTH_PROVIDER": "auth-provider: {name: oidc, config: {idp-issuer-url: 'https://203.0.113.60', client-id: kao}}",
		"TOKEN_FILE":    "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
		"CERT_FILES":    "{client-certificate: /etc/kao/tls.crt, client-key: /root/.ssh/id_ed25519}",
	}
	for name, user := range hostile {
		m["MEMBER_KUBECONFIG_"+name] = memberKubeconfig("https://203.0.113.50:6443", "", user)
	}
	token := "token: kao-badinput-member-token-" + randomHex(t, 16)
	m["MEMBER_KUBECONFIG_CA_FILE"] = memberKubeconfig("https://203.0.113.50:6443", "certificate-authority: /etc/shadow", token)
	m["MEMBER_KUBECONFIG_PROXY"] = memberKubeconfig("https://203.0.113.50:6443", "proxy-url: http://203.0.113.70:3128", token)
	m["MEMBER_KUBECONFIG_HTTP"] = memberKubeconfig("http://203.0.113.50:8080", "", token)

	caKey, caCert := newCA(t)
	m["ETCD_CA"] = caCert.pem
	clientKey, clientCert := newLeaf(t, caKey, caCert.cert, "kao-badinput-etcd-client")
	m["ETCD_CLIENT_CRT"] = clientCert
	m["ETCD_CLIENT_KEY"] = clientKey
	otherKey, _ := newLeaf(t, caKey, caCert.cert, "kao-badinput-other")
	m["OTHER_PRIVATE_KEY"] = otherKey
	return m
}

// memberKubeconfig is a kubeconfig with one context: its cluster at server
// (with clusterExtra, a line of the cluster entry) and its user (one line).
func memberKubeconfig(server, clusterExtra, user string) string {
	if clusterExtra != "" {
		clusterExtra = "\n    " + clusterExtra
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: edge
  cluster:
    server: %s%s
users:
- name: admin
  user:
    %s
contexts:
- name: edge
  context: {cluster: edge, user: admin}
current-context: edge
`, server, clusterExtra, user)
}

// placeholder is the form of a reference to material in a case file.
var placeholder = regexp.MustCompile(`"@[A-Z_]+@"`)

// expandBytes replaces every quoted placeholder "@NAME@" of a case file with
// the material as a JSON string, which YAML reads as a double-quoted scalar.
func (m material) expandBytes(data []byte) ([]byte, error) {
	out := string(data)
	for name, value := range m {
		q, err := json.Marshal(value)
		if err != nil {
			return nil, err
		}
		out = strings.ReplaceAll(out, `"@`+name+`@"`, string(q))
	}
	if left := placeholder.FindString(out); left != "" {
		return nil, fmt.Errorf("unknown placeholder %s", left)
	}
	return []byte(out), nil
}

func sshKey(t *testing.T, dir, name, passphrase string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "kao-badinput", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

type certPair struct {
	cert *x509.Certificate
	pem  string
}

func newCA(t *testing.T) (*ecdsa.PrivateKey, certPair) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kao-badinput-etcd-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, certPair{cert: cert, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// newLeaf returns a PEM private key and a client certificate for it signed by the CA.
func newLeaf(t *testing.T, caKey *ecdsa.PrivateKey, ca *x509.Certificate, cn string) (keyPEM, certPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// bundleVersions are the versions the fake offline bundle holds.
var bundleVersions = map[string]string{"karmada": "v1.18.1", "kubernetes": "v1.35.4", "etcd": "v3.6.6"}

// previousKarmadaVersion is the older Karmada the bundle holds beside the
// default (upgrades start from it).
const previousKarmadaVersion = "v1.17.1"

// fakeBundle makes an artifacts bundle directory that passes the operator's
// checks (manifest.json and <component>/<version>/bin) without binaries: no
// run in this test gets past its first SSH connection.
func fakeBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	manifest, err := json.Marshal(bundleVersions)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	for c, v := range bundleVersions {
		if err := os.MkdirAll(filepath.Join(dir, c, v, "bin"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	// Like the real bundle, it holds the previous Karmada version too: a
	// downgrade is refused for being one, not for a missing version.
	if err := os.MkdirAll(filepath.Join(dir, "karmada", previousKarmadaVersion, "bin"), 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}
