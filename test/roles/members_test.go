package roles

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/members"
)

// The members membersSteps joins, and what each stands for.
const (
	pushA      = "push-a"      // Push, with provider, region and zones; unjoined, then joined again
	pushB      = "push-b"      // Push; stays joined, and addonsSteps runs its estimator
	pullC      = "pull-c"      // Pull; unjoined at the end
	brokenCA   = "broken-ca"   // Push, push-a's server with another cluster's CA
	brokenPort = "broken-port" // Pull, a port nothing listens on
	unready    = "unready"     // Push, a cluster on this machine's loopback, which Karmada cannot reach
)

// testRegistry is the offline registry Pull members take karmada-agent from.
const testRegistry = "registry.kao.test:5000/karmada"

// memberSpec is a spec.members entry whose kubeconfig Secret is named after
// the member.
func memberSpec(name string, mode kaov1.SyncMode) kaov1.MemberSpec {
	return kaov1.MemberSpec{Name: name, SyncMode: mode, KubeconfigSecretRef: kaov1.SecretKeyReference{Name: name, Key: "kubeconfig"}}
}

// joinedStatus is the status.members entry of a joined member.
func joinedStatus(name string, mode kaov1.SyncMode) kaov1.MemberStatus {
	return kaov1.MemberStatus{Name: name, SyncMode: mode, Joined: true,
		KubeconfigSecretRef: &kaov1.SecretKeyReference{Name: name, Key: "kubeconfig"}}
}

