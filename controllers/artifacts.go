package controllers

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

// bundleManifest is manifest.json of an artifacts bundle (`make artifacts`):
// the versions the bundle holds by default.
type bundleManifest struct {
	Karmada    string `json:"karmada"`
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
}

// artifacts is the bundle a run installs from.
type artifacts struct {
	// dir is the bundle directory on the operator's side.
	dir string
	// versions are the versions the run installs.
	karmada, kubernetes, etcd string
}

// resolveArtifacts finds the bundle of a Binary deployment and checks that it
// holds every version the spec asks for. Installs are offline: a missing
// version is a condition telling what to build, never a download.
func (r *KarmadaDeploymentReconciler) resolveArtifacts(kd *kaov1.KarmadaDeployment) (*artifacts, error) {
	spec := kd.Spec.Artifacts
	if spec.URL != "" {
		return nil, &inputError{"spec.artifacts.url is not supported yet: put the bundle in a directory the operator can read and set spec.artifacts.localPath"}
	}
	dir := spec.LocalPath
	field := "spec.artifacts.localPath"
	if dir == "" {
		dir, field = r.ArtifactsDir, "the operator's --artifacts-dir"
	}
	if dir == "" {
		return nil, &inputError{"no artifacts bundle: set spec.artifacts.localPath or start the operator with --artifacts-dir"}
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, &inputError{fmt.Sprintf("the artifacts bundle %s (%s) has no readable manifest.json: build one with `make artifacts`", dir, field)}
	}
	m := bundleManifest{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, &inputError{fmt.Sprintf("the artifacts bundle %s has a malformed manifest.json: %v", dir, err)}
	}
	a := &artifacts{dir: dir, karmada: kd.Spec.Version, kubernetes: kd.Spec.KubernetesVersion, etcd: m.Etcd}
	if a.kubernetes == "" {
		a.kubernetes = m.Kubernetes
	}
	if e := kd.Spec.Etcd.Managed; e != nil && e.Version != "" {
		a.etcd = e.Version
	}
	wants := []struct{ component, version, what string }{
		{"karmada", a.karmada, "Karmada"},
		{"kubernetes", a.kubernetes, "Kubernetes"},
	}
	if kd.Spec.Etcd.Managed != nil {
		wants = append(wants, struct{ component, version, what string }{"etcd", a.etcd, "etcd"})
	}
	for _, w := range wants {
		if w.version == "" {
			return nil, &inputError{fmt.Sprintf("the artifacts bundle %s names no default %s version in manifest.json", dir, w.what)}
		}
		if st, err := os.Stat(filepath.Join(dir, w.component, w.version, "bin")); err != nil || !st.IsDir() {
			return nil, &inputError{fmt.Sprintf("the artifacts bundle %s (%s) has no %s %s: build a bundle with it (`make artifacts`)",
				dir, field, w.what, w.version)}
		}
	}
	return a, nil
}

// extraVars are the run variables describing the bundle.
func (a *artifacts) extraVars() map[string]any {
	return map[string]any{
		"kao_artifacts_dir":              unsafeString(a.dir),
		"kao_karmada_version_default":    unsafeString(a.karmada),
		"kao_kubernetes_version_default": unsafeString(a.kubernetes),
		"kao_etcd_version_default":       unsafeString(a.etcd),
	}
}

// unsafeString marks an extra var Ansible must never template: values that
// come from a CR are data, not Jinja, even where validation already rules
// braces out.
func unsafeString(s string) map[string]string {
	return map[string]string{"__ansible_unsafe": s}
}
