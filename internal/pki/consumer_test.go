package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The real consumers: Go's crypto/tls, as kube-apiserver, etcd and every
// Karmada component use it, and openssl.

func TestTLSHandshakesWithIssuedCertificates(t *testing.T) {
	b := fresh(t)
	tests := []struct {
		name       string // who talks to whom
		server     string // serving certificate
		serverCA   string // CA the client trusts for the server
		client     string // client certificate
		clientCA   string // CA the server trusts for clients (--client-ca-file and the like)
		serverName string // name the client dials
		wantErr    bool   // the handshake must fail
	}{
		{
			name:   "admin to karmada-apiserver through the VIP",
			server: APIServerServer, serverCA: CA, client: AdminClient, clientCA: CA, serverName: "vip.dc.example",
		},
		{
			name:   "admin to karmada-apiserver on the kubernetes Service IP",
			server: APIServerServer, serverCA: CA, client: AdminClient, clientCA: CA, serverName: "10.96.0.1",
		},
		{
			name:   "scheduler to karmada-apiserver under a wildcard SAN",
			server: APIServerServer, serverCA: CA, client: SchedulerClient, clientCA: CA, serverName: "api.karmada.example.com",
		},
		{
			name:   "karmada-apiserver to karmada-aggregated-apiserver as the front proxy",
			server: AggregatedAPIServerServer, serverCA: CA, client: FrontProxyClient, clientCA: FrontProxyCA,
			serverName: "karmada-aggregated-apiserver.karmada-system.svc",
		},
		{
			name:   "karmada-apiserver to karmada-webhook on a control-plane host",
			server: WebhookServer, serverCA: CA, client: AdminClient, clientCA: CA, serverName: "10.0.0.31",
		},
		{
			name:   "karmada-apiserver to etcd",
			server: "etcd-server-e1", serverCA: EtcdCA, client: APIServerEtcdClient, clientCA: EtcdCA, serverName: "10.0.0.11",
		},
		{
			name:   "etcd peer to etcd peer",
			server: "etcd-peer-e3", serverCA: EtcdCA, client: "etcd-peer-e2", clientCA: EtcdCA, serverName: "etcd3.dc.example",
		},
		{
			name:   "a name outside the SANs is refused",
			server: APIServerServer, serverCA: CA, client: AdminClient, clientCA: CA, serverName: "evil.example", wantErr: true,
		},
		{
			name:   "a Karmada client at etcd is refused",
			server: "etcd-server-e1", serverCA: EtcdCA, client: AdminClient, clientCA: EtcdCA, serverName: "10.0.0.11", wantErr: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peerCN, err := handshake(t, b, tc.server, tc.serverCA, tc.client, tc.clientCA, tc.serverName)
			if tc.wantErr {
				if err == nil {
					t.Error("handshake succeeded, want a failure")
				}
				t.Logf("refused as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if want := mustCert(t, b, tc.client).Subject.CommonName; peerCN != want {
				t.Errorf("server saw client %q, want %q", peerCN, want)
			}
		})
	}
}

// handshake serves TLS on a loopback port with server's certificate, requiring
// a client certificate from clientCA, and dials it as client trusting serverCA
// for serverName. It returns the client CN the server verified.
func handshake(t *testing.T, b Bundle, server, serverCA, client, clientCA, serverName string) (string, error) {
	t.Helper()
	pair := func(name string) tls.Certificate {
		c, err := tls.X509KeyPair(b[CertFile(name)], b[KeyFile(name)])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return c
	}
	pool := func(name string) *x509.CertPool {
		p := x509.NewCertPool()
		if !p.AppendCertsFromPEM(b[CertFile(name)]) {
			t.Fatalf("%s does not parse", CertFile(name))
		}
		return p
	}
	// The certificates are dated testNow; both sides use that clock.
	clock := func() time.Time { return testNow.Add(time.Hour) }

	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair(server)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool(clientCA),
		MinVersion:   tls.VersionTLS13,
		Time:         clock,
	})
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	defer func() { _ = ln.Close() }()

	type result struct {
		cn  string
		err error
	}
	served := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- result{err: err}
			return
		}
		defer func() { _ = conn.Close() }()
		tc, ok := conn.(*tls.Conn)
		if !ok {
			served <- result{err: errors.New("not a TLS connection")}
			return
		}
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			served <- result{err: err}
			return
		}
		served <- result{cn: tc.ConnectionState().PeerCertificates[0].Subject.CommonName}
	}()

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{pair(client)},
		RootCAs:      pool(serverCA),
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS13,
		Time:         clock,
	})
	if err == nil {
		// With TLS 1.3 the server checks the client certificate after the
		// client's handshake returns; a read surfaces its verdict.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := conn.Read(make([]byte, 1))
		if rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) && !strings.Contains(rerr.Error(), "EOF") {
			err = rerr
		}
		_ = conn.Close()
	}
	res := <-served
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	if res.err != nil {
		return "", fmt.Errorf("server: %w", res.err)
	}
	return res.cn, nil
}

