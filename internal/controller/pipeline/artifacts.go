package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	bundle "github.com/kao-io/kao/internal/artifacts"
	"github.com/kao-io/kao/internal/controller/reason"
)

// artifactsMirrorTimeout bounds mirroring the needed part of a bundle from
// spec.artifacts.url: several hundred MiB, which a slow link inside a data
// centre moves in minutes. A stalled transfer fails sooner
// (bundle.DefaultIdleTimeout).
const artifactsMirrorTimeout = 20 * time.Minute

// artifactsCacheDir is where bundles from spec.artifacts.url are mirrored,
// under the operator's state directory, one directory per URL.
const artifactsCacheDir = "artifacts"

// bundleVersion is what a bundle's directories are named by, as the roles
// expect them (roles/binaries asserts the same pattern).
var bundleVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// Artifacts is the bundle a run installs from.
type Artifacts struct {
	// dir is the bundle directory on the operator's side.
	dir string
	// versions are the versions the run installs.
	Karmada, Kubernetes, Etcd string
}

// bundleWant is one component version a deployment needs from its bundle.
type bundleWant struct {
	component, version, what string
	// field is the spec field that asks for the version, when it is a
	// single component's override.
	field string
}

// bundleSource says where a bundle comes from, for messages.
type bundleSource struct {
	// where names the bundle: its directory, or its URL without credentials.
	where string
	// field is what pointed at it: a spec field or the operator's flag.
	field string
}

func (s bundleSource) String() string {
	return fmt.Sprintf("the artifacts bundle %s (%s)", s.where, s.field)
}

// resolveArtifacts finds the bundle of a Binary deployment and checks that it
// holds every version the spec asks for. A bundle at spec.artifacts.url is
// mirrored first, into the operator's state directory. Installs are offline:
// a missing version is a condition telling what to build, never a download
// from the internet.
func (g *Gatherer) resolveArtifacts(kd *kaov1.KarmadaDeployment) (*Artifacts, error) {
	return g.FetchArtifacts(context.Background(), kd)
}

// FetchArtifacts is resolveArtifacts with a context that ends the mirror of
// spec.artifacts.url early.
func (g *Gatherer) FetchArtifacts(ctx context.Context, kd *kaov1.KarmadaDeployment) (*Artifacts, error) {
	rawURL := kd.Spec.Artifacts.URL
	if rawURL == "" {
		return g.localArtifacts(kd)
	}
	if err := g.checkURL(rawURL, kd.Spec.Artifacts.SHA256Sums); err != nil {
		return nil, err
	}
	if g.StateDir == "" {
		return nil, reason.Missing("spec.artifacts.url needs the operator's --state-dir to mirror the bundle into")
	}
	m, err := bundle.New(rawURL, filepath.Join(g.StateDir, artifactsCacheDir),
		bundle.Options{SumsSHA256: kd.Spec.Artifacts.SHA256Sums, AllowRedirect: g.allowsURL})
	if err != nil {
		return nil, reason.Missing("spec.artifacts.url: %v", err) // never quotes the URL's credentials
	}
	src := bundleSource{where: m.String(), field: "spec.artifacts.url"}
	ctx, cancel := context.WithTimeout(ctx, artifactsMirrorTimeout)
	defer cancel()
	var a *Artifacts
	res, err := m.Sync(ctx, func(ix *bundle.Index) ([]bundle.Component, error) {
		resolved, wants, err := versionsFor(kd, ix.Manifest, src)
		if err != nil {
			return nil, err
		}
		a = resolved
		comps := make([]bundle.Component, 0, len(wants))
		for _, w := range wants {
			c := bundle.Component{Name: w.component, Version: w.version}
			if !ix.Has(c) {
				return nil, missingVersion(src, w)
			}
			comps = append(comps, c)
		}
		return comps, nil
	})
	if err != nil {
		if bad, ok := reason.From(err); ok {
			return nil, bad
		}
		if errors.Is(err, bundle.ErrPinMismatch) {
			return nil, reason.Missing("mirroring %s: its SHA256SUMS does not have the sha256 spec.artifacts.sha256sums pins: kao mirrored nothing from it", src)
		}
		return nil, reason.Missing("mirroring %s: %v", src, err)
	}
	if res.Downloaded > 0 {
		ctrl.Log.WithName("artifacts").Info("Mirrored the artifacts bundle", "KarmadaDeployment", klog.KObj(kd),
			"url", m.String(), "dir", m.Dir(), "files", res.Downloaded, "bytes", res.Bytes)
	}
	a.dir = m.Dir()
	return a, nil
}

