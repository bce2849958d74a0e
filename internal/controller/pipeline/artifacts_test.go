package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/testenv"
)

func TestResolveArtifacts(t *testing.T) {
	const manifest = `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}`
	full := []string{"karmada/v1.18.1", "kubernetes/v1.35.4", "etcd/v3.6.6"}
	tests := []struct {
		// name says what the bundle or spec is like.
		name string
		// bundle returns the bundle directory; "" for none.
		bundle func(t *testing.T) string
		// mutate changes the Binary deployment's spec.
		mutate func(kd *kaov1.KarmadaDeployment, bundle string)
		// wantErr is part of the error a user sees; "" for success.
		wantErr string
		// wantKubernetes is the Kubernetes version the run installs.
		wantKubernetes string
	}{
		{
			name:           "the operator's default bundle has every version",
			bundle:         func(t *testing.T) string { return testenv.WriteBundle(t, manifest, full...) },
			wantKubernetes: "v1.35.4",
		},
		{
			name:   "spec.artifacts.localPath points at a bundle without the asked Karmada version",
			bundle: func(t *testing.T) string { return testenv.WriteBundle(t, manifest, full...) },
			mutate: func(kd *kaov1.KarmadaDeployment, b string) {
				kd.Spec.Artifacts.LocalPath = b
				kd.Spec.Version = "v1.19.0"
			},
			wantErr: "has no Karmada v1.19.0: build a bundle with it",
		},
		{
			name:    "a bundle without manifest.json",
			bundle:  func(t *testing.T) string { return testenv.WriteBundle(t, "", full...) },
			wantErr: "has no readable manifest.json: build one with `make artifacts`",
		},
		{
			name:    "a bundle without the managed etcd version",
			bundle:  func(t *testing.T) string { return testenv.WriteBundle(t, manifest, full[:2]...) },
			wantErr: "has no etcd v3.6.6",
		},
		{
			name: "a manifest naming a version that is not vX.Y.Z",
			bundle: func(t *testing.T) string {
				return testenv.WriteBundle(t, `{"karmada":"v1.18.1","kubernetes":"../v1","etcd":"v3.6.6"}`, full...)
			},
			wantErr: `names Kubernetes version "../v1" in manifest.json, not vX.Y.Z`,
		},
		{
			name:    "no bundle anywhere",
			bundle:  func(*testing.T) string { return "" },
			wantErr: "no artifacts bundle: set spec.artifacts.localPath or spec.artifacts.url, or start the operator with --artifacts-dir",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bundle := tt.bundle(t)
			g := &Gatherer{Options: Options{ArtifactsDir: bundle, Policy: Policy{ArtifactPaths: []string{os.TempDir()}}}}
			kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.BinaryMode, Version: "v1.18.1", Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			}}
			if tt.mutate != nil {
				tt.mutate(kd, bundle)
			}
			a, err := g.resolveArtifacts(kd)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Kubernetes != tt.wantKubernetes || a.dir != bundle {
				t.Errorf("resolved %+v", a)
			}
		})
	}
}

