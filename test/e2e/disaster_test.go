package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
	"github.com/kao-io/kao/test/readiness"
)

// TestReplaceADeadHost loses a host for good and replaces it, as an SRE of
// a bare-metal data centre would (docs/disaster-recovery.md): three hosts
// each run an etcd member and karmada-apiserver, the third alone runs the
// controllers and the webhook (the only controlPlane host), a Push member
// is joined, and the third host, which leads etcd, is powered off and never
// comes back. kao must say which components have no instance left and what
// stops until the replacement runs them (condition and Event). With a writer creating objects through
// karmada-apiserver and a load balancer's readiness checks on the other two
// API servers running, one spec edit removes the dead host, names it in
// spec.lostHosts and adds a fourth. The run must never connect to the dead
// host; the survivors remove its etcd member while they keep the quorum; the
// new host joins as a member; every API server's etcd servers follow; no
// acknowledged write is lost; and stock karmadactl and propagation work
// afterwards.
//
// Then the whole site is lost and the plane is rebuilt on a fifth host from
// a backup, under the CA exported from the old plane (rebuildElsewhere in
// site_test.go): the plane and its members are the ones that scenario
// needs, and building them again would cost a second install.
func TestReplaceADeadHost(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	dc := hosts.Start(t, 5)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	nodes := dc.Hosts()
	dead, replacement := nodes[2], nodes[3]
	createSSHSecret(t, ns, "dr-ssh", dc)
	member := members.Start(t, 1, members.Options{Address: dc.Gateway(), Lean: true})[0]
	createSecret(t, ns, "dr-members", map[string][]byte{"edge": member.Kubeconfig})

	everything := []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	kd := binaryDeployment(ns, "dr", "dr-ssh", nodes[:3])
	for i := range kd.Spec.Hosts {
		kd.Spec.Hosts[i].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole}
	}
	kd.Spec.Hosts[2].Roles = everything
	kd.Spec.Members = []kaov1.MemberSpec{edgeMember()}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	if done := waitForRun(t, kd, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	installed := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	kubeconfig := writeKarmadaKubeconfig(t, installed)

	// The host that dies leads etcd: the survivors must elect a leader too.
	moveEtcdLeader(t, dc, nodes[:3], dead)
	waitFor(t, time.Minute, "status.etcd to name "+dead.Name+" the leader", func() bool {
		e := get(t, kd).Status.Etcd
		return e != nil && e.Leader == dead.Name
	})

	w := startObjectWriter(t, kd)
	cred, roots := proberCredential(t, readPKISecret(t, kd))
	prober := readiness.Start([]string{"https://" + nodes[0].Address + ":5443", "https://" + nodes[1].Address + ":5443"},
		cred, roots, 200*time.Millisecond)
	defer prober.Stop()

	// It dies silently, as a machine losing power: its peers and clients
	// hear no end of their connections (hosts.Cluster.Fail), only silence.
	if err := dc.Fail(ctx, dead.Name); err != nil {
		t.Fatal(err)
	}
	died := time.Now()
	degraded := waitForCondition(t, kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdMembersUnhealthyReason, 2*time.Minute)
	t.Logf("status after %s died: EtcdHealthy %q", dead.Name, conditionMessage(degraded, kaov1.EtcdHealthyCondition))
	waitFor(t, time.Minute, "a new etcd leader among the survivors", func() bool {
		e := get(t, kd).Status.Etcd
		return e != nil && e.Leader != "" && e.Leader != dead.Name
	})
	// It ran the only controllers and webhook: kao says that none answers
	// anywhere and what stops until a host with their role runs them.
	const controllersGone = "no instance of kube-controller-manager, karmada-controller-manager, karmada-scheduler, karmada-webhook answers on any host: "
	waitFor(t, 2*time.Minute, "ControlPlaneReady to say that no controller or webhook answers", func() bool {
		c := meta.FindStatusCondition(get(t, kd).Status.Conditions, kaov1.ControlPlaneReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kaov1.ComponentsUnavailableReason && strings.HasPrefix(c.Message, controllersGone)
	})
	waitFor(t, 30*time.Second, "a Warning Event saying what stops without the controllers", func() bool {
		return slices.ContainsFunc(deploymentEvents(t, kd), func(e eventsv1.Event) bool {
			return e.Type == "Warning" && e.Reason == kaov1.ComponentsUnavailableReason && strings.HasPrefix(e.Note, controllersGone) &&
				strings.Contains(e.Note, "nothing propagates to the members")
		})
	})
	t.Logf("status after %s died: ControlPlaneReady %q", dead.Name, conditionMessage(get(t, kd), kaov1.ControlPlaneReadyCondition))

	// One edit: the dead host out (lost), its replacement in.
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Hosts = slices.DeleteFunc(s.Hosts, func(h kaov1.Host) bool { return h.Name == dead.Name })
		s.Hosts = append(s.Hosts, kaov1.Host{Name: replacement.Name, Address: replacement.Address, Port: int32(replacement.Port),
			User: replacement.User, Roles: everything})
		s.LostHosts = []string{dead.Name}
	})
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run replacing %s failed: %+v", dead.Name, done.Status.LastRun)
	}
	for _, h := range done.Status.LastRun.Hosts {
		if h.Name == dead.Name {
			t.Errorf("the run reached for the lost host: %+v", h)
		}
	}
	survivors := []hosts.Host{nodes[0], nodes[1], replacement}
	waitForEtcdMembers(t, kd, survivors, 3*time.Minute)
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("%s replaced: Ready %s after it died (the run took %s)", dead.Name, time.Since(died).Round(time.Second),
		done.Status.LastRun.EndTime.Sub(done.Status.LastRun.StartTime.Time).Round(time.Second))
	waitFor(t, 30*time.Second, "an Event saying the components answer again", func() bool {
		return slices.ContainsFunc(deploymentEvents(t, kd), func(e eventsv1.Event) bool {
			return e.Type == "Normal" && e.Reason == "ComponentsAvailable"
		})
	})

	// Every component runs on the replacement (the controllers only there),
	// none on the dead host; every API server reads etcd from the new
	// members.
	for _, c := range ready.Status.Components {
		if slices.Contains(c.Hosts, dead.Name) || !slices.Contains(c.Hosts, replacement.Name) || !c.Ready {
			t.Errorf("component %+v: want it ready on %s and not on %s", c, replacement.Name, dead.Name)
		}
	}
	for _, h := range survivors {
		for _, unit := range []string{"karmada-apiserver", "karmada-aggregated-apiserver"} {
			out, err := dc.Run(ctx, h.Name, "grep -o -- '--etcd-servers=[^ ]*' /etc/systemd/system/"+unit+".service")
			if err != nil || !strings.Contains(out, replacement.Address+":2379") || strings.Contains(out, dead.Address+":2379") {
				t.Errorf("%s's %s: %q (%v); want the replacement's etcd and not the dead host's", h.Name, unit, strings.TrimSpace(out), err)
			}
		}
	}

	// Karmada's routing to the webhook and the aggregated API (kao's
	// EndpointSlices) names the replacement and no longer the dead host,
	// and the API servers' serving certificates name the replacement and
	// no longer the dead host.
	routing := testenv.MustKubectl(ctx, t, filepath.Join(env.AssetsDir, "kubectl"), kubeconfig, "get", "endpointslices", "-A",
		"-l", "endpointslice.kubernetes.io/managed-by=kao.io",
		"-o", `jsonpath={range .items[*]}{.metadata.name}={.endpoints[*].addresses[*]}{"\n"}{end}`)
	routes := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(routing), "\n") {
		name, addrs, _ := strings.Cut(line, "=")
		routes[name] = strings.Fields(addrs)
	}
	for _, name := range []string{"karmada-aggregated-apiserver-hosts", "karmada-webhook-hosts"} {
		addrs, ok := routes[name]
		if !ok || !slices.Contains(addrs, replacement.Address) || slices.Contains(addrs, dead.Address) {
			t.Errorf("kao's EndpointSlice %s routes to %v: want %s in it and never %s\n%s", name, addrs, replacement.Address, dead.Address, routing)
		}
	}
	rebuiltPKI := readPKISecret(t, kd)
	for _, name := range []string{pki.APIServerServer, pki.AggregatedAPIServerServer} {
		c := parseCert(t, rebuiltPKI, name)
		names := func(h hosts.Host) bool {
			return slices.ContainsFunc(c.IPAddresses, func(ip net.IP) bool { return ip.String() == h.Address })
		}
		if !names(replacement) || names(dead) {
			t.Errorf("%s names %v: want the replacement %s and not the dead host %s", name, c.IPAddresses, replacement.Address, dead.Address)
		}
		t.Logf("%s names %v after the replacement", name, c.IPAddresses)
	}

	acked, failed := w.stop()
	t.Logf("karmada-apiserver acknowledged %d ConfigMaps; %d creates failed while a host died and was replaced", len(acked), failed)
	w.checkNothingLost(t, acked, 20)
	report := prober.Stop()
	t.Logf("readyz of the two surviving API servers: %s; rounds with neither in a load balancer's rotation: %d",
		report, len(report.Outages()))

	// Stock clients: karmadactl sees the member Ready, and a Deployment
	// propagates to it.
	karmadactl := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmadactl")
	out, err := exec.CommandContext(ctx, karmadactl, "--kubeconfig", kubeconfig, "get", "clusters").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "edge") || !strings.Contains(string(out), "True") {
		t.Errorf("karmadactl get clusters after the replacement: %v\n%s", err, out)
	}
	edge := propagateToEdge(t, kubeconfig, member)

	testenv.Step(t, "the whole site is lost: the plane is rebuilt on a new host from a backup", func(t *testing.T) {
		rebuildElsewhere(t, dc, kd, siteLoss{site: nodes[4], name: "site2", sshSecret: "dr-ssh"}, edge)
	})
}