// ObservedArtifacts is resolveArtifacts without the network, for status: a
// bundle at spec.artifacts.url is read from what the last run mirrored.
func (g *Gatherer) ObservedArtifacts(kd *kaov1.KarmadaDeployment) (*Artifacts, error) {
	rawURL := kd.Spec.Artifacts.URL
	if rawURL == "" {
		return g.localArtifacts(kd)
	}
	if err := g.checkURL(rawURL, kd.Spec.Artifacts.SHA256Sums); err != nil {
		return nil, err
	}
	if g.StateDir == "" {
		return nil, reason.Missing("spec.artifacts.url needs the operator's --state-dir to mirror the bundle into")
	}
	dir, err := bundle.CacheDir(filepath.Join(g.StateDir, artifactsCacheDir), rawURL, kd.Spec.Artifacts.SHA256Sums)
	if err != nil {
		return nil, reason.Missing("spec.artifacts.url: %v", err)
	}
	return checkBundleDir(kd, dir, bundleSource{where: bundle.Redact(rawURL) + " mirrored in " + dir, field: "spec.artifacts.url"})
}

// localArtifacts resolves a bundle directory: spec.artifacts.localPath or the
// operator's default.
func (g *Gatherer) localArtifacts(kd *kaov1.KarmadaDeployment) (*Artifacts, error) {
	src := bundleSource{where: kd.Spec.Artifacts.LocalPath, field: "spec.artifacts.localPath"}
	if src.where == "" {
		src = bundleSource{where: g.ArtifactsDir, field: "the operator's --artifacts-dir"}
	} else if err := g.checkLocalPath(src.where, g.ArtifactsDir); err != nil {
		return nil, err
	}
	if src.where == "" {
		return nil, reason.Missing("no artifacts bundle: set spec.artifacts.localPath or spec.artifacts.url, or start the operator with --artifacts-dir")
	}
	return checkBundleDir(kd, src.where, src)
}

// checkBundleDir checks that a bundle directory holds every version the spec asks for.
func checkBundleDir(kd *kaov1.KarmadaDeployment, dir string, src bundleSource) (*Artifacts, error) {
	data, err := os.ReadFile(filepath.Join(dir, bundle.ManifestFile))
	if err != nil {
		return nil, reason.Missing("%s has no readable manifest.json: build one with `make artifacts`", src)
	}
	m := bundle.Manifest{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, reason.Missing("%s has a malformed manifest.json: %v", src, err)
	}
	a, wants, err := versionsFor(kd, m, src)
	if err != nil {
		return nil, err
	}
	for _, w := range wants {
		if kd.Spec.Mode == kaov1.ContainerizedMode {
			// Only Karmada's CRDs come from the bundle; images come from the registry.
			if st, err := os.Stat(filepath.Join(dir, w.component, w.version, "crds.tar.gz")); err != nil || !st.Mode().IsRegular() {
				return nil, reason.Missing("%s has no Karmada %s CRD archive (karmada/%s/crds.tar.gz): build a bundle with it (`make artifacts`)",
					src, w.version, w.version)
			}
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, w.component, w.version, "bin")); err != nil || !st.IsDir() {
			return nil, missingVersion(src, w)
		}
	}
	a.dir = dir
	return a, nil
}

