package pipeline

import (
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	bundle "github.com/kao-io/kao/internal/artifacts"
	"github.com/kao-io/kao/internal/controller/reason"
)

// Policy is what the operator's administrator lets tenants ask for. A
// tenant is whoever may write KarmadaDeployments in a namespace; the
// options here would reach beyond that namespace (the operator's own
// filesystem and network, the operator's own cluster), so each is refused
// unless the administrator allows it with a flag. docs/security.md lists
// which inputs an administrator trusts and which a tenant may set.
type Policy struct {
	// ArtifactPaths are the directories of the operator's filesystem that
	// spec.artifacts.localPath may name or lie under, besides the
	// operator's own --artifacts-dir.
	ArtifactPaths []string
	// ArtifactURLs are the URL prefixes spec.artifacts.url may start with
	// (scheme, host and path, compared without credentials); none allows
	// no URL: the operator would fetch from any address a tenant names.
	ArtifactURLs []string
	// InClusterNamespaces are the namespaces of the operator's own cluster
	// a deployment with spec.hostCluster.inCluster may use, as path.Match
	// patterns (karmada-*); none allows inCluster in none.
	InClusterNamespaces []string
	// InClusterHostPath allows HostPath etcd storage on the operator's own
	// cluster's nodes.
	InClusterHostPath bool
	// InClusterTolerations allows tolerations on the operator's own
	// cluster, which let pods onto nodes their taints keep others off.
	InClusterTolerations bool
}

// checkLocalPath refuses a spec.artifacts.localPath outside the directories
// the administrator allows. The path is judged as written and as resolved,
// so a symbolic link cannot lead outside.
func (p Policy) checkLocalPath(local, artifactsDir string) error {
	allowed := append([]string{artifactsDir}, p.ArtifactPaths...)
	real, err := filepath.EvalSymlinks(local)
	if err != nil {
		real = filepath.Clean(local)
	}
	for _, root := range allowed {
		if root == "" {
			continue
		}
		realRoot, err := filepath.EvalSymlinks(root)
		if err != nil {
			realRoot = filepath.Clean(root)
		}
		if isOrUnder(filepath.Clean(local), filepath.Clean(root)) && isOrUnder(real, realRoot) {
			return nil
		}
	}
	return reason.Missing("spec.artifacts.localPath %s is not a bundle directory the operator's administrator allows: "+
		"it must be the operator's --artifacts-dir or lie under a directory of --allowed-artifact-paths", local)
}

// isOrUnder tells whether p is dir or lies under it (both clean).
func isOrUnder(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// checkURL refuses a spec.artifacts.url that starts with none of the
// allowed prefixes. Credentials take no part: neither in the comparison nor
// in the message.
//
// Over plain http it also asks what the API asks (an older CRD may not):
// no credentials, and a pinned SHA256SUMS.
func (p Policy) checkURL(rawURL, sums string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return reason.Missing("spec.artifacts.url is not a valid URL")
	}
	if u.Scheme == "http" {
		if u.User != nil {
			return reason.Missing("spec.artifacts.url sends credentials over plain http: serve the bundle over https")
		}
		if sums == "" {
			return reason.Missing("an http:// spec.artifacts.url needs spec.artifacts.sha256sums, the SHA-256 of the bundle's SHA256SUMS: over plain http nothing else vouches for the files (or serve the bundle over https)")
		}
	}
	if len(p.ArtifactURLs) == 0 {
		return reason.Missing("spec.artifacts.url: the operator's administrator allows no bundle URL (--allowed-artifact-urls): use the operator's bundle, or ask for the URL to be allowed")
	}
	if p.allowsURL(u) {
		return nil
	}
	return reason.Missing("spec.artifacts.url %s starts with none of the prefixes the operator's administrator allows (--allowed-artifact-urls)", bundle.Redact(rawURL))
}

