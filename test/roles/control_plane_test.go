package roles

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// TestControlPlaneRoles builds one Binary control plane on three test hosts
// (managed etcd on all, karmada-apiserver and karmada-aggregated-apiserver on
// the first two, the controllers on the last two) and runs the steps of each
// area on it, in the order a real install builds them:
//
//   - apiServerSteps: install.yml with no controlPlane hosts, the API
//     servers and the aggregated API server (aggregatedAPIServerSteps);
//   - controllersSteps: the controllers' first install, karmada-webhook
//     wired in, bootstrap tokens;
//   - membersSteps: members.yml joins and unjoins member clusters;
//   - addonsSteps: every addon on, with push-b (a member membersSteps left
//     joined) as the estimator's member.
//
// uninstall.yml is not run here: TestBinaryInstall's deletion removes the
// same layout of roles, and TestInstallFaults checks that nothing is left.
// Nor is a certificate renewal: TestBinaryInstall's rotation rolls every
// re-issued certificate out over the same layout and checks that the etcd
// members and the API servers restart one at a time. Nor are the addons
// disabled, or karmada-scheduler given the estimator flags by a run of its
// own: TestBinaryInstall's install runs do both, and its addon checks cover
// them (test/e2e addons_test.go).
//
// The areas share the plane because its install is the slowest part of each:
// they were four tests that each built it. A failed step stops the areas
// after it too.
func TestControlPlaneRoles(t *testing.T) {
	requirePrerequisites(t)
	testenv.Lane(t)
	e := startControlPlaneEnv(t)
	apiServerSteps(t, e)
	controllersSteps(t, e)
	membersSteps(t, e)
	addonsSteps(t, e)
}

// planeEnv is TestControlPlaneRoles' control plane: its hosts, kao's PKI
// for it, the runner and, once membersSteps started them, the member
// clusters.
type planeEnv struct {
	m          manifest // the bundle's versions
	kubectl    string   // the bundle's kubectl
	agent      string   // the bundle's karmada-agent
	karmadactl string   // the bundle's karmadactl
	dc         *hosts.Cluster
	hosts      []hosts.Host
	apiHosts   []hosts.Host // hosts[:2]: karmada-apiserver, karmada-aggregated-apiserver
	cpHosts    []hosts.Host // hosts[1:]: the controllers, karmada-webhook, the addons
	names      []string     // every host's name
	cpNames    []string     // the control-plane hosts' names
	// pki holds every certificate any step needs: the controllers', the
	// Pull members' agents and every addon's.
	pki     pki.Bundle
	a       *ansible
	vars    string // extra vars: bundle, PKI directory, image registry
	varsMap map[string]string
	// adminKubeconfigs are the administrator's kubeconfigs, one per API
	// server; admin is the first API server's.
	adminKubeconfigs []string
	admin            string

	// clusters are three real member clusters (startMembers). kubeconfigs
	// maps each member name (broken ones too) to its kubeconfig file, as
	// the test uses it; handed maps each to the file a run gets, which for
	// push-b holds a decoy context first.
	clusters    []*members.Member
	loopback    *members.Member
	kubeconfigs map[string]string
	handed      map[string]string
}

