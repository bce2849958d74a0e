package probe

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReadyzReportsEachInstance(t *testing.T) {
	ok := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer ok.Close()
	failing := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "[-]etcd failed: reason withheld", http.StatusInternalServerError)
	}))
	defer failing.Close()
	// Both test servers use the same certificate, so one trust pool serves.
	tlsConfig := ok.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	tlsConfig.MinVersion = tls.VersionTLS12

	got := Readyz{}.Readyz(context.Background(), map[string]string{
		"a": ok.URL + "/readyz", "b": failing.URL + "/readyz", "c": "https://127.0.0.1:1/readyz",
	}, tlsConfig)
	if len(got) != 3 || got[0].Host != "a" || got[1].Host != "b" || got[2].Host != "c" {
		t.Fatalf("want one result per host in order, got %+v", got)
	}
	if !got[0].Ready {
		t.Errorf("a answers ok: %+v", got[0])
	}
	if got[1].Ready || !strings.Contains(got[1].Message, "HTTP 500: [-]etcd failed") {
		t.Errorf("b must say why it is not ready: %+v", got[1])
	}
	if got[2].Ready || !strings.Contains(got[2].Message, "connection refused") {
		t.Errorf("c must say it refused the connection: %+v", got[2])
	}
	// a and b run, ready or not; nothing answers at c.
	if !got[0].Answered || !got[1].Answered || got[2].Answered {
		t.Errorf("answered: a %v, b %v, c %v; want true, true, false", got[0].Answered, got[1].Answered, got[2].Answered)
	}
}
