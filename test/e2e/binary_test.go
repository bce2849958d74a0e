package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// binaryDeployment describes a Binary control plane on the test hosts: etcd on
// all three, karmada-apiserver on the first two behind an endpoint, the other
// components on the last two.
func binaryDeployment(ns, name, sshSecret string, hs []hosts.Host) *kaov1.KarmadaDeployment {
	roles := [][]kaov1.HostRole{
		{kaov1.EtcdRole, kaov1.APIServerRole},
		{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole},
		{kaov1.EtcdRole, kaov1.ControlPlaneRole},
	}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: "v1.18.1",
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: sshSecret, Key: "known_hosts"},
			},
			APIServer: kaov1.APIServerSpec{Endpoint: hs[0].Address + ":5443"},
			Etcd:      kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
	}
	for i, h := range hs {
		kd.Spec.Hosts = append(kd.Spec.Hosts, kaov1.Host{Name: h.Name, Address: h.Address, Port: int32(h.Port), User: h.User, Roles: roles[i%len(roles)]})
	}
	return kd
}

// rerun makes the operator run the install playbook again by starting a new
// generation: pausing and unpausing changes the spec and nothing else.
func rerun(t testing.TB, kd *kaov1.KarmadaDeployment) *kaov1.KarmadaDeployment {
	t.Helper()
	for _, paused := range []bool{true, false} {
		// The operator writes status all the time: retry on conflicts.
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := get(t, kd)
			cur.Spec.Paused = paused
			return k8s.Update(context.Background(), cur)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return waitForRun(t, kd, runWait)
}

// waitForCondition waits until a condition has the status and reason.
func waitForCondition(t testing.TB, kd *kaov1.KarmadaDeployment, ct string, status metav1.ConditionStatus, reason string, timeout time.Duration) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if c := meta.FindStatusCondition(cur.Status.Conditions, ct); c != nil && c.Status == status && c.Reason == reason {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become %s/%s within %s: %+v", ct, status, reason, timeout, meta.FindStatusCondition(cur.Status.Conditions, ct))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitForComponent waits until status.components reports the component ready.
func waitForComponent(t testing.TB, kd *kaov1.KarmadaDeployment, name string, timeout time.Duration) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		for _, c := range cur.Status.Components {
			if c.Name == name && c.Ready {
				return cur
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("component %s is not ready after %s: %+v", name, timeout, cur.Status.Components)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// wrongKnownHosts pins the first host's address to the second host's keys.
func wrongKnownHosts(knownHosts []byte, first, second string) []byte {
	wrong := []string{}
	for _, l := range strings.Split(strings.TrimSpace(string(knownHosts)), "\n") {
		fields := strings.Fields(l)
		if len(fields) != 3 {
			continue
		}
		patterns := strings.Split(fields[0], ",")
		if slices.Contains(patterns, first) {
			continue
		}
		wrong = append(wrong, l)
		if slices.Contains(patterns, second) {
			wrong = append(wrong, first+" "+fields[1]+" "+fields[2])
		}
	}
	return []byte(strings.Join(wrong, "\n") + "\n")
}

// TestBinaryInstall installs a Binary control plane on three SSH hosts with
// pinned host keys and uses it as an SRE would: health in status, a
// powered-off etcd host, member clusters, an etcd backup and restore with the
// idempotent re-run after it, the addons, a changed host key, a certificate
// rotation with user roles, deletion.
func TestBinaryInstall(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	dc := hosts.Start(t, 3)
	ctx := context.Background()
	ns := newNamespace(t)
	stateDir := startOperator(t, ns)

	sshData, err := dc.SSHSecretData()
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "dc-ssh", sshData)
	key, knownHosts := sshData["id_ed25519"], sshData["known_hosts"]
	nodes := dc.Hosts()

	kd := binaryDeployment(ns, "dc", "dc-ssh", nodes)
	// The Pull member's agent image comes from the site's registry. Set
	// from the start, it makes the later join a change of members only, run
	// by members.yml: a control-plane change and a join in one install.yml
	// run is TestReplaceADeadHost's first run.
	kd.Spec.Artifacts.ImageRegistry = e2eRegistry
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	// How long an install takes is measured by the benchmarks, not here:
	// runWait only catches a run that never ends.
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	for _, h := range done.Status.LastRun.Hosts {
		if h.Name != "localhost" && (h.OK < 4 || h.Failed != 0 || h.Unreachable != 0) {
			t.Errorf("host %s did not run the install: %+v", h.Name, h)
		}
	}

	// Health comes from probing etcd, not from the playbook.
	healthy := waitForCondition(t, kd, kaov1.EtcdHealthyCondition, metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason, time.Minute)
	if e := healthy.Status.Etcd; e == nil || e.Healthy != "3/3" || e.Leader == "" || len(e.Members) != 3 {
		t.Errorf("status.etcd does not show three healthy members and a leader: %+v", e)
	}
	if len(healthy.Status.Certificates) < 10 {
		t.Errorf("status.certificates lists %d certificates", len(healthy.Status.Certificates))
	}
	waitForCondition(t, kd, kaov1.CertificatesValidCondition, metav1.ConditionTrue, kaov1.CertificatesCurrentReason, time.Minute)

	// karmada-apiserver answers /readyz on both hosts, and the exported admin
	// kubeconfig reaches it through the endpoint, as a user would.
	probed := waitForComponent(t, kd, "karmada-apiserver", time.Minute)
	if ref := probed.Status.KubeconfigSecretRef; ref == nil || probed.Status.Endpoint != nodes[0].Address+":5443" {
		t.Fatalf("no exported kubeconfig or endpoint in status: %+v %q", ref, probed.Status.Endpoint)
	}
	// Prometheus sees the same: the run, etcd, the certificates, the components.
	checkInstallMetrics(t, kd)
	kubeconfigSecret := &corev1.Secret{}
	ref := probed.Status.KubeconfigSecretRef
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, kubeconfigSecret); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "karmada.kubeconfig")
	if err := os.WriteFile(kubeconfig, kubeconfigSecret.Data[ref.Key], 0o600); err != nil {
		t.Fatal(err)
	}
	kubectlBin := filepath.Join(env.AssetsDir, "kubectl")
	out, err := testenv.Kubectl(ctx, kubectlBin, kubeconfig, "get", "--raw", "/readyz")
	if err != nil || strings.TrimSpace(out) != "ok" {
		t.Fatalf("kubectl get --raw /readyz with the exported kubeconfig: %v: %s", err, out)
	}
	// Karmada's APIs are served: the CRDs and the Cluster API through
	// karmada-aggregated-apiserver.
	kubectl := func(args ...string) string {
		t.Helper()
		return testenv.MustKubectl(ctx, t, kubectlBin, kubeconfig, args...)
	}
	if groups := kubectl("api-resources", "-o", "name"); !strings.Contains(groups, "propagationpolicies.policy.karmada.io") ||
		!strings.Contains(groups, "clusters.cluster.karmada.io") {
		t.Errorf("api-resources lacks Karmada's APIs:\n%s", groups)
	}
	if clusters := kubectl("get", "clusters"); !strings.Contains(clusters, "No resources found") {
		t.Errorf("kubectl get clusters through the aggregated API: %s", clusters)
	}

	// Every component is probed from the operator's side, and Ready sums it up.
	cpReady := waitForCondition(t, kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionTrue, kaov1.ComponentsHealthyReason, 2*time.Minute)
	wantComponents := map[string][]string{
		"etcd":                         {nodes[0].Name, nodes[1].Name, nodes[2].Name},
		"karmada-apiserver":            {nodes[0].Name, nodes[1].Name},
		"karmada-aggregated-apiserver": {nodes[0].Name, nodes[1].Name},
		"kube-controller-manager":      {nodes[1].Name, nodes[2].Name},
		"karmada-controller-manager":   {nodes[1].Name, nodes[2].Name},
		"karmada-scheduler":            {nodes[1].Name, nodes[2].Name},
		"karmada-webhook":              {nodes[1].Name, nodes[2].Name},
	}
	if len(cpReady.Status.Components) != len(wantComponents) {
		t.Errorf("status.components lists %d components, want %d: %+v", len(cpReady.Status.Components), len(wantComponents), cpReady.Status.Components)
	}
	for _, c := range cpReady.Status.Components {
		if want, ok := wantComponents[c.Name]; !ok || !slices.Equal(c.Hosts, want) || !c.Ready || c.Version == "" {
			t.Errorf("component %+v: want hosts %v, ready, with a version", c, want)
		}
	}
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, time.Minute)

	// karmada-webhook judges Karmada's objects: an invalid PropagationPolicy
	// is refused with its reason, a valid one is admitted.
	kubectl("create", "namespace", "e2e-policies")
	policy := func(name, selectorNamespace string) string {
		p := filepath.Join(t.TempDir(), name+".yaml")
		doc := "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata:\n  name: " + name +
			"\n  namespace: e2e-policies\nspec:\n  resourceSelectors:\n    - apiVersion: apps/v1\n      kind: Deployment\n      name: web\n"
		if selectorNamespace != "" {
			doc += "      namespace: " + selectorNamespace + "\n"
		}
		doc += "  placement:\n    clusterAffinity:\n      clusterNames: [member1]\n"
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out, err = testenv.Kubectl(ctx, kubectlBin, kubeconfig, "create", "-f", policy("invalid", "elsewhere"))
	if err == nil || !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("an invalid PropagationPolicy was not refused by karmada-webhook: %v: %s", err, out)
	}
	kubectl("create", "-f", policy("valid", ""))

	// Power off one etcd host: etcd keeps quorum and status says what is wrong.
	if err := dc.Stop(ctx, nodes[2].Name); err != nil {
		t.Fatal(err)
	}
	degraded := waitForCondition(t, kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason, 2*time.Minute)
	c := meta.FindStatusCondition(degraded.Status.Conditions, kaov1.EtcdHealthyCondition)
	if !strings.Contains(c.Message, "2/3 members healthy") || !strings.Contains(c.Message, nodes[2].Name) {
		t.Errorf("EtcdHealthy does not say which member is down: %q", c.Message)
	}
	// The host also ran karmada-webhook: the control plane is degraded, and
	// says where.
	down := waitForCondition(t, kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionFalse, kaov1.ComponentsUnhealthyReason, 2*time.Minute)
	if c := meta.FindStatusCondition(down.Status.Conditions, kaov1.ControlPlaneReadyCondition); !strings.Contains(c.Message, "karmada-webhook") || !strings.Contains(c.Message, nodes[2].Name) {
		t.Errorf("ControlPlaneReady does not name the webhook on %s: %q", nodes[2].Name, c.Message)
	}
	if r := meta.FindStatusCondition(down.Status.Conditions, kaov1.ReadyCondition); r == nil || r.Status != metav1.ConditionFalse {
		t.Errorf("Ready with a host down: %+v", r)
	}
	// The API keeps serving, reads and writes: the operator took the dead
	// host's webhook out of karmada-apiserver's routing, so every admission
	// call reaches the live one.
	if out := kubectl("get", "--raw", "/readyz"); strings.TrimSpace(out) != "ok" {
		t.Errorf("/readyz with one etcd host down: %s", out)
	}
	kubectl("get", "propagationpolicies", "-A")
	for i := range 6 {
		kubectl("create", "--dry-run=server", "-f", policy(fmt.Sprintf("during-outage-%d", i), ""))
	}
	if err := dc.Start(ctx, nodes[2].Name); err != nil {
		t.Fatal(err)
	}
	waitForCondition(t, kd, kaov1.EtcdHealthyCondition, metav1.ConditionTrue, kaov1.EtcdMembersHealthyReason, 3*time.Minute)
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	// Members: three Push and one Pull member join through the operator;
	// status.members and MembersReady follow Karmada's Cluster objects.
	agent, pushMembers := joinMembers(t, kd, dc, kubectl)

	// etcd: back up, lose 200 Karmada objects, restore them
	// (restore_test.go), on this control plane with its members joined: the
	// step costs the restore, not a second install, and shows the members
	// Ready again after it.
	t.Run("EtcdBackup and EtcdRestore", func(t *testing.T) { backupAndRestore(t, dc, kd) })

	// Karmada's addons, with an estimator per member, enabled by spec
	// (addons_test.go); the certificate step's first run disables them.
	// This step and the certificate step are each a run of the full
	// install, in the long tier (`make check-all`).
	t.Run("Addons", func(t *testing.T) {
		testenv.LongStep(t)
		addonsBySpec(t, dc, kd, kubectl)
	})

	// A changed host key is refused, never trusted: the run fails naming the host.
	sshSecret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dc-ssh"}, sshSecret); err != nil {
		t.Fatal(err)
	}
	sshSecret.Data["known_hosts"] = wrongKnownHosts(knownHosts, nodes[0].Address, nodes[1].Address)
	if err := k8s.Update(ctx, sshSecret); err != nil {
		t.Fatal(err)
	}
	beforeRefusal := readFailureMetrics(t, kd)
	refusedRun := rerun(t, kd)
	last := refusedRun.Status.LastRun
	if last.Result != kaov1.RunFailed {
		t.Fatalf("a changed host key was accepted: %+v", last)
	}
	refused := false
	for _, f := range last.FailedTasks {
		refused = refused || f.Host == nodes[0].Name && f.Unreachable && strings.Contains(f.Message, "Host key verification failed")
		if f.Host != nodes[0].Name {
			t.Errorf("only %s has a wrong key, but %s failed: %+v", nodes[0].Name, f.Host, f)
		}
	}
	if !refused {
		t.Errorf("the failure does not say the host key was refused: %+v", last.FailedTasks)
	}
	if c := meta.FindStatusCondition(refusedRun.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.HostUnreachableReason {
		t.Errorf("PlaybookSucceeded does not say a host was unreachable: %+v", c)
	}
	checkFailureMetrics(t, kd, beforeRefusal)
	// known_hosts restored, the next run reaches every host: the first run
	// of the certificate step below, which starts at once, or under `make
	// check` (the step in the long tier) the deletion's run, which must
	// remove the services from every host.
	sshSecret.Data["known_hosts"] = knownHosts
	if err := k8s.Update(ctx, sshSecret); err != nil {
		t.Fatal(err)
	}

	// Certificates are rotated on request, into short-lived ones, and user
	// roles run around the install, while karmada-apiserver keeps answering
	// (certificates_test.go). Its first run is the one after the host key
	// was fixed.
	t.Run("Certificate rotation and user roles", func(t *testing.T) {
		testenv.LongStep(t)
		rotateCertificates(t, dc, kd, agent)
	})
	t.Logf("the Pull member's karmada-agent was restarted %d times by the test's kubelet", agent.restarts())

	// No byte of the SSH key or of any private key kao issued appears anywhere
	// kao writes: the status and Events of the deployment, its backups and
	// restores, the operator's log, the state directory.
	final := get(t, kd)
	pkiSecret := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dc-pki"}, pkiSecret); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"SSH key": strings.Split(strings.TrimSpace(string(key)), "\n")[1]}
	for name, data := range pkiSecret.Data {
		if strings.HasSuffix(name, ".key") {
			secrets[name] = strings.Split(strings.TrimSpace(string(data)), "\n")[1]
		}
	}
	status, _ := json.Marshal(final.Status)
	evs, _ := json.Marshal(deploymentEvents(t, kd))
	backups, restores, events := &kaov1.EtcdBackupList{}, &kaov1.EtcdRestoreList{}, &eventsv1.EventList{}
	for _, l := range []client.ObjectList{backups, restores, events} {
		if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	etcdEvents := slices.DeleteFunc(events.Items, func(e eventsv1.Event) bool {
		return e.Regarding.Kind != "EtcdBackup" && e.Regarding.Kind != "EtcdRestore"
	})
	if len(backups.Items) == 0 || len(restores.Items) == 0 || len(etcdEvents) == 0 {
		t.Errorf("nothing to scan of the backup and restore: %d EtcdBackups, %d EtcdRestores, %d Events",
			len(backups.Items), len(restores.Items), len(etcdEvents))
	}
	backupStatus, _ := json.Marshal(backups)
	restoreStatus, _ := json.Marshal(restores)
	etcdEvs, _ := json.Marshal(etcdEvents)
	places := map[string]string{"status": string(status), "Events": string(evs), "operator log": operatorLog.String(),
		"EtcdBackups": string(backupStatus), "EtcdRestores": string(restoreStatus), "EtcdBackup and EtcdRestore Events": string(etcdEvs)}
	_ = filepath.Walk(stateDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(path)
			places[path] = string(data)
		}
		return nil
	})
	for where, text := range places {
		for what, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s leaked into %s", what, where)
			}
		}
	}

	// Deletion stops and removes the services; etcd data stays (no purge asked).
	if err := k8s.Delete(ctx, final); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment was not released: %+v", get(t, kd).Status.LastRun)
		}
		time.Sleep(time.Second)
	}
	checkAccessRevoked(t, pushMembers, agent)
	for _, n := range nodes {
		out, _ := dc.Run(ctx, n.Name, "systemctl is-active karmada-etcd karmada-apiserver karmada-aggregated-apiserver kube-controller-manager karmada-controller-manager karmada-scheduler karmada-webhook; ls /etc/systemd/system/karmada-* /etc/systemd/system/kube-* 2>/dev/null && echo unit-left; test -d /var/lib/karmada-etcd && echo data-kept")
		if strings.Contains(out, "unit-left") || !strings.Contains(out, "inactive") || !strings.Contains(out, "data-kept") {
			t.Errorf("after deletion %s shows: %q (want the service gone and the data kept)", n.Name, out)
		}
		// The host is free for another deployment; the kept data still
		// names this one (kao.io/take-over-from reuses it).
		out, _ = dc.Run(ctx, n.Name, "test -e /etc/kao/owner && echo host-claimed; grep -l "+string(final.UID)+" /var/lib/karmada-etcd.kao-owner")
		if strings.Contains(out, "host-claimed") || !strings.Contains(out, "/var/lib/karmada-etcd.kao-owner") {
			t.Errorf("after deletion %s's owner markers: %q (want the host released, the kept data still marked)", n.Name, out)
		}
	}
}
