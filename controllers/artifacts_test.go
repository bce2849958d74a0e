package controllers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// writeBundle lays out a bundle with the given component/version bin directories.
func writeBundle(t *testing.T, manifest string, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	if manifest != "" {
		if err := os.WriteFile(filepath.Join(root, "manifest.json"), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d, "bin"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

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
			bundle:         func(t *testing.T) string { return writeBundle(t, manifest, full...) },
			wantKubernetes: "v1.35.4",
		},
		{
			name:   "spec.artifacts.localPath points at a bundle without the asked Karmada version",
			bundle: func(t *testing.T) string { return writeBundle(t, manifest, full...) },
			mutate: func(kd *kaov1.KarmadaDeployment, b string) {
				kd.Spec.Artifacts.LocalPath = b
				kd.Spec.Version = "v1.19.0"
			},
			wantErr: "has no Karmada v1.19.0: build a bundle with it",
		},
		{
			name:    "a bundle without manifest.json",
			bundle:  func(t *testing.T) string { return writeBundle(t, "", full...) },
			wantErr: "has no readable manifest.json: build one with `make artifacts`",
		},
		{
			name:    "a bundle without the managed etcd version",
			bundle:  func(t *testing.T) string { return writeBundle(t, manifest, full[:2]...) },
			wantErr: "has no etcd v3.6.6",
		},
		{
			name:    "an HTTP bundle",
			bundle:  func(t *testing.T) string { return writeBundle(t, manifest, full...) },
			mutate:  func(kd *kaov1.KarmadaDeployment, _ string) { kd.Spec.Artifacts.URL = "http://10.0.0.2/kao" },
			wantErr: "spec.artifacts.url is not supported yet",
		},
		{
			name:    "no bundle anywhere",
			bundle:  func(*testing.T) string { return "" },
			wantErr: "no artifacts bundle: set spec.artifacts.localPath or start the operator with --artifacts-dir",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bundle := tt.bundle(t)
			r := &KarmadaDeploymentReconciler{Options: Options{ArtifactsDir: bundle}}
			kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
				Mode: kaov1.BinaryMode, Version: "v1.18.1", Etcd: kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			}}
			if tt.mutate != nil {
				tt.mutate(kd, bundle)
			}
			a, err := r.resolveArtifacts(kd)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.kubernetes != tt.wantKubernetes || a.dir != bundle {
				t.Errorf("resolved %+v", a)
			}
		})
	}
}
