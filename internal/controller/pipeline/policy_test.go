package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

func TestPolicyConfinesLocalBundles(t *testing.T) {
	own := t.TempDir()
	allowed := t.TempDir()
	outside := t.TempDir()
	// A link inside an allowed directory that leads out of it.
	escape := filepath.Join(allowed, "escape")
	if err := os.Symlink(outside, escape); err != nil {
		t.Fatal(err)
	}
	p := Policy{ArtifactPaths: []string{allowed}}
	for _, tc := range []struct {
		// path is spec.artifacts.localPath.
		path string
		ok   bool
	}{
		{own, true},
		{filepath.Join(own, "v2"), true},
		{allowed, true},
		{filepath.Join(allowed, "dc1"), true},
		{outside, false},
		{"/", false},
		{"/etc", false},
		{own + "-sibling", false},
		{filepath.Join(allowed, "..", filepath.Base(outside)), false},
		{escape, false},
	} {
		err := p.checkLocalPath(tc.path, own)
		if (err == nil) != tc.ok {
			t.Errorf("localPath %s: allowed %v, want %v (%v)", tc.path, err == nil, tc.ok, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--allowed-artifact-paths") {
			t.Errorf("localPath %s: the refusal does not name the flag: %v", tc.path, err)
		}
	}
}

func TestPolicyAllowsOnlyListedBundleURLs(t *testing.T) {
	const pin = "0000000000000000000000000000000000000000000000000000000000000000"
	p := Policy{ArtifactURLs: []string{"https://bundles.dc1.example/kao", "http://10.0.0.5:8080/"}}
	for _, tc := range []struct {
		url, sums string
		// want is part of the refusal; "" allows.
		want string
	}{
		{"https://bundles.dc1.example/kao", "", ""},
		{"https://bundles.dc1.example/kao/v1.18", "", ""},
		{"https://ops:pw@bundles.dc1.example/kao/v1.18", "", ""},
		{"https://bundles.dc1.example/kaopy", "", "starts with none of the prefixes"},
		{"https://bundles.dc1.example.evil/kao", "", "starts with none of the prefixes"},
		{"https://169.254.169.254/latest/meta-data", "", "starts with none of the prefixes"},
		// Dot segments, plain or escaped, that a web server would resolve out
		// of the prefix.
		{"https://bundles.dc1.example/kao/../other", "", "starts with none of the prefixes"},
		{"https://bundles.dc1.example/kao/%2e%2e/other", "", "starts with none of the prefixes"},
		{"https://bundles.dc1.example/kao/..%2fother", "", "starts with none of the prefixes"},
		{"https://bundles.dc1.example/kao/./v1", "", "starts with none of the prefixes"},
		{"https://BUNDLES.dc1.example/kao/v1", "", ""},
		{"https://bundles.dc1.example:8443/kao/v1", "", "starts with none of the prefixes"},
		{"http://10.0.0.5:8080/kao", pin, ""},
		{"http://10.0.0.5:8080/kao", "", "needs spec.artifacts.sha256sums"},
		{"http://ops:pw@10.0.0.5:8080/kao", pin, "sends credentials over plain http"},
	} {
		err := p.checkURL(tc.url, tc.sums)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a refusal saying %q", tc.url, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "pw@"):
			t.Errorf("%s: the refusal shows credentials: %v", tc.url, err)
		}
	}
	if err := (Policy{}).checkURL("https://bundles.dc1.example/kao", ""); err == nil || !strings.Contains(err.Error(), "allows no bundle URL") {
		t.Errorf("with no allowed prefix a URL was not refused: %v", err)
	}
}

func TestPolicyConfinesInClusterDeployments(t *testing.T) {
	deployment := func(ns string, change func(*kaov1.KarmadaDeploymentSpec)) *kaov1.KarmadaDeployment {
		kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
			Mode:        kaov1.ContainerizedMode,
			HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns},
			Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		}}
		if change != nil {
			change(&kd.Spec)
		}
		return kd
	}
	hostPath := func(s *kaov1.KarmadaDeploymentSpec) { s.Etcd.Managed.Storage.Type = kaov1.HostPathStorage }
	tolerate := func(s *kaov1.KarmadaDeploymentSpec) {
		s.Components.Webhook.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists}}
	}
	strict := Policy{InClusterNamespaces: []string{"karmada-*", "team-a"}}
	loose := Policy{InClusterNamespaces: []string{"*"}, InClusterHostPath: true, InClusterTolerations: true}
	for _, tc := range []struct {
		name   string
		policy Policy
		kd     *kaov1.KarmadaDeployment
		// want is part of the refusal; "" allows.
		want string
	}{
		{"allowed namespace", strict, deployment("karmada-dc1", nil), ""},
		{"the default namespace matches a pattern", strict, deployment("", nil), ""},
		{"exact namespace", strict, deployment("team-a", nil), ""},
		{"kube-system", strict, deployment("kube-system", nil), "namespace kube-system"},
		{"no namespace allowed", Policy{}, deployment("karmada-dc1", nil), "--allowed-in-cluster-namespaces"},
		{"HostPath", strict, deployment("karmada-dc1", hostPath), "--allow-in-cluster-host-path"},
		{"tolerations", strict, deployment("karmada-dc1", tolerate), "spec.components.webhook.tolerations"},
		{"HostPath and tolerations allowed", loose, deployment("kube-system", func(s *kaov1.KarmadaDeploymentSpec) { hostPath(s); tolerate(s) }), ""},
		{"a remote host cluster is the tenant's own", Policy{}, &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
			HostCluster: &kaov1.HostClusterSpec{Namespace: "kube-system"}}}, ""},
	} {
		err := tc.policy.checkInCluster(tc.kd)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}