// propagateToEdge applies a Deployment and its PropagationPolicy to the
// member edge through karmadaKubeconfig, waits for the Deployment in the
// member, and returns the member's kubeconfig file.
func propagateToEdge(t *testing.T, karmadaKubeconfig string, edge *members.Member) string {
	t.Helper()
	ctx := context.Background()
	kubectlBin := filepath.Join(env.AssetsDir, "kubectl")
	manifest := filepath.Join(t.TempDir(), "propagate.yaml")
	if err := os.WriteFile(manifest, []byte(propagation("dr-apps", "edge")), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(ctx, t, kubectlBin, karmadaKubeconfig, "apply", "-f", manifest)
	kubeconfig := filepath.Join(t.TempDir(), "edge.kubeconfig")
	if err := os.WriteFile(kubeconfig, edge.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the propagated Deployment in the member", func() bool {
		out, err := testenv.Kubectl(ctx, kubectlBin, kubeconfig, "-n", "dr-apps", "get", "deployment", "web", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "deployment.apps/web"
	})
	return kubeconfig
}

// edgeMember is the Push member edge, whose kubeconfig is in Secret
// dr-members.
func edgeMember() kaov1.MemberSpec {
	return kaov1.MemberSpec{Name: "edge", SyncMode: kaov1.PushSyncMode,
		KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "dr-members", Key: "edge"}}
}