// startControlPlaneEnv boots the three test hosts and issues kao's PKI for
// every step; nothing is installed yet.
func startControlPlaneEnv(t *testing.T) *planeEnv {
	t.Helper()
	requirePrerequisites(t)
	bundle, m := buildBundle(t)
	e := &planeEnv{
		m:          m,
		kubectl:    filepath.Join(bundle, "kubernetes", m.Kubernetes, "bin", "kubectl"),
		agent:      filepath.Join(bundle, "karmada", m.Karmada, "bin", "karmada-agent"),
		karmadactl: filepath.Join(bundle, "karmada", m.Karmada, "bin", "karmadactl"),
	}
	if _, err := os.Stat(e.karmadactl); err != nil {
		t.Fatalf("the bundle has no karmadactl (make artifacts): %v", err)
	}
	e.dc = hosts.Start(t, 3)
	e.hosts = e.dc.Hosts()
	e.apiHosts, e.cpHosts = e.hosts[:2], e.hosts[1:]
	for _, h := range e.hosts {
		e.names = append(e.names, h.Name)
	}
	e.cpNames = e.names[1:]
	var pkiDir string
	e.pki, pkiDir = issuePKI(t, pki.Request{
		EtcdHosts:         pkiHosts(e.hosts),
		APIServerHosts:    pkiHosts(e.apiHosts),
		ControlPlaneHosts: pkiHosts(e.cpHosts),
		Endpoint:          e.apiHosts[0].Address + ":5443",
		PullMembers:       []string{pullC, brokenPort},
		Addons:            pki.Addons{Search: true, MetricsAdapter: true, Descheduler: true, SchedulerEstimator: true},
	})
	e.a = newAnsible(t, e.dc)
	e.varsMap = map[string]string{
		"kao_artifacts_dir":              bundle,
		"kao_pki_dir":                    pkiDir,
		"karmada_members_image_registry": testRegistry,
	}
	e.vars = e.a.extraVars(t, "vars.json", e.varsMap)
	for _, h := range e.apiHosts {
		kc, err := e.pki.Kubeconfig(pki.AdminClient, apiURL(h))
		if err != nil {
			t.Fatal(err)
		}
		e.adminKubeconfigs = append(e.adminKubeconfigs, e.a.writeFile(t, "admin-"+h.Name+".kubeconfig", kc))
	}
	e.admin = e.adminKubeconfigs[0]
	return e
}

// startMembers starts three member clusters on the hosts' gateway (the
// address both this machine and karmada-controller-manager on the test
// hosts reach) and one on this machine's loopback, and writes the
// kubeconfigs of the members membersSteps joins, broken ones included. t
// must be the test's own: the members serve until it ends.
func (e *planeEnv) startMembers(t *testing.T) {
	t.Helper()
	e.clusters = members.Start(t, 3, members.Options{Address: e.dc.Gateway()})
	e.kubeconfigs = map[string]string{}
	for i, name := range []string{pushA, pushB, pullC} {
		e.kubeconfigs[name] = e.a.writeFile(t, name+".kubeconfig", e.clusters[i].Kubeconfig)
	}
	e.kubeconfigs[brokenCA] = e.a.writeFile(t, brokenCA+".kubeconfig",
		brokenKubeconfig(t, e.clusters[0].Kubeconfig, e.clusters[1].CA, ""))
	deadServer := "https://" + e.dc.Gateway() + ":" + strconv.Itoa(closedPort(t, e.dc.Gateway()))
	e.kubeconfigs[brokenPort] = e.a.writeFile(t, brokenPort+".kubeconfig",
		brokenKubeconfig(t, e.clusters[2].Kubeconfig, nil, deadServer))
	// A cluster the controller reaches and Karmada's hosts do not.
	e.loopback = members.Start(t, 1, members.Options{Address: "127.0.0.1"})[0]
	e.kubeconfigs[unready] = e.a.writeFile(t, unready+".kubeconfig", e.loopback.Kubeconfig)
	e.handed = maps.Clone(e.kubeconfigs)
	e.handed[pushB] = e.a.writeFile(t, pushB+"-decoy.kubeconfig", decoyKubeconfig(t, e.clusters[1].Kubeconfig, deadServer))
}

// deployment is the KarmadaDeployment of the whole control plane, the
// controlPlane hosts included, with spec members and status members.
func (e *planeEnv) deployment(spec []kaov1.MemberSpec, status []kaov1.MemberStatus) *kaov1.KarmadaDeployment {
	kd := controllersDeployment(e.hosts, e.apiHosts, e.cpHosts)
	kd.Spec.Members = spec
	kd.Status.Members = status
	return kd
}

// kubectlOK runs kubectl against Karmada or, with a member's kubeconfig,
// against that member, and fails t on error.
func (e *planeEnv) kubectlOK(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, err := testenv.Kubectl(context.Background(), e.kubectl, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