func TestOpenSSLVerifiesIssuedCertificates(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl is not installed: apt-get install openssl (.ci/run does)")
	}
	b := fresh(t)
	dir := t.TempDir()
	for f, data := range b {
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// openssl checks validity against its own clock unless told the time.
	at := strconv.FormatInt(testNow.Add(time.Hour).Unix(), 10)

	tests := []struct {
		name    string   // what openssl checks
		args    []string // openssl arguments, file names relative to the bundle
		wantErr bool     // openssl must refuse
	}{
		{
			name: "karmada-apiserver-server serves TLS for the VIP under ca",
			args: []string{"verify", "-attime", at, "-CAfile", "ca.crt", "-purpose", "sslserver", "-verify_hostname", "vip.dc.example", "karmada-apiserver-server.crt"},
		},
		{
			name: "karmada-apiserver-server serves the kubernetes Service IP",
			args: []string{"verify", "-attime", at, "-CAfile", "ca.crt", "-purpose", "sslserver", "-verify_ip", "10.96.0.1", "karmada-apiserver-server.crt"},
		},
		{
			name: "admin-client is a TLS client under ca",
			args: []string{"verify", "-attime", at, "-CAfile", "ca.crt", "-purpose", "sslclient", "admin-client.crt"},
		},
		{
			name: "etcd-server-e2 serves TLS under etcd-ca",
			args: []string{"verify", "-attime", at, "-CAfile", "etcd-ca.crt", "-purpose", "sslserver", "-verify_ip", "10.0.0.12", "etcd-server-e2.crt"},
		},
		{
			name: "etcd-peer-e1 is also a TLS client under etcd-ca",
			args: []string{"verify", "-attime", at, "-CAfile", "etcd-ca.crt", "-purpose", "sslclient", "etcd-peer-e1.crt"},
		},
		{
			name: "front-proxy-client is a TLS client under front-proxy-ca",
			args: []string{"verify", "-attime", at, "-CAfile", "front-proxy-ca.crt", "-purpose", "sslclient", "front-proxy-client.crt"},
		},
		{
			name:    "admin-client does not chain to etcd-ca",
			args:    []string{"verify", "-attime", at, "-CAfile", "etcd-ca.crt", "admin-client.crt"},
			wantErr: true,
		},
		{
			name:    "admin-client cannot serve TLS",
			args:    []string{"verify", "-attime", at, "-CAfile", "ca.crt", "-purpose", "sslserver", "admin-client.crt"},
			wantErr: true,
		},
		{
			name: "sa.key and sa.pub are one key pair",
			args: []string{"pkey", "-in", "sa.key", "-pubout", "-out", "sa.derived.pub"},
		},
		{
			name: "the etcd healthcheck key parses as an EC key",
			args: []string{"ec", "-in", "etcd-healthcheck-client.key", "-check", "-noout"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(openssl, tc.args...)
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if tc.wantErr != (err != nil) {
				t.Errorf("openssl %s: err = %v, wantErr %v\n%s", strings.Join(tc.args, " "), err, tc.wantErr, out)
			}
		})
	}

	derived, err := os.ReadFile(filepath.Join(dir, "sa.derived.pub"))
	if err != nil {
		t.Fatal(err)
	}
	if string(derived) != string(b[ServiceAccountPubFile]) {
		t.Errorf("openssl derives\n%s\nfrom sa.key, bundle has\n%s", derived, b[ServiceAccountPubFile])
	}
}