// serveBundle writes a bundle with files (bundle path → content), its
// SHA256SUMS and manifest.json, and serves it under /kao/ the way
// `python3 -m http.server` would. It returns the bundle URL and a counter of
// the requests.
// servedSumsSHA256 is the sha256 of the SHA256SUMS a bundle URL serves.
func servedSumsSHA256(t *testing.T, bundleURL string) string {
	t.Helper()
	resp, err := http.Get(bundleURL + "/SHA256SUMS")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func serveBundle(t *testing.T, manifest string, files map[string]string) (string, *atomic.Int32) {
	t.Helper()
	root := t.TempDir()
	var sums strings.Builder
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(files[p]), 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(files[p]))
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), p)
	}
	for name, data := range map[string]string{"manifest.json": manifest, "SHA256SUMS": sums.String()} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	requests := &atomic.Int32{}
	handler := http.StripPrefix("/kao", http.FileServer(http.Dir(root)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/kao", requests
}

func TestResolveArtifactsFromURL(t *testing.T) {
	const manifest = `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}`
	files := map[string]string{
		"karmada/v1.18.1/bin/karmadactl":        "karmadactl",
		"karmada/v1.18.1/crds.tar.gz":           "crds",
		"karmada/v1.17.1/bin/karmadactl":        "karmadactl v1.17.1",
		"kubernetes/v1.35.4/bin/kube-apiserver": "kube-apiserver",
		"etcd/v3.6.6/bin/etcd":                  "etcd",
	}
	tests := []struct {
		// name says what the served bundle or spec is like.
		name string
		// url turns the served bundle's URL into spec.artifacts.url.
		url func(served string) string
		// version is spec.version.
		version string
		// pin is spec.artifacts.sha256sums; the served SHA256SUMS's when empty.
		pin string
		// unpin leaves spec.artifacts.sha256sums empty.
		unpin bool
		// wantErr are parts of the message a user sees; none for success.
		wantErr []string
	}{
		{
			name:    "a served bundle with every version is mirrored and installed from",
			url:     func(served string) string { return served },
			version: "v1.18.1",
		},
		{
			name:    "a served bundle without the asked Karmada version",
			url:     func(served string) string { return served },
			version: "v1.19.0",
			wantErr: []string{"the artifacts bundle http://127.0.0.1:", "/kao (spec.artifacts.url) has no Karmada v1.19.0: build a bundle with it"},
		},
		{
			name:    "a URL with no bundle behind it",
			url:     func(served string) string { return strings.TrimSuffix(served, "/kao") + "/nothing-here" },
			version: "v1.18.1",
			wantErr: []string{"mirroring the artifacts bundle http://127.0.0.1:", "(spec.artifacts.url): fetching http://127.0.0.1:", "/nothing-here/manifest.json: HTTP 404 Not Found"},
		},
		{
			name: "credentials over plain http are refused and stay out of the message",
			url: func(served string) string {
				return strings.Replace(served, "http://", "http://ops:hunter2@", 1) + "-moved"
			},
			version: "v1.18.1",
			wantErr: []string{"sends credentials over plain http"},
		},
		{
			name:    "a URL no prefix of the administrator allows",
			url:     func(served string) string { return strings.Replace(served, "127.0.0.1", "localhost", 1) },
			version: "v1.18.1",
			wantErr: []string{"starts with none of the prefixes the operator's administrator allows (--allowed-artifact-urls)"},
		},
		{
			name:    "plain http without a pinned SHA256SUMS",
			url:     func(served string) string { return served },
			unpin:   true,
			version: "v1.18.1",
			wantErr: []string{"needs spec.artifacts.sha256sums"},
		},
		{
			name:    "a served SHA256SUMS that is not the pinned one",
			url:     func(served string) string { return served },
			pin:     strings.Repeat("0", 64),
			version: "v1.18.1",
			wantErr: []string{"its SHA256SUMS does not have the sha256 spec.artifacts.sha256sums pins"},
		},
		{
			name:    "nothing listening",
			url:     func(string) string { return "http://127.0.0.1:1/kao" },
			version: "v1.18.1",
			wantErr: []string{"fetching http://127.0.0.1:1/kao/manifest.json: dial tcp 127.0.0.1:1: connect: connection refused"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			served, requests := serveBundle(t, manifest, files)
			pin := tt.pin
			if pin == "" && !tt.unpin {
				pin = servedSumsSHA256(t, served)
				requests.Store(0)
			}
			policy := Policy{ArtifactURLs: []string{strings.TrimSuffix(served, "/kao"), "http://127.0.0.1:1"}}
			g := &Gatherer{Options: Options{StateDir: t.TempDir(), Policy: policy}}
			kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.BinaryMode, Version: tt.version, Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
				Artifacts: kaov1.ArtifactsSpec{URL: tt.url(served), SHA256Sums: pin},
			}}
			if _, err := g.ObservedArtifacts(kd); err == nil || requests.Load() != 0 {
				t.Fatalf("before any mirror: observedArtifacts returned %v after %d requests; want an error and none", err, requests.Load())
			}
			a, err := g.resolveArtifacts(kd)
			if len(tt.wantErr) > 0 {
				bad, ok := reason.From(err)
				if !ok || bad.Reason != kaov1.PrerequisitesMissingReason {
					t.Fatalf("want a PrerequisitesMissing *reason.Error, got %T %v", err, err)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(bad.Message, want) {
						t.Errorf("want a message containing %q, got %q", want, bad.Message)
					}
				}
				if strings.Contains(bad.Message, "ops") || strings.Contains(bad.Message, "hunter2") {
					t.Errorf("the message shows the URL's credentials: %q", bad.Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Dir(a.dir) != filepath.Join(g.StateDir, "artifacts") || a.Kubernetes != "v1.35.4" || a.Etcd != "v3.6.6" {
				t.Errorf("resolved %+v", a)
			}
			if got := a.extraVars()["kao_artifacts_dir"]; !reflect.DeepEqual(got, UnsafeString(a.dir)) {
				t.Errorf("kao_artifacts_dir is %v", got)
			}
			for _, rel := range []string{"SHA256SUMS", "karmada/v1.18.1/bin/karmadactl", "karmada/v1.18.1/crds.tar.gz", "kubernetes/v1.35.4/bin/kube-apiserver", "etcd/v3.6.6/bin/etcd"} {
				if _, err := os.Stat(filepath.Join(a.dir, rel)); err != nil {
					t.Errorf("the mirror lacks %s: %v", rel, err)
				}
			}
			if _, err := os.Stat(filepath.Join(a.dir, "karmada/v1.17.1")); err == nil {
				t.Errorf("the mirror holds Karmada v1.17.1, which nothing asked for")
			}
			// Status probes read the mirror, never the server.
			before := requests.Load()
			seen, err := g.ObservedArtifacts(kd)
			if err != nil || *seen != *a || requests.Load() != before {
				t.Errorf("observedArtifacts returned %+v, %v after %d requests; want %+v and none", seen, err, requests.Load()-before, a)
			}
		})
	}
}