// clusterView is what the test reads from a Cluster object.
type clusterView struct {
	Spec struct {
		ID          string   `json:"id"`
		SyncMode    string   `json:"syncMode"`
		APIEndpoint string   `json:"apiEndpoint"`
		Provider    string   `json:"provider"`
		Region      string   `json:"region"`
		Zones       []string `json:"zones"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	} `json:"status"`
}

func (c clusterView) ready() (bool, string) {
	for _, cond := range c.Status.Conditions {
		if cond.Type == "Ready" {
			return cond.Status == "True", cond.Reason + ": " + cond.Message
		}
	}
	return false, "no Ready condition"
}

// cluster reads the Cluster name from Karmada; ok is false when it does not
// exist (or cannot be read).
func (e *planeEnv) cluster(name string) (c clusterView, ok bool, err error) {
	out, err := testenv.Kubectl(context.Background(), e.kubectl, e.admin, "get", "clusters.cluster.karmada.io", name, "-o", "json")
	if err != nil {
		return c, false, err
	}
	return c, true, json.Unmarshal([]byte(out), &c)
}

// gone tells whether kubectl get of args finds nothing.
func (e *planeEnv) gone(kubeconfig string, args ...string) (bool, string) {
	out, err := testenv.Kubectl(context.Background(), e.kubectl, kubeconfig, append([]string{"get", "--ignore-not-found", "-o", "name"}, args...)...)
	if err != nil {
		return false, err.Error()
	}
	return strings.TrimSpace(out) == "", out
}

// membersSteps start member clusters and join them to the control plane of
// e (the controllers and karmada-webhook running) with playbooks/members.yml:
// two in Push mode, which become Ready, and one in Pull mode, whose
// karmada-agent (run here, in place of the member's kubelet, from the
// Deployment kao wrote) registers it with a certificate that is no
// administrator's. Two members with broken kubeconfigs fail alone, with a
// clear message. A workload propagates to a Push member, a second run
// changes nothing, and unjoining a Push and the Pull member removes them from
// Karmada and Karmada's objects from them. push-a and push-b end joined.
func membersSteps(t *testing.T, e *planeEnv) {
	t.Helper()
	e.startMembers(t)
	ctx := context.Background()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if log, err := os.ReadFile(filepath.Join(e.a.dir, "karmada-agent.log")); err == nil {
			t.Logf("karmada-agent's log:\n%s", log)
		}
	})
	membersPlaybook := filepath.Join(repoRoot(t), "playbooks", "members.yml")
	a := memberSpec(pushA, kaov1.PushSyncMode)
	a.Provider, a.Region, a.Zones = "dc", "eu-1", []string{"z2", "z1"}
	c := memberSpec(pullC, kaov1.PullSyncMode)
	c.Region, c.Zones = "eu-2", []string{"z3"}
	b := memberSpec(pushB, kaov1.PushSyncMode)
	b.Context = e.clusters[1].Name // not the kubeconfig's current context
	good := []kaov1.MemberSpec{a, b, c}
	goodHosts := []string{inventory.MemberHost(pushA), inventory.MemberHost(pushB), inventory.MemberHost(pullC)}

	testenv.Step(t, "joins the members, the broken ones fail alone", func(t *testing.T) {
		spec := append(slices.Clone(good), memberSpec(brokenCA, kaov1.PushSyncMode), memberSpec(brokenPort, kaov1.PullSyncMode),
			memberSpec(unready, kaov1.PushSyncMode))
		inv := e.a.memberInventory(t, "members-broken.json", e.deployment(spec, nil), e.handed)
		// The unready member is waited for until the end: a shorter wait
		// than the default 120 s, long enough for Karmada to say why
		// (it looks at a Cluster every 10 s).
		short := maps.Clone(e.varsMap)
		short["karmada_members_ready_timeout"] = "60"
		r := e.a.playbookLong(t, inv, e.a.extraVars(t, "vars-short-ready.json", short), membersPlaybook)
		if r.err == nil {
			t.Fatalf("the run succeeded although two members are broken:\n%s", r.out)
		}
		for _, h := range goodHosts {
			if rc, ok := r.recap[h]; !ok || rc.Failed != 0 || rc.Unreachable != 0 {
				t.Errorf("%s did not join cleanly (%+v)", h, rc)
			}
		}
		for _, h := range []string{inventory.MemberHost(brokenCA), inventory.MemberHost(brokenPort), inventory.MemberHost(unready)} {
			if r.recap[h].Failed != 1 {
				t.Errorf("%s: %+v, want one failure", h, r.recap[h])
			}
		}
		for _, want := range []string{
			"member broken-ca: its API server at " + e.clusters[0].Server + " did not answer with the kubeconfig kao was given",
			"member broken-port: its API server at https://" + e.dc.Gateway(),
			// Karmada's own reason, after the wait.
			"member unready: its Cluster is not Ready after 60 s: ",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("the run does not say %q", want)
			}
		}
		if t.Failed() {
			t.Fatalf("output:\n%s", r.out)
		}
		for _, line := range strings.Split(r.out, "\n") {
			if strings.HasPrefix(line, "fatal: ") && strings.Contains(line, `"msg": "member `) {
				t.Logf("as it should: %s", line)
			}
		}
		for _, name := range []string{brokenCA, brokenPort} {
			if _, ok, _ := e.cluster(name); ok {
				t.Errorf("Cluster %s exists although its member is broken", name)
			}
		}
		if strings.Contains(r.out, "Karmada has not reported on it yet") {
			t.Error("the unready member failed without Karmada's reason")
		}
	})

	testenv.Step(t, "push members are Ready clusters", func(t *testing.T) {
		for i, name := range []string{pushA, pushB} {
			cl, ok, err := e.cluster(name)
			if !ok {
				t.Fatalf("no Cluster %s: %v", name, err)
			}
			if ready, why := cl.ready(); !ready {
				t.Errorf("Cluster %s is not Ready: %s", name, why)
			}
			if cl.Spec.SyncMode != "Push" || cl.Spec.ID != e.clusters[i].KubeSystemUID || cl.Spec.APIEndpoint != e.clusters[i].Server {
				t.Errorf("Cluster %s: syncMode %q, id %q, apiEndpoint %q; want Push, %q, %q", name,
					cl.Spec.SyncMode, cl.Spec.ID, cl.Spec.APIEndpoint, e.clusters[i].KubeSystemUID, e.clusters[i].Server)
			}
		}
		cl, _, _ := e.cluster(pushA)
		if cl.Spec.Provider != "dc" || cl.Spec.Region != "eu-1" || !slices.Equal(cl.Spec.Zones, []string{"z1", "z2"}) {
			t.Errorf("Cluster push-a: provider %q region %q zones %q, want dc, eu-1, [z1 z2]", cl.Spec.Provider, cl.Spec.Region, cl.Spec.Zones)
		}
		// The credentials belong to the Cluster.
		owner := e.kubectlOK(t, e.admin, "-n", "karmada-cluster", "get", "secret", pushA,
			"-o", "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}")
		if owner != "Cluster/"+pushA {
			t.Errorf("Secret karmada-cluster/push-a is owned by %q, want Cluster/push-a", owner)
		}
	})

	var stopAgent func()
	testenv.Step(t, "the pull member's agent registers it, as no administrator", func(t *testing.T) {
		if _, ok, _ := e.cluster(pullC); ok {
			t.Fatal("Cluster pull-c exists before its agent ran")
		}
		image, command, agentKubeconfig := members.ReadAgent(ctx, t, e.kubectl, e.kubeconfigs[pullC])
		if want := testRegistry + "/karmada-agent:v1.18.1"; image != want {
			t.Errorf("karmada-agent's image is %q, want %q", image, want)
		}
		for _, want := range []string{"--cluster-name=pull-c", "--cluster-api-endpoint=" + e.clusters[2].Server,
			"--cluster-region=eu-2", "--cluster-zones=z3", "--leader-elect-resource-namespace=karmada-system"} {
			if !slices.Contains(command, want) {
				t.Errorf("karmada-agent's command %q lacks %q", command, want)
			}
		}
		agentKC := e.a.writeFile(t, "agent.kubeconfig", agentKubeconfig)
		stopAgent, _ = members.StartAgent(t, e.agent, filepath.Join(e.a.dir, "karmada-agent.log"),
			members.AgentArgs(t, command, agentKC, e.kubeconfigs[pullC]))
		eventually(t, 3*time.Minute, "Cluster pull-c to be Ready in Pull mode", func() (bool, string) {
			cl, ok, err := e.cluster(pullC)
			if !ok {
				return false, errOrOK(err)
			}
			ready, why := cl.ready()
			return ready && cl.Spec.SyncMode == "Pull" && cl.Spec.ID == e.clusters[2].KubeSystemUID, cl.Spec.SyncMode + " " + why
		})

		// The agent's own certificate: Karmada's per-cluster agent RBAC and
		// nothing more.
		for _, tc := range []struct {
			args []string // kubectl auth can-i arguments
			want string   // yes or no
		}{
			{[]string{"delete", "namespaces"}, "no"},
			{[]string{"create", "propagationpolicies.policy.karmada.io", "-n", "default"}, "no"},
			{[]string{"get", "secrets", "-n", "karmada-cluster"}, "no"},
			{[]string{"get", "clusters.cluster.karmada.io/" + pushA}, "no"},
			{[]string{"get", "clusters.cluster.karmada.io/" + pullC}, "yes"},
			{[]string{"update", "works.work.karmada.io", "-n", "karmada-es-" + pullC}, "yes"},
			{[]string{"update", "works.work.karmada.io", "-n", "karmada-es-" + pushA}, "no"},
		} {
			out, _ := testenv.Kubectl(ctx, e.kubectl, agentKC, append([]string{"auth", "can-i"}, tc.args...)...)
			if got := strings.TrimSpace(out); got != tc.want {
				t.Errorf("the agent: can-i %s = %q, want %q", strings.Join(tc.args, " "), got, tc.want)
			}
		}
	})

	testenv.Step(t, "propagates a Deployment to a Push member", func(t *testing.T) {
		manifest := e.a.writeFile(t, "propagate.yaml", []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: kao-probe
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: {app: kao-probe}
  template:
    metadata:
      labels: {app: kao-probe}
    spec:
      containers:
        - name: probe
          image: registry.kao.test:5000/probe:1
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: kao-probe
  namespace: default
  # karmada-webhook's mutation gives it the permanent-id label
  # karmada-scheduler waits for (controllersSteps wired it in).
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: kao-probe
  placement:
    clusterAffinity:
      clusterNames: [push-a]
`))
		e.kubectlOK(t, e.admin, "apply", "-f", manifest)
		eventually(t, 3*time.Minute, "Deployment kao-probe in member push-a", func() (bool, string) {
			out, err := testenv.Kubectl(ctx, e.kubectl, e.kubeconfigs[pushA], "-n", "default", "get", "deployment", "kao-probe", "-o", "name")
			return err == nil && strings.TrimSpace(out) == "deployment.apps/kao-probe", errOrOK(err)
		})
		if gone, _ := e.gone(e.kubeconfigs[pushB], "-n", "default", "deployment", "kao-probe"); !gone {
			t.Error("Deployment kao-probe reached push-b too")
		}
	})

	testenv.Step(t, "a second run changes nothing and shows no secret", func(t *testing.T) {
		inv := e.a.memberInventory(t, "members.json", e.deployment(good, nil), e.handed)
		r := e.a.playbookLong(t, inv, e.vars, membersPlaybook)
		r.mustSucceed(t, goodHosts...)
		for _, h := range goodHosts {
			if r.recap[h].Changed != 0 {
				t.Errorf("the second run changed %d things on %s", r.recap[h].Changed, h)
			}
		}
		// Every token and key now exists, so a task without no_log that
		// returned one would print it here.
		agentKubeconfig := e.kubectlOK(t, e.kubeconfigs[pullC], "-n", "karmada-system", "get", "secret", "karmada-kubeconfig",
			"-o", "jsonpath={.data.karmada-kubeconfig}")
		secrets := []string{"PRIVATE KEY", agentKubeconfig}
		for i, name := range []string{pushA, pushB} {
			for _, sa := range []string{"karmada-" + name, "karmada-impersonator"} {
				token := e.kubectlOK(t, e.kubeconfigs[name], "-n", "karmada-cluster", "get", "secret", sa, "-o", "jsonpath={.data.token}")
				if token == "" {
					t.Fatalf("member %s (%s) has no token in karmada-cluster/%s", name, e.clusters[i].Name, sa)
				}
				secrets = append(secrets, token)
			}
		}
		for _, s := range secrets {
			if strings.Contains(r.out, s) {
				t.Errorf("the run's output shows a secret (%.24s...)", s)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", r.out)
		}
	})

	testenv.Step(t, "a check run of the joined members would change nothing", func(t *testing.T) {
		inv := e.a.memberInventory(t, "members-check.json", e.deployment(good, nil), e.handed)
		r := e.a.playbookWithin(t, longPlaybookTimeout, inv, e.vars, membersPlaybook, "--check", "--diff")
		r.mustSucceed(t, goodHosts...)
		for _, h := range goodHosts {
			if r.recap[h].Changed != 0 {
				t.Errorf("the check run says %d things would change on %s", r.recap[h].Changed, h)
			}
		}
	})

	testenv.Step(t, "refuses a name or a cluster that another member holds", func(t *testing.T) {
		taken := map[string]string{
			pushB:    e.kubeconfigs[pushA], // push-b's name, push-a's cluster
			"push-x": e.kubeconfigs[pushA], // a new name for push-a's cluster
		}
		kd := e.deployment([]kaov1.MemberSpec{memberSpec(pushB, kaov1.PushSyncMode), memberSpec("push-x", kaov1.PushSyncMode)}, nil)
		r := e.a.playbookLong(t, e.a.memberInventory(t, "members-taken.json", kd, taken), e.vars, membersPlaybook)
		if r.err == nil {
			t.Fatalf("the run joined members over taken ones:\n%s", r.out)
		}
		for _, want := range []string{
			"member push-b: another cluster holds the name push-b in Karmada: its Cluster has ID " + e.clusters[1].KubeSystemUID +
				", this member is " + e.clusters[0].KubeSystemUID,
			"member push-x: this cluster (ID " + e.clusters[0].KubeSystemUID + ") is already joined to Karmada as push-a",
		} {
			if !strings.Contains(r.out, want) {
				t.Errorf("the run does not say %q:\n%s", want, r.out)
			}
		}
		for _, h := range []string{inventory.MemberHost(pushB), inventory.MemberHost("push-x")} {
			if r.recap[h].Failed != 1 || r.recap[h].Changed != 0 {
				t.Errorf("%s: %+v, want one failure and no change", h, r.recap[h])
			}
		}
		if cl, _, _ := e.cluster(pushB); cl.Spec.ID != e.clusters[1].KubeSystemUID {
			t.Errorf("Cluster push-b now has ID %q, want %q", cl.Spec.ID, e.clusters[1].KubeSystemUID)
		}
	})

	unjoin := e.deployment([]kaov1.MemberSpec{b}, []kaov1.MemberStatus{
		joinedStatus(pushA, kaov1.PushSyncMode), joinedStatus(pushB, kaov1.PushSyncMode), joinedStatus(pullC, kaov1.PullSyncMode),
	})
	unjoinHosts := []string{inventory.MemberHost(pushA), inventory.MemberHost(pullC)}
	testenv.Step(t, "unjoins a Push and the Pull member", func(t *testing.T) {
		inv := e.a.memberInventory(t, "members-unjoin.json", unjoin, e.handed)
		r := e.a.playbookLong(t, inv, e.vars, membersPlaybook)
		r.mustSucceed(t, unjoinHosts...)
		if _, ok := r.recap[inventory.MemberHost(pushB)]; ok {
			t.Errorf("the run touched push-b, which stays joined")
		}
		for _, name := range []string{pushA, pullC} {
			if _, ok, _ := e.cluster(name); ok {
				t.Errorf("Cluster %s is still in Karmada", name)
			}
		}
		if cl, ok, _ := e.cluster(pushB); !ok {
			t.Error("Cluster push-b is gone, yet it stays joined")
		} else if ready, why := cl.ready(); !ready {
			t.Errorf("Cluster push-b is no longer Ready: %s", why)
		}
		for _, check := range []struct {
			kubeconfig string   // where to look
			what       []string // kubectl get arguments of something that must be gone
		}{
			{e.admin, []string{"-n", "karmada-cluster", "secret", pushA, pushA + "-impersonator"}},
			{e.admin, []string{"clusterrole,clusterrolebinding", "system:karmada:pull-c:agent"}},
			{e.admin, []string{"-n", "karmada-cluster", "role,rolebinding", "system:karmada:pull-c:agent-secret"}},
			{e.admin, []string{"namespace", "karmada-es-" + pushA, "karmada-es-" + pullC}},
			{e.kubeconfigs[pushA], []string{"namespace", "karmada-cluster"}},
			{e.kubeconfigs[pushA], []string{"clusterrole,clusterrolebinding", "karmada-controller-manager:karmada-push-a"}},
			// Karmada took back what it had propagated.
			{e.kubeconfigs[pushA], []string{"-n", "default", "deployment", "kao-probe"}},
			{e.kubeconfigs[pullC], []string{"-n", "karmada-system", "deployment,serviceaccount,secret", "karmada-agent", "karmada-agent-sa", "karmada-kubeconfig"}},
			{e.kubeconfigs[pullC], []string{"clusterrole,clusterrolebinding", "karmada-agent"}},
			{e.kubeconfigs[pullC], []string{"namespace", "karmada-cluster"}},
		} {
			eventually(t, 2*time.Minute, "gone: "+strings.Join(check.what, " "), func() (bool, string) {
				return e.gone(check.kubeconfig, check.what...)
			})
		}
		// push-b keeps its access.
		if gone, _ := e.gone(e.kubeconfigs[pushB], "namespace", "karmada-cluster"); gone {
			t.Error("push-b lost its karmada-cluster namespace")
		}
	})
	stopAgent()

	testenv.Step(t, "a second unjoin changes nothing", func(t *testing.T) {
		// pull-c without a recorded mode: the role looks for its Cluster,
		// finds none and cleans up as for Pull.
		again := unjoin.DeepCopy()
		again.Status.Members[2].SyncMode = ""
		inv := e.a.memberInventory(t, "members-unjoin-again.json", again, e.handed)
		r := e.a.playbookLong(t, inv, e.vars, membersPlaybook)
		r.mustSucceed(t, unjoinHosts...)
		for _, h := range unjoinHosts {
			if r.recap[h].Changed != 0 {
				t.Errorf("the second unjoin changed %d things on %s", r.recap[h].Changed, h)
			}
		}
		if !strings.Contains(r.out, "TASK [karmada_members : Karmada members | Take the sync mode of the Cluster]") {
			t.Error("the run did not look up pull-c's sync mode")
		}
		if t.Failed() {
			t.Logf("output:\n%s", r.out)
		}
	})

	testenv.Step(t, "a check run of joining them again lists them and joins nothing", func(t *testing.T) {
		inv := e.a.memberInventory(t, "members-rejoin-check.json", e.deployment(good, nil), e.handed)
		r := e.a.playbookWithin(t, longPlaybookTimeout, inv, e.vars, membersPlaybook, "--check", "--diff")
		r.mustSucceed(t, goodHosts...)
		for _, h := range unjoinHosts {
			if r.recap[h].Changed == 0 {
				t.Errorf("the check run says nothing would change on %s, which would join again", h)
			}
		}
		if r.recap[inventory.MemberHost(pushB)].Changed != 0 {
			t.Errorf("the check run says push-b, still joined, would change: %+v", r.recap[inventory.MemberHost(pushB)])
		}
		for _, name := range []string{pushA, pullC} {
			if _, ok, _ := e.cluster(name); ok {
				t.Errorf("the check run made Cluster %s", name)
			}
		}
		for _, check := range []struct {
			kubeconfig string
			what       []string
		}{
			{e.kubeconfigs[pushA], []string{"namespace", "karmada-cluster"}},
			{e.kubeconfigs[pullC], []string{"-n", "karmada-system", "deployment", "karmada-agent"}},
			{e.admin, []string{"namespace", "karmada-es-" + pullC}},
		} {
			if gone, left := e.gone(check.kubeconfig, check.what...); !gone {
				t.Errorf("the check run created %s: %s", strings.Join(check.what, " "), left)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", r.out)
		}
	})

	// Right after an unjoin (karmadactl's does not wait), the member's
	// karmada-cluster namespace may still be being deleted; nothing can be
	// created in it. Here a ConfigMap's finalizer holds it.
	testenv.Step(t, "joins again once the namespace an unjoin left is gone", func(t *testing.T) {
		kc := e.kubeconfigs[pushA]
		e.kubectlOK(t, kc, "create", "namespace", "karmada-cluster")
		e.kubectlOK(t, kc, "-n", "karmada-cluster", "create", "configmap", "hold")
		e.kubectlOK(t, kc, "-n", "karmada-cluster", "patch", "configmap", "hold", "--type=merge",
			"-p", `{"metadata":{"finalizers":["kao.test/hold"]}}`)
		e.kubectlOK(t, kc, "delete", "namespace", "karmada-cluster", "--wait=false")
		inv := e.a.memberInventory(t, "members-rejoin.json", e.deployment([]kaov1.MemberSpec{a}, nil), e.handed)

		// Held longer than the join waits: the join fails, saying why. The
		// same cluster given twice in one run (push-a and push-a2) joins at
		// most once: the second to claim it is refused.
		short := maps.Clone(e.varsMap)
		short["karmada_members_token_timeout"] = "3"
		twice := maps.Clone(e.handed)
		twice["push-a2"] = e.kubeconfigs[pushA]
		r := e.a.playbookLong(t, e.a.memberInventory(t, "members-rejoin-twice.json",
			e.deployment([]kaov1.MemberSpec{a, memberSpec("push-a2", kaov1.PushSyncMode)}, nil), twice),
			e.a.extraVars(t, "vars-short-wait.json", short), membersPlaybook)
		waited := regexp.MustCompile(`member (push-a|push-a2): its namespace karmada-cluster is still being deleted after 3 s`).FindStringSubmatch(r.out)
		refused := regexp.MustCompile(`member (push-a|push-a2): this cluster \(ID [-0-9a-f]+\) is also given as member (push-a|push-a2) of the same run`).FindStringSubmatch(r.out)
		if r.err == nil || waited == nil || refused == nil || waited[1] == refused[1] || refused[2] != waited[1] {
			t.Errorf("the join into a namespace being deleted, of one cluster given twice, did not fail with why:\n%s", r.out)
		}
		for _, name := range []string{pushA, "push-a2"} {
			if _, ok, _ := e.cluster(name); ok {
				t.Errorf("a Cluster %s was created although its join failed", name)
			}
		}

		// Released: the join waits for the namespace to go, then joins.
		e.kubectlOK(t, kc, "-n", "karmada-cluster", "patch", "configmap", "hold", "--type=merge",
			"-p", `{"metadata":{"finalizers":null}}`)
		r = e.a.playbookLong(t, inv, e.vars, membersPlaybook)
		r.mustSucceed(t, inventory.MemberHost(pushA))
		if cl, ok, _ := e.cluster(pushA); !ok {
			t.Error("push-a did not join again")
		} else if ready, why := cl.ready(); !ready {
			t.Errorf("Cluster push-a is not Ready: %s", why)
		}
	})
}