// versionsFor decides the versions a run installs, from the spec and the
// bundle's defaults, and lists the component versions it needs.
func versionsFor(kd *kaov1.KarmadaDeployment, m bundle.Manifest, src bundleSource) (*Artifacts, []bundleWant, error) {
	a := &Artifacts{Karmada: kd.Spec.Version, Kubernetes: kd.Spec.KubernetesVersion, Etcd: m.Etcd}
	if a.Kubernetes == "" {
		a.Kubernetes = m.Kubernetes
	}
	if e := kd.Spec.Etcd.Managed; e != nil && e.Version != "" {
		a.Etcd = e.Version
	}
	wants := []bundleWant{
		{"karmada", a.Karmada, "Karmada", ""},
		{"kubernetes", a.Kubernetes, "Kubernetes", ""},
	}
	if kd.Spec.Etcd.Managed != nil {
		wants = append(wants, bundleWant{"etcd", a.Etcd, "etcd", ""})
	}
	for _, w := range componentWants(kd) {
		if !slices.ContainsFunc(wants, func(o bundleWant) bool { return o.component == w.component && o.version == w.version }) {
			wants = append(wants, w)
		}
	}
	// Every version must be known and well-formed: a Containerized control
	// plane tags its images with them. Its bundle need only hold the CRDs of
	// its Karmada version.
	checked := wants
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		wants = wants[:1]
	}
	for _, w := range checked {
		if w.version == "" {
			return nil, nil, reason.Missing("%s names no default %s version in manifest.json", src, w.what)
		}
		// Spec versions are validated by the API; a manifest's are not.
		if !bundleVersion.MatchString(w.version) {
			return nil, nil, reason.Missing("%s names %s version %q in manifest.json, not vX.Y.Z", src, w.what, w.version)
		}
	}
	return a, wants, nil
}

// componentWants are the versions single components override
// (spec.apiServer, spec.components and the enabled addons): the bundle must
// hold those too, or the run would stop when it installs that component.
func componentWants(kd *kaov1.KarmadaDeployment) []bundleWant {
	c := kd.Spec.Components
	overrides := []struct {
		field, component, what string
		spec                   kaov1.ComponentSpec
	}{
		{"spec.apiServer.version", "kubernetes", "Kubernetes", kd.Spec.APIServer.ComponentSpec},
		{"spec.components.kubeControllerManager.version", "kubernetes", "Kubernetes", c.KubeControllerManager},
		{"spec.components.aggregatedAPIServer.version", "karmada", "Karmada", c.AggregatedAPIServer},
		{"spec.components.controllerManager.version", "karmada", "Karmada", c.ControllerManager},
		{"spec.components.scheduler.version", "karmada", "Karmada", c.Scheduler},
		{"spec.components.webhook.version", "karmada", "Karmada", c.Webhook},
	}
	a := kd.Spec.Addons
	for _, addon := range []struct {
		field string
		spec  *kaov1.AddonSpec
	}{
		{"spec.addons.search.version", a.Search},
		{"spec.addons.descheduler.version", a.Descheduler},
		{"spec.addons.metricsAdapter.version", a.MetricsAdapter},
		{"spec.addons.schedulerEstimator.version", a.SchedulerEstimator},
	} {
		if addon.spec != nil && addon.spec.Enabled {
			overrides = append(overrides, struct {
				field, component, what string
				spec                   kaov1.ComponentSpec
			}{addon.field, "karmada", "Karmada", addon.spec.ComponentSpec})
		}
	}
	var out []bundleWant
	for _, o := range overrides {
		if o.spec.Version != "" {
			out = append(out, bundleWant{o.component, o.spec.Version, o.what, o.field})
		}
	}
	return out
}

func missingVersion(src bundleSource, w bundleWant) error {
	asked := ""
	if w.field != "" {
		asked = " (" + w.field + ")"
	}
	return reason.Missing("%s has no %s %s%s: build a bundle with it (`make artifacts`)", src, w.what, w.version, asked)
}

// extraVars are the run variables describing the bundle.
func (a *Artifacts) extraVars() map[string]any {
	return map[string]any{
		"kao_artifacts_dir":              UnsafeString(a.dir),
		"kao_karmada_version_default":    UnsafeString(a.Karmada),
		"kao_kubernetes_version_default": UnsafeString(a.Kubernetes),
		"kao_etcd_version_default":       UnsafeString(a.Etcd),
	}
}

// UnsafeString marks an extra var Ansible must never template: values that
// come from a CR are data, not Jinja, even where validation already rules
// braces out.
func UnsafeString(s string) map[string]string {
	return map[string]string{"__ansible_unsafe": s}
}
