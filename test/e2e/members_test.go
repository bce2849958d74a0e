package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// e2eRegistry is the offline image registry the Pull member's karmada-agent
// Deployment names; the member has no nodes, so nothing pulls from it.
const e2eRegistry = "registry.dc1.example:5000"

// waitForMembers waits until status.members satisfies ok.
func waitForMembers(t testing.TB, kd *kaov1.KarmadaDeployment, timeout time.Duration, what string, ok func(map[string]kaov1.MemberStatus) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		byName := map[string]kaov1.MemberStatus{}
		for _, m := range cur.Status.Members {
			byName[m.Name] = m
		}
		if ok(byName) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; status.members: %+v; lastRun: %+v", what, timeout, cur.Status.Members, cur.Status.LastRun)
		}
		time.Sleep(time.Second)
	}
}

// updateSpec changes the deployment's spec, retrying on conflicts with the
// operator's status writes.
func updateSpec(t testing.TB, kd *kaov1.KarmadaDeployment, change func(*kaov1.KarmadaDeploymentSpec)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := get(t, kd)
		change(&cur.Spec)
		return k8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// pullAgent plays the kubelet of the Pull member for its karmada-agent
// Deployment: it runs the bundle's karmada-agent with the Deployment's
// command line and the kubeconfig Secret the operator created in the member.
type pullAgent struct {
	kubectl          string
	memberKubeconfig string
	dir              string
	stop             func()
	current          func() int
	// earlier counts the restarts of the agents rolled out before.
	earlier int
	// started counts the agents started, one per rollout.
	started int
}

// start reads the Deployment and the Secret from the member and runs the
// agent they describe.
func (a *pullAgent) start(t *testing.T) (image string, kubeconfig []byte) {
	t.Helper()
	image, command, kubeconfig := members.ReadAgent(context.Background(), t, a.kubectl, a.memberKubeconfig)
	a.started++
	kc := filepath.Join(a.dir, fmt.Sprintf("agent-%d.kubeconfig", a.started))
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	agentBin := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmada-agent")
	a.stop, a.current = members.StartAgent(t, agentBin, filepath.Join(a.dir, fmt.Sprintf("karmada-agent-%d.log", a.started)),
		members.AgentArgs(t, command, kc, a.memberKubeconfig))
	return image, kubeconfig
}

// roll does what the member's kubelet does when the Deployment's Pod
// template changed: it stops the running agent and starts the new one.
func (a *pullAgent) roll(t *testing.T) []byte {
	t.Helper()
	a.earlier += a.current()
	a.stop()
	_, kubeconfig := a.start(t)
	return kubeconfig
}

// restarts is how often the test's kubelet restarted an agent that exited.
func (a *pullAgent) restarts() int { return a.earlier + a.current() }

// template reads an annotation of the agent Deployment's Pod template.
func (a *pullAgent) template(t *testing.T, annotation string) string {
	t.Helper()
	out, err := testenv.Kubectl(context.Background(), a.kubectl, a.memberKubeconfig, "-n", "karmada-system", "get", "deployment", "karmada-agent",
		"-o", "jsonpath={.spec.template.metadata.annotations."+strings.ReplaceAll(annotation, ".", "\\.")+"}")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// joinMembers starts four real member clusters on the test hosts' gateway,
// joins three in Push mode and one in Pull mode through the operator, plays
// the Pull member's kubelet, propagates a Deployment, and unjoins one Push
// member by removing it from the spec. It returns the Pull member's agent
// and the kubeconfig files of the two Push members still joined.
func joinMembers(t *testing.T, kd *kaov1.KarmadaDeployment, dc *hosts.Cluster, kubectl func(args ...string) string) (*pullAgent, []string) {
	t.Helper()
	ctx := context.Background()
	clusters := members.Start(t, 4, members.Options{Address: dc.Gateway()})
	names := []string{"push-a", "push-b", "push-c", "pull-d"}
	data := map[string][]byte{}
	for i, c := range clusters {
		data[names[i]] = c.Kubeconfig
	}
	createSecret(t, kd.Namespace, "member-kubeconfigs", data)
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Artifacts.ImageRegistry = e2eRegistry
		for i, n := range names {
			mode := kaov1.PushSyncMode
			if i == 3 {
				mode = kaov1.PullSyncMode
			}
			s.Members = append(s.Members, kaov1.MemberSpec{Name: n, SyncMode: mode, Region: "dc1",
				KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "member-kubeconfigs", Key: n}})
		}
	})
	joined := waitForRun(t, kd, runWait)
	if joined.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run joining the members failed: %+v", joined.Status.LastRun)
	}
	waitForMembers(t, kd, 3*time.Minute, "the Push members joined and Ready, the Pull member waiting for its agent", func(m map[string]kaov1.MemberStatus) bool {
		for _, n := range names[:3] {
			if !m[n].Joined || !m[n].Ready || m[n].SyncMode != kaov1.PushSyncMode {
				return false
			}
		}
		return !m["pull-d"].Joined && strings.Contains(m["pull-d"].Message, "karmada-agent")
	})
	waiting := waitForCondition(t, kd, kaov1.MembersReadyCondition, metav1.ConditionFalse, kaov1.MembersNotReadyReason, time.Minute)
	if waiting.Status.ReadyMembers != "3/4" {
		t.Errorf("readyMembers %q while the Pull agent is not running, want 3/4", waiting.Status.ReadyMembers)
	}
	if c := meta.FindStatusCondition(waiting.Status.Conditions, kaov1.ReadyCondition); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Ready while a member is not: %+v", c)
	}

	// Play the Pull member's kubelet: run karmada-agent with the Deployment's
	// command line and the kubeconfig Secret the operator created in the member.
	kubectlBin := filepath.Join(env.AssetsDir, "kubectl")
	dir := t.TempDir()
	pullKubeconfig := filepath.Join(dir, "pull-d.kubeconfig")
	if err := os.WriteFile(pullKubeconfig, clusters[3].Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := &pullAgent{kubectl: kubectlBin, memberKubeconfig: pullKubeconfig, dir: dir}
	image, agentKubeconfig := agent.start(t)
	if want := e2eRegistry + "/karmada/karmada-agent:v1.18.1"; image != want {
		t.Errorf("karmada-agent's image is %q, want %q", image, want)
	}
	if strings.Contains(string(agentKubeconfig), "admin-client") || strings.Contains(string(agentKubeconfig), "system:masters") {
		t.Error("the Pull member was handed an administrator's kubeconfig")
	}
	all := waitForCondition(t, kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.AllMembersReadyReason, 3*time.Minute)
	if all.Status.ReadyMembers != "4/4" {
		t.Errorf("readyMembers %q, want 4/4", all.Status.ReadyMembers)
	}
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, time.Minute)
	if out := kubectl("get", "cluster", "pull-d", "-o", "jsonpath={.spec.syncMode}"); out != "Pull" {
		t.Errorf("Cluster pull-d has syncMode %q", out)
	}

	// A Deployment with a PropagationPolicy reaches the member it names.
	manifest := filepath.Join(dir, "propagate.yaml")
	if err := os.WriteFile(manifest, []byte(propagation("e2e-apps", "push-b")), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	pushB := filepath.Join(dir, "push-b.kubeconfig")
	if err := os.WriteFile(pushB, clusters[1].Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := testenv.Kubectl(ctx, kubectlBin, pushB, "-n", "e2e-apps", "get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if err == nil && out == "registry.dc1.example:5000/web:1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the propagated Deployment did not reach push-b: %v %s", err, out)
		}
		time.Sleep(2 * time.Second)
	}

	// Removing a member from the spec unjoins it and cleans it up; the
	// others stay joined.
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Members = slices.DeleteFunc(s.Members, func(m kaov1.MemberSpec) bool { return m.Name == "push-a" })
	})
	left := waitForRun(t, kd, runWait)
	if left.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run unjoining push-a failed: %+v", left.Status.LastRun)
	}
	// Only spec.members changed: the members playbook ran, not the install.
	if pb := left.Status.LastRun.Playbook; pb != "members.yml" {
		t.Errorf("a change of spec.members alone ran %s, want members.yml", pb)
	}
	waitForMembers(t, kd, 2*time.Minute, "push-a gone from status, the others Ready", func(m map[string]kaov1.MemberStatus) bool {
		_, still := m["push-a"]
		return !still && m["push-b"].Ready && m["push-c"].Ready && m["pull-d"].Ready
	})
	if out := kubectl("get", "clusters", "-o", "name"); strings.Contains(out, "push-a") {
		t.Errorf("Cluster push-a is still in Karmada: %s", out)
	}
	pushA := filepath.Join(dir, "push-a.kubeconfig")
	if err := os.WriteFile(pushA, clusters[0].Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _ := testenv.Kubectl(ctx, kubectlBin, pushA, "get", "serviceaccounts", "-A", "-o", "name"); strings.Contains(out, "karmada-push-a") || strings.Contains(out, "karmada-impersonator") {
		t.Errorf("the unjoin left kao's service accounts in push-a: %s", out)
	}
	if get(t, kd).Status.ReadyMembers != "3/3" {
		t.Errorf("readyMembers after the unjoin: %q, want 3/3", get(t, kd).Status.ReadyMembers)
	}
	pushC := filepath.Join(dir, "push-c.kubeconfig")
	if err := os.WriteFile(pushC, clusters[2].Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return agent, []string{pushB, pushC}
}

// checkAccessRevoked checks that Karmada's access left the members when
// their control plane was deleted: no karmada-cluster namespace (with the
// service accounts and tokens Karmada reached a Push member with) and no
// karmada-agent or its kubeconfig (its credentials to Karmada) in the Pull
// member.
func checkAccessRevoked(t *testing.T, pushKubeconfigs []string, agent *pullAgent) {
	t.Helper()
	ctx := context.Background()
	for _, kc := range pushKubeconfigs {
		out, err := testenv.Kubectl(ctx, agent.kubectl, kc, "get", "namespace", "karmada-cluster", "--ignore-not-found", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("after the deletion a Push member keeps %q (%v): Karmada's access was not revoked", out, err)
		}
	}
	out, err := testenv.Kubectl(ctx, agent.kubectl, agent.memberKubeconfig, "-n", "karmada-system", "get", "deployment/karmada-agent", "secret/karmada-kubeconfig",
		"--ignore-not-found", "-o", "name")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("after the deletion the Pull member keeps %q (%v): karmada-agent's access was not revoked", out, err)
	}
}

// propagation is a namespace, a Deployment web in it (image
// registry.dc1.example:5000/web:1) and a PropagationPolicy that places it
// on the member cluster named.
func propagation(ns, cluster string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: %[1]s
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.dc1.example:5000/web:1}]
---
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: web
  namespace: %[1]s
spec:
  resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]
  placement:
    clusterAffinity: {clusterNames: [%[2]s]}
`, ns, cluster)
}