// allowsURL tells whether u starts with an allowed prefix: the same scheme
// and host, and a path that is the prefix's path or lies under it, segment
// by segment. A path with . or .. segments (plain or escaped) is never
// allowed: a web server would resolve them out of the prefix.
func (p Policy) allowsURL(u *url.URL) bool {
	segments, ok := urlSegments(u)
	if !ok {
		return false
	}
	for _, raw := range p.ArtifactURLs {
		prefix, err := url.Parse(raw)
		if err != nil || !strings.EqualFold(prefix.Scheme, u.Scheme) || !strings.EqualFold(prefix.Host, u.Host) {
			continue
		}
		want, ok := urlSegments(prefix)
		if ok && len(segments) >= len(want) && slices.Equal(segments[:len(want)], want) {
			return true
		}
	}
	return false
}

// urlSegments splits a URL's unescaped path into its non-empty segments;
// false when one of them is . or .., or the path does not unescape.
func urlSegments(u *url.URL) ([]string, bool) {
	raw := u.EscapedPath()
	out := []string{}
	for _, seg := range strings.Split(raw, "/") {
		if seg == "" {
			continue
		}
		plain, err := url.PathUnescape(seg)
		if err != nil || plain == "." || plain == ".." || strings.Contains(plain, "/") || strings.Contains(plain, "\\") {
			return nil, false
		}
		out = append(out, plain)
	}
	return out, true
}

// checkInCluster refuses what a deployment may not ask of the operator's
// own cluster (spec.hostCluster.inCluster): a namespace the administrator
// did not allow, HostPath storage on its nodes, tolerations.
func (p Policy) checkInCluster(kd *kaov1.KarmadaDeployment) error {
	hc := kd.Spec.HostCluster
	if hc == nil || !hc.InCluster {
		return nil
	}
	ns := HostNamespace(kd)
	allowed := false
	for _, pattern := range p.InClusterNamespaces {
		if ok, err := path.Match(pattern, ns); err == nil && ok {
			allowed = true
			break
		}
	}
	if !allowed {
		return reason.Missing("spec.hostCluster.inCluster: the operator's administrator does not allow control planes in namespace %s of the operator's own cluster (--allowed-in-cluster-namespaces)", ns)
	}
	if m := kd.Spec.Etcd.Managed; m != nil && m.Storage.Type == kaov1.HostPathStorage && !p.InClusterHostPath {
		return reason.Missing("spec.etcd.managed.storage.type HostPath: the operator's administrator does not allow HostPath volumes on the operator's own cluster's nodes (--allow-in-cluster-host-path); use a claim or emptyDir")
	}
	if field := tolerationsField(kd); field != "" && !p.InClusterTolerations {
		return reason.Missing("%s: the operator's administrator does not allow tolerations on the operator's own cluster (--allow-in-cluster-tolerations)", field)
	}
	return nil
}

// tolerationsField names the first spec field that sets tolerations, or "".
func tolerationsField(kd *kaov1.KarmadaDeployment) string {
	s := kd.Spec
	type field struct {
		name string
		n    int
	}
	fields := []field{
		{"spec.apiServer.tolerations", len(s.APIServer.Tolerations)},
		{"spec.components.aggregatedAPIServer.tolerations", len(s.Components.AggregatedAPIServer.Tolerations)},
		{"spec.components.kubeControllerManager.tolerations", len(s.Components.KubeControllerManager.Tolerations)},
		{"spec.components.controllerManager.tolerations", len(s.Components.ControllerManager.Tolerations)},
		{"spec.components.scheduler.tolerations", len(s.Components.Scheduler.Tolerations)},
		{"spec.components.webhook.tolerations", len(s.Components.Webhook.Tolerations)},
	}
	if m := s.Etcd.Managed; m != nil {
		fields = append(fields, field{"spec.etcd.managed.tolerations", len(m.Tolerations)})
	}
	addons := []*kaov1.AddonSpec{s.Addons.Search, s.Addons.Descheduler, s.Addons.MetricsAdapter, s.Addons.SchedulerEstimator}
	for i, name := range []string{"search", "descheduler", "metricsAdapter", "schedulerEstimator"} {
		if a := addons[i]; a != nil {
			fields = append(fields, field{"spec.addons." + name + ".tolerations", len(a.Tolerations)})
		}
	}
	for _, f := range fields {
		if f.n > 0 {
			return f.name
		}
	}
	return ""
}