// moveEtcdLeader makes leader lead the etcd cluster of the hosts hs, from
// the first of them, with the health-check client certificate kao installs.
func moveEtcdLeader(t *testing.T, dc *hosts.Cluster, hs []hosts.Host, leader hosts.Host) {
	t.Helper()
	var endpoints []string
	for _, h := range hs {
		endpoints = append(endpoints, "https://"+h.Address+":2379")
	}
	script := `set -e
E="--endpoints=` + strings.Join(endpoints, ",") + ` --cacert=/etc/karmada/pki/etcd/ca.crt --cert=/etc/karmada/pki/etcd/healthcheck-client.crt --key=/etc/karmada/pki/etcd/healthcheck-client.key"
id=$(/usr/local/bin/etcdctl $E member list | awk -F', ' '$3 == "` + leader.Name + `" {print $1}')
test -n "$id"
/usr/local/bin/etcdctl $E endpoint status | grep -q "` + leader.Address + `:2379, $id, .*, true," || /usr/local/bin/etcdctl $E move-leader "$id"`
	if out, err := dc.Run(context.Background(), hs[0].Name, script); err != nil {
		t.Fatalf("moving etcd's leadership to %s: %v\n%s", leader.Name, err, out)
	}
}

// restoreAfterQuorumLoss loses two of three etcd members at once, as a site
// losing power to two racks would (docs/disaster-recovery.md): kao says the
// quorum is lost and holds the SRE's next spec change instead of running
// it; the documented way out, a restore of the latest snapshot onto the
// surviving host as a one-member cluster, brings Karmada back with
// everything the snapshot held (and, as documented, without what was
// written after it), and the etcd role given to two more hosts makes three
// members again.
//
// It is the last step of TestEtcdScale, on the plane that test ends with:
// the first host of spec.hosts has every role and survives, the next two
// have etcd alone and die, and two more are in spec.hosts without roles,
// their old members removed and wiped when etcd shrank from five members
// to three: the cluster grows back onto them.
func restoreAfterQuorumLoss(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	ctx := context.Background()
	var (
		survivor    hosts.Host
		lost, spare []hosts.Host
	)
	for i, sh := range get(t, kd).Spec.Hosts {
		h, err := dc.Host(sh.Name)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case i == 0 && slices.Contains(sh.Roles, kaov1.EtcdRole) && slices.Contains(sh.Roles, kaov1.APIServerRole) &&
			slices.Contains(sh.Roles, kaov1.ControlPlaneRole):
			survivor = h
		case slices.Equal(sh.Roles, []kaov1.HostRole{kaov1.EtcdRole}):
			lost = append(lost, h)
		case len(sh.Roles) == 0:
			spare = append(spare, h)
		}
	}
	if survivor.Name == "" || len(lost) != 2 || len(spare) != 2 {
		t.Fatalf("the quorum loss needs the first host with every role, two etcd-only hosts and two without roles; spec.hosts: %+v",
			get(t, kd).Spec.Hosts)
	}

	var (
		eb      *kaov1.EtcdBackup
		died    time.Time
		lastRun string
	)
	testenv.Step(t, "two of three etcd hosts die after a backup", func(t *testing.T) {
		ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
		// The host the previous step powered off and on may be the
		// survivor, back so recently that no probe saw it off.
		waitFor(t, 3*time.Minute, "karmada-apiserver to answer /readyz after the previous step's power cycle", func() bool {
			out, err := karmadaKubectlErr(t, ready, "get", "--raw", "/readyz")
			return err == nil && strings.TrimSpace(out) == "ok"
		})
		kubectl := karmadaKubectl(t, ready)
		kubectl("create", "namespace", "dr-quorum")
		kubectl("create", "configmap", "before-backup", "-n", "dr-quorum", "--from-literal=written=before-the-backup")
		eb = &kaov1.EtcdBackup{
			ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: kd.Namespace},
			Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
		}
		if err := k8s.Create(ctx, eb); err != nil {
			t.Fatal(err)
		}
		waitForBackup(t, eb)
		kubectl("create", "configmap", "after-backup", "-n", "dr-quorum", "--from-literal=written=after-the-backup")

		// Two members die at once, silently, as machines losing power:
		// their peers and clients hear no end of their connections.
		for _, h := range lost {
			if err := dc.Fail(ctx, h.Name); err != nil {
				t.Fatal(err)
			}
		}
		died = time.Now()
		down := waitForCondition(t, kd, kaov1.EtcdHealthyCondition, metav1.ConditionFalse, kaov1.EtcdQuorumLostReason, 2*time.Minute)
		t.Logf("EtcdHealthy: %s", conditionMessage(down, kaov1.EtcdHealthyCondition))
		lastRun = down.Status.LastRun.ID
	})

	// The SRE's edit: the dead hosts out and lost; the survivor and the
	// spare hosts stay. kao holds the run it asks for and says what to do.
	testenv.Step(t, "the next spec change is held", func(t *testing.T) {
		updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
			s.Hosts = slices.DeleteFunc(s.Hosts, func(h kaov1.Host) bool { return h.Name == lost[0].Name || h.Name == lost[1].Name })
			s.LostHosts = []string{lost[0].Name, lost[1].Name}
		})
		held := waitForCondition(t, kd, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.RunHeldQuorumLostReason, 2*time.Minute)
		if msg := conditionMessage(held, kaov1.PlaybookSucceededCondition); !strings.Contains(msg, "EtcdRestore") || !strings.Contains(msg, "quorum lost") {
			t.Errorf("the held run does not say why and what to do: %q", msg)
		}
		if !slices.ContainsFunc(deploymentEvents(t, kd), func(e eventsv1.Event) bool {
			return e.Reason == kaov1.RunHeldQuorumLostReason && e.Type == "Warning"
		}) {
			t.Error("no Warning Event says the run is held")
		}
		if cur := get(t, kd); cur.Status.Progress != nil || cur.Status.LastRun.ID != lastRun {
			t.Fatalf("a run started while etcd had no quorum: %+v %+v", cur.Status.Progress, cur.Status.LastRun)
		}
	})

	// The way out: the latest snapshot restored onto the survivor.
	testenv.Step(t, "a restore onto the survivor brings Karmada back", func(t *testing.T) {
		restoreFromBackup(t, kd, "onto-the-survivor", eb.Name, survivor.Name)
		// The held run follows by itself, once the probe finds a quorum.
		done := waitForRun(t, kd, runWait)
		if done.Status.LastRun.Result != kaov1.RunSucceeded {
			t.Fatalf("the held run failed after the restore: %+v", done.Status.LastRun)
		}
		// The spare hosts left etcd in TestEtcdScale's shrink and stay in
		// the inventory: this first install run since then finds nothing
		// to remove again on them.
		for _, c := range changedTasks(t, done) {
			if slices.ContainsFunc(spare, func(h hosts.Host) bool { return h.Name == c.host }) {
				t.Errorf("the install run after the restore changed %s on %s, a host that left etcd before", c.task, c.host)
			}
		}
		waitForEtcdMembers(t, kd, []hosts.Host{survivor}, 3*time.Minute)
		ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
		t.Logf("Karmada Ready again %s after the members died", time.Since(died).Round(time.Second))
		if out := karmadaKubectl(t, ready)("get", "configmap", "before-backup", "-n", "dr-quorum", "-o", "jsonpath={.data.written}"); out != "before-the-backup" {
			t.Errorf("the object written before the backup reads %q", out)
		}
		if out, err := karmadaKubectlErr(t, ready, "get", "configmap", "after-backup", "-n", "dr-quorum"); err == nil {
			t.Errorf("the object written after the backup survived the restore: %s", out)
		}
	})

	// Three members again: spec.hosts is now the survivor and the two spare
	// hosts, and scaleEtcd gives the spare hosts the etcd role and checks
	// the members, the two promotions and that the survivor's member keeps
	// running while they join.
	testenv.Step(t, "the etcd role on two more hosts makes three members again", func(t *testing.T) {
		scaleEtcd(t, dc, kd, 3)
		ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
		if out := karmadaKubectl(t, ready)("get", "configmap", "before-backup", "-n", "dr-quorum", "-o", "name"); strings.TrimSpace(out) != "configmap/before-backup" {
			t.Errorf("after scaling back to three: %q", out)
		}
	})
}
