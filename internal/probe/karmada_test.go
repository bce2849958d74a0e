package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// trusting returns a client TLS configuration that trusts the test server's certificate.
func trusting(srv *httptest.Server) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

func TestHandshakeVerifiesTheCertificateForTheHost(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	// httptest's certificate names 127.0.0.1, ::1 and example.com, not localhost.
	got := Karmada{}.Handshake(context.Background(), map[string]string{
		"good":    addr,
		"refused": "127.0.0.1:1",
		"wrong":   strings.Replace(addr, "127.0.0.1", "localhost", 1),
	}, trusting(srv))
	if len(got) != 3 || got[0].Host != "good" || got[1].Host != "refused" || got[2].Host != "wrong" {
		t.Fatalf("want one result per host in order, got %+v", got)
	}
	if !got[0].Ready {
		t.Errorf("the server's certificate names 127.0.0.1: %+v", got[0])
	}
	if got[1].Ready || !strings.Contains(got[1].Message, "connection refused") {
		t.Errorf("a closed port must say so: %+v", got[1])
	}
	if got[2].Ready || !strings.Contains(got[2].Message, "certificate") {
		t.Errorf("a certificate that does not name the host must fail: %+v", got[2])
	}
}

func TestLeasesTellAliveFromStaleLeaders(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	leases := map[string]string{
		"/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases/fresh": `{"spec":{"holderIdentity":"h2_1234","leaseDurationSeconds":15,"renewTime":"2026-11-22T05:59:58.000000Z"}}`,
		"/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases/stale": `{"spec":{"holderIdentity":"h3_99","leaseDurationSeconds":15,"renewTime":"2026-11-22T05:58:00.000000Z"}}`,
		"/apis/coordination.k8s.io/v1/namespaces/karmada-system/leases/free":  `{"spec":{"leaseDurationSeconds":15}}`,
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := leases[r.URL.Path]
		if !ok {
			http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	refs := []LeaseRef{
		{Namespace: "karmada-system", Name: "fresh"},
		{Namespace: "karmada-system", Name: "stale"},
		{Namespace: "karmada-system", Name: "free"},
		{Namespace: "karmada-system", Name: "missing"},
	}
	got := Karmada{}.Leases(context.Background(), API{URL: srv.URL, TLS: trusting(srv)}, refs, now)
	if len(got) != 4 {
		t.Fatalf("want 4 results, got %+v", got)
	}
	if !got[0].Held || got[0].Holder != "h2_1234" {
		t.Errorf("fresh: %+v", got[0])
	}
	if got[1].Held || !strings.Contains(got[1].Message, "last renewed the lease 2m0s ago") {
		t.Errorf("stale: %+v", got[1])
	}
	if got[2].Held || got[2].Message != "no leader holds the lease" {
		t.Errorf("free: %+v", got[2])
	}
	if got[3].Held || !strings.Contains(got[3].Message, "HTTP 404") {
		t.Errorf("missing: %+v", got[3])
	}
	// Only a lease that was read tells that no instance renews it.
	for i, want := range []bool{true, true, true, false} {
		if got[i].Read != want {
			t.Errorf("lease %d: Read %v, want %v", i, got[i].Read, want)
		}
	}
}

func TestAPIServiceReadsAvailable(t *testing.T) {
	services := map[string]string{
		"up":      `{"status":{"conditions":[{"type":"Available","status":"True","reason":"Passed"}]}}`,
		"down":    `{"status":{"conditions":[{"type":"Available","status":"False","reason":"FailedDiscoveryCheck","message":"no response from https://10.0.0.1:7443"}]}}`,
		"unknown": `{"status":{}}`,
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(services[strings.TrimPrefix(r.URL.Path, "/apis/apiregistration.k8s.io/v1/apiservices/")]))
	}))
	defer srv.Close()
	api := API{URL: srv.URL, TLS: trusting(srv)}
	if ok, msg := (Karmada{}).APIService(context.Background(), api, "up"); !ok {
		t.Errorf("up: %s", msg)
	}
	if ok, msg := (Karmada{}).APIService(context.Background(), api, "down"); ok || !strings.Contains(msg, "FailedDiscoveryCheck: no response") {
		t.Errorf("down: %v %q", ok, msg)
	}
	if ok, msg := (Karmada{}).APIService(context.Background(), api, "unknown"); ok || !strings.Contains(msg, "no Available condition") {
		t.Errorf("unknown: %v %q", ok, msg)
	}
}
