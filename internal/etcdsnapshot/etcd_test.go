package etcdsnapshot

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kao-io/kao/internal/testenv"
)

// tlsEtcd is a one-member etcd on loopback that demands client certificates,
// as kao's managed etcd does.
type tlsEtcd struct {
	// endpoint is the client URL.
	endpoint string
	// dir holds the data directory, certificates and log.
	dir string
	// bin is the directory of etcd, etcdctl and etcdutl.
	bin string
	// clientTLS authenticates a client.
	clientTLS *tls.Config
	// caFile, certFile and keyFile are the client's files, for etcdctl.
	caFile, certFile, keyFile string
	cmd                       *exec.Cmd
}

// freeLoopbackPort returns a loopback port nobody listens on right now.
func freeLoopbackPort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// startTLSEtcd starts the etcd built by `make tools` with fresh certificates
// and waits until it answers. stop kills it; the caller must call it.
func startTLSEtcd(tb testing.TB) (e *tlsEtcd, stop func()) {
	tb.Helper()
	bin, err := testenv.AssetsDir()
	if err != nil {
		tb.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kao-etcdsnapshot-")
	if err != nil {
		tb.Fatal(err)
	}
	e = &tlsEtcd{dir: dir, bin: bin}
	writeTestPKI(tb, dir)
	e.caFile, e.certFile, e.keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	client := fmt.Sprintf("https://127.0.0.1:%d", freeLoopbackPort(tb))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freeLoopbackPort(tb))
	e.endpoint = client
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		tb.Fatal(err)
	}
	e.cmd = exec.Command(filepath.Join(bin, "etcd"), "--name=m1", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=m1="+peer,
		"--cert-file="+filepath.Join(dir, "server.crt"), "--key-file="+filepath.Join(dir, "server.key"),
		"--trusted-ca-file="+e.caFile, "--client-cert-auth", "--quota-backend-bytes=4294967296",
		"--log-level=error")
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	if err := e.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stop = func() {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
		_ = logf.Close()
		_ = os.RemoveAll(dir)
	}
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(e.caFile)
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(e.certFile, e.keyFile)
	if err != nil {
		stop()
		tb.Fatal(err)
	}
	e.clientTLS = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	cli := e.client(tb)
	defer func() { _ = cli.Close() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Status(ctx, client)
		cancel()
		if err == nil {
			return e, stop
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			stop()
			tb.Fatalf("etcd did not answer: %v\n%s", err, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// client connects to the member.
func (e *tlsEtcd) client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint}, TLS: e.clientTLS,
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	return cli
}

// writeTestPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir.
func writeTestPKI(tb testing.TB, dir string) {
	tb.Helper()
	caKey, caCert := newCert(tb, "test-etcd-ca", nil, nil, nil)
	for _, leaf := range []struct {
		name  string
		usage x509.ExtKeyUsage
		ips   []net.IP
	}{
		{"server", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")}},
		{"client", x509.ExtKeyUsageClientAuth, nil},
	} {
		key, cert := newCert(tb, "test-etcd-"+leaf.name, caKey, caCert, &leaf)
		writePEM(tb, filepath.Join(dir, leaf.name+".crt"), "CERTIFICATE", cert.Raw)
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		writePEM(tb, filepath.Join(dir, leaf.name+".key"), "EC PRIVATE KEY", der)
	}
	writePEM(tb, filepath.Join(dir, "ca.crt"), "CERTIFICATE", caCert.Raw)
}

// newCert issues a certificate: a self-signed CA when parent is nil.
func newCert(tb testing.TB, cn string, parentKey *ecdsa.PrivateKey, parent *x509.Certificate, leaf *struct {
	name  string
	usage x509.ExtKeyUsage
	ips   []net.IP
}) (*ecdsa.PrivateKey, *x509.Certificate) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true,
	}
	if parent == nil {
		tmpl.IsCA = true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{leaf.usage}
		tmpl.IPAddresses = leaf.ips
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return key, cert
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}
