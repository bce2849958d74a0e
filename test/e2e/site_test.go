package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/members"
)

// trustRoots are the files of a kao PKI Secret that an SRE exports to
// rebuild a lost plane under the same trust: the three CAs and the
// service-account key pair. Every leaf is issued anew for the new hosts.
var trustRoots = func() []string {
	files := []string{pki.ServiceAccountKeyFile, pki.ServiceAccountPubFile}
	for _, ca := range pki.CAs {
		files = append(files, pki.CertFile(ca), pki.KeyFile(ca))
	}
	return files
}()

// siteLoss says how rebuildElsewhere rebuilds a lost plane: on which host,
// from which backup, under which trust.
type siteLoss struct {
	// site is the new plane's host.
	site hosts.Host
	// name is the new deployment's name.
	name string
	// sshSecret names the Secret with the SSH key and known_hosts of the
	// test hosts: the new plane's, and the backup host's.
	sshSecret string
	// backupHost, when set, keeps the backup: an EtcdBackup of type SSH
	// into a directory there. Otherwise the operator's state volume does.
	backupHost *hosts.Host
	// rotate rebuilds under new CAs and a new service-account key instead
	// of the old plane's exported trust roots.
	rotate bool
}

// rebuildElsewhere loses a whole control plane and rebuilds it on a new
// host from its latest backup (docs/disaster-recovery.md, "The whole
// control plane is lost"), either with the CA exported from the old plane's
// PKI Secret or with every certificate rotated. The plane kd runs on hosts
// that all die, with the Push member edge joined and a Deployment
// propagated to it; a Pull member joins it first, its agent played by the
// test. After a backup off the plane's hosts (the operator's state volume,
// or a backup host over SSH), every host of kd is powered off. A new
// deployment on the site, whose PKI Secret holds the old plane's CAs and
// service-account key or nothing at all, is installed with the same members
// and restored from kd's backup; the install run that follows the restore
// by itself re-applies Karmada's objects. Then the new plane must hold
// everything written before the backup and nothing after it, present the
// old CA (reused) or refuse a client certificate of the old one (rotated),
// reach both members (the Pull agent given the new endpoint, and rotated
// the new CA and credentials, by kao), leave the propagated Deployment
// where it was (same UID in the member), and serve stock karmadactl and a
// new propagation.
func rebuildElsewhere(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, loss siteLoss, edgeKubeconfig string) {
	site := loss.site
	ctx := context.Background()
	ns := kd.Namespace
	kubectlBin := filepath.Join(env.AssetsDir, "kubectl")
	dir := t.TempDir()

	// A Pull member joins the plane that will be lost.
	relay := members.Start(t, 1, members.Options{Address: dc.Gateway(), Lean: true})[0]
	createSecret(t, ns, "site-relay", map[string][]byte{"relay": relay.Kubeconfig})
	relayMember := kaov1.MemberSpec{Name: "relay", SyncMode: kaov1.PullSyncMode,
		KubeconfigSecretRef: kaov1.SecretKeyReference{Name: "site-relay", Key: "relay"}}
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Artifacts.ImageRegistry = e2eRegistry
		s.Members = append(s.Members, relayMember)
	})
	if joined := waitForRun(t, kd, runWait); joined.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run joining the Pull member failed: %+v", joined.Status.LastRun)
	}
	relayKubeconfig := filepath.Join(dir, "relay.kubeconfig")
	if err := os.WriteFile(relayKubeconfig, relay.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := &pullAgent{kubectl: kubectlBin, memberKubeconfig: relayKubeconfig, dir: dir}
	agent.start(t)
	old := waitForCondition(t, kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.AllMembersReadyReason, 3*time.Minute)
	kubectl := karmadaKubectl(t, old)
	webUID := func() string {
		t.Helper()
		out, err := testenv.Kubectl(ctx, kubectlBin, edgeKubeconfig, "-n", "dr-apps", "get", "deployment", "web", "-o", "jsonpath={.metadata.uid}")
		if err != nil || out == "" {
			t.Fatalf("the Deployment propagated to edge: %q %v", out, err)
		}
		return out
	}
	uid := webUID()

	// The backup, off the hosts: on the operator's state volume, or on a
	// backup host.
	kubectl("create", "configmap", "before-site-loss", "-n", "dr-apps", "--from-literal=written=before-the-backup")
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "offsite", Namespace: ns},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if b := loss.backupHost; b != nil {
		eb.Spec.Destination = kaov1.BackupDestination{Type: kaov1.SSHDestination, SSH: &kaov1.SSHBackupDestination{
			Address: b.Address, Port: int32(b.Port), User: b.User, Directory: "/var/backups/karmada-offsite",
			PrivateKeySecretRef: kaov1.SecretKeyReference{Name: loss.sshSecret, Key: "id_ed25519"},
			KnownHostsSecretRef: kaov1.SecretKeyReference{Name: loss.sshSecret, Key: "known_hosts"},
		}}
	}
	if err := k8s.Create(ctx, eb); err != nil {
		t.Fatal(err)
	}
	snap := waitForBackup(t, eb).Status.LastSnapshot
	if b := loss.backupHost; b != nil && !strings.HasPrefix(snap.Location, b.Address+":/var/backups/karmada-offsite/") {
		t.Fatalf("the snapshot is at %s, not on the backup host %s", snap.Location, b.Name)
	}
	t.Logf("the backup before the loss: %s, revision %d", snap.Location, snap.Revision)
	kubectl("create", "configmap", "after-site-backup", "-n", "dr-apps", "--from-literal=written=after-the-backup")

	// The site is lost: every host of the plane.
	for _, h := range old.Spec.Hosts {
		if err := dc.Stop(ctx, h.Name); err != nil {
			t.Fatal(err)
		}
	}
	lost := time.Now()
	// The old plane's status says that nothing of it answers, and what stops.
	waitFor(t, 2*time.Minute, "ControlPlaneReady of the lost plane to say that no karmada-apiserver answers", func() bool {
		cur := get(t, kd)
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.ControlPlaneReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kaov1.ComponentsUnavailableReason &&
			strings.HasPrefix(c.Message, "no instance of karmada-apiserver, karmada-aggregated-apiserver, karmada-webhook answers on any host: Karmada's API does not answer")
	})

	// To reuse the CA, the SRE exports the old plane's trust roots and
	// imports them as the new deployment's PKI Secret, before creating it.
	oldPKI := readPKISecret(t, kd)
	if !loss.rotate {
		imported := map[string][]byte{}
		for _, f := range trustRoots {
			if len(oldPKI[f]) == 0 {
				t.Fatalf("the old PKI Secret has no %s", f)
			}
			imported[f] = oldPKI[f]
		}
		createSecret(t, ns, loss.name+"-pki", imported)
	}

	site2 := binaryDeployment(ns, loss.name, loss.sshSecret, []hosts.Host{site})
	site2.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	site2.Spec.Artifacts.ImageRegistry = e2eRegistry
	site2.Spec.Members = get(t, kd).Spec.Members
	if err := k8s.Create(ctx, site2); err != nil {
		t.Fatal(err)
	}
	if done := waitForRun(t, site2, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install on %s failed: %+v", site.Name, done.Status.LastRun)
	}
	adopted := slices.ContainsFunc(deploymentEvents(t, site2), func(e eventsv1.Event) bool {
		return e.Reason == "TrustRootsAdopted" && strings.Contains(e.Note, "kept ca, front-proxy-ca, etcd-ca, the service-account key from it")
	})
	if adopted == loss.rotate {
		t.Errorf("an Event says the new plane kept imported trust roots: %t, want %t", adopted, !loss.rotate)
	}
	newPKI := readPKISecret(t, site2)
	for _, f := range trustRoots {
		if same := bytes.Equal(newPKI[f], oldPKI[f]); same == loss.rotate {
			t.Errorf("the new plane's %s is the old plane's: %t, want %t", f, same, !loss.rotate)
		}
	}
	if bytes.Equal(newPKI[pki.CertFile(pki.APIServerServer)], oldPKI[pki.CertFile(pki.APIServerServer)]) {
		t.Error("the new plane serves the old plane's karmada-apiserver certificate")
	}
	if served := parseCert(t, newPKI, pki.APIServerServer); !slices.ContainsFunc(served.IPAddresses, func(ip net.IP) bool { return ip.String() == site.Address }) {
		t.Errorf("the new plane's karmada-apiserver certificate names %v, not %s", served.IPAddresses, site.Address)
	}

	// The restore from the old plane's backup, and the install it asks for.
	restoreFromBackup(t, site2, loss.name+"-from-offsite", eb.Name, site.Name)
	if after := runAfterRestore(t, site2, 10*time.Minute); after.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install run after the restore failed: %+v", after.Status.LastRun)
	}

	// The Pull member's kubelet rolls out the agent kao re-pointed.
	agentKubeconfig := agent.roll(t)
	if !strings.Contains(string(agentKubeconfig), site.Address) {
		t.Errorf("the Pull member's agent was not given the new plane's endpoint %s", site.Address)
	}
	if !kubeconfigTrusts(agentKubeconfig, newPKI[pki.CertFile(pki.CA)]) {
		t.Error("the Pull member's agent was not given the new plane's CA")
	}
	if loss.rotate && kubeconfigTrusts(agentKubeconfig, oldPKI[pki.CertFile(pki.CA)]) {
		t.Error("the Pull member's agent still trusts the old plane's CA")
	}
	ready := waitForCondition(t, site2, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.AllMembersReadyReason, 3*time.Minute)
	ready = waitForCondition(t, ready, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	t.Logf("the plane rebuilt on %s: Ready %s after its site was lost", site.Name, time.Since(lost).Round(time.Second))
	if ready.Status.ReadyMembers != "2/2" {
		t.Errorf("readyMembers %q, want 2/2", ready.Status.ReadyMembers)
	}

	kubectl2 := karmadaKubectl(t, ready)
	if out := kubectl2("get", "configmap", "before-site-loss", "-n", "dr-apps", "-o", "jsonpath={.data.written}"); out != "before-the-backup" {
		t.Errorf("the object written before the backup reads %q", out)
	}
	if out, err := karmadaKubectlErr(t, ready, "get", "configmap", "after-site-backup", "-n", "dr-apps"); err == nil {
		t.Errorf("the object written after the backup survived: %s", out)
	}
	if got := webUID(); got != uid {
		t.Errorf("the Deployment in edge was replaced (UID %s, was %s): the workload did not stay where it was", got, uid)
	}

	// Stock clients against the new plane.
	kubeconfig := writeKarmadaKubeconfig(t, ready)
	karmadactl := filepath.Join(artifactsDir, "karmada", "v1.18.1", "bin", "karmadactl")
	out, err := exec.CommandContext(ctx, karmadactl, "--kubeconfig", kubeconfig, "get", "clusters").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "edge") || !strings.Contains(string(out), "relay") || strings.Count(string(out), "True") < 2 {
		t.Errorf("karmadactl get clusters on the new plane: %v\n%s", err, out)
	}
	manifest := filepath.Join(dir, "propagate.yaml")
	if err := os.WriteFile(manifest, []byte(propagation(loss.name+"-apps", "relay")), 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.MustKubectl(ctx, t, kubectlBin, kubeconfig, "apply", "-f", manifest)
	waitFor(t, 3*time.Minute, "a Deployment propagated through the new plane to the Pull member", func() bool {
		out, err := testenv.Kubectl(ctx, kubectlBin, relayKubeconfig, "-n", loss.name+"-apps", "get", "deployment", "web", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "deployment.apps/web"
	})
	if loss.rotate {
		checkOldTrustRefused(t, ready, oldPKI, newPKI)
	} else {
		checkTrustedBy(t, ready, oldPKI)
	}
}

// checkOldTrustRefused checks that a plane rebuilt with every certificate
// rotated trusts nothing of the old one: its kubeconfig does not carry the
// old CA, its karmada-apiserver's certificate does not verify under the old
// CA, and a client certificate the old CA signed is refused (401) where one
// the new CA signed is served.
func checkOldTrustRefused(t *testing.T, kd *kaov1.KarmadaDeployment, old, cur pki.Bundle) {
	t.Helper()
	if kubeconfigTrusts(exportedKubeconfig(t, kd), old[pki.CertFile(pki.CA)]) {
		t.Error("the rotated plane's kubeconfig still trusts the old plane's CA")
	}
	oldCred, oldRoots := proberCredential(t, old)
	if _, err := parseCert(t, cur, pki.APIServerServer).Verify(x509.VerifyOptions{Roots: oldRoots}); err == nil {
		t.Error("the rotated plane's karmada-apiserver certificate verifies under the old plane's CA")
	}
	newCred, newRoots := proberCredential(t, cur)
	statusOf := func(cred tls.Certificate) int {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cred}, RootCAs: newRoots, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Get("https://" + kd.Status.Endpoint + "/api")
		if err != nil {
			t.Fatalf("GET /api on the rotated plane: %v", err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := statusOf(oldCred); code != http.StatusUnauthorized {
		t.Errorf("a client certificate of the old plane's CA got %d from the rotated plane, want 401", code)
	}
	if code := statusOf(newCred); code != http.StatusOK {
		t.Errorf("a client certificate of the rotated plane's CA got %d, want 200", code)
	}
}

// TestRebuildRotatedFromABackupHost loses a whole control plane and
// rebuilds it on a new host with every certificate rotated, from a snapshot
// that an EtcdBackup copied to an SSH backup host (docs/disaster-recovery.md,
// "The whole control plane is lost"): the other two ways than
// TestReplaceADeadHost's last step, which reuses the CA and restores from
// the operator's state volume. The plane is one host with every role, a
// Push member with a Deployment propagated to it, and a Pull member.
func TestRebuildRotatedFromABackupHost(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	dc := hosts.Start(t, 3)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	nodes := dc.Hosts()
	plane, backupHost, site := nodes[0], nodes[1], nodes[2]
	createSSHSecret(t, ns, "dr-ssh", dc)
	member := members.Start(t, 1, members.Options{Address: dc.Gateway(), Lean: true})[0]
	createSecret(t, ns, "dr-members", map[string][]byte{"edge": member.Kubeconfig})

	kd := binaryDeployment(ns, "lost", "dr-ssh", []hosts.Host{plane})
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	kd.Spec.Members = []kaov1.MemberSpec{edgeMember()}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	if done := waitForRun(t, kd, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	installed := waitForCondition(t, kd, kaov1.MembersReadyCondition, metav1.ConditionTrue, kaov1.AllMembersReadyReason, 3*time.Minute)

	edge := propagateToEdge(t, writeKarmadaKubeconfig(t, installed), member)

	rebuildElsewhere(t, dc, kd, siteLoss{site: site, name: "rotated", sshSecret: "dr-ssh", backupHost: &backupHost, rotate: true}, edge)
}

// checkTrustedBy checks that the exported kubeconfig of kd trusts the CA of
// the old bundle: clients of the old plane keep trusting the new one.
func checkTrustedBy(t *testing.T, kd *kaov1.KarmadaDeployment, old pki.Bundle) {
	t.Helper()
	if !kubeconfigTrusts(exportedKubeconfig(t, kd), old[pki.CertFile(pki.CA)]) {
		t.Error("the new plane's kubeconfig does not carry the old plane's CA")
	}
}

// exportedKubeconfig is the admin kubeconfig kao exported for kd.
func exportedKubeconfig(t *testing.T, kd *kaov1.KarmadaDeployment) []byte {
	t.Helper()
	secret := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: kd.Status.KubeconfigSecretRef.Name}, secret); err != nil {
		t.Fatal(err)
	}
	return secret.Data[kd.Status.KubeconfigSecretRef.Key]
}

// runAfterRestore waits for the install run that a successful EtcdRestore
// asks of kd by itself (kao.io/restored-at), and returns kd after it.
func runAfterRestore(t testing.TB, kd *kaov1.KarmadaDeployment, timeout time.Duration) *kaov1.KarmadaDeployment {
	t.Helper()
	var cur *kaov1.KarmadaDeployment
	waitFor(t, timeout, "the install run after the restore", func() bool {
		cur = get(t, kd)
		at, err := time.Parse(time.RFC3339, cur.Annotations[kaov1.RestoredAtAnnotation])
		last := cur.Status.LastRun
		return err == nil && last != nil && cur.Status.Progress == nil && !last.StartTime.Time.Before(at)
	})
	if p := cur.Status.LastRun.Playbook; p != "install.yml" {
		t.Errorf("the run after the restore ran %s, want install.yml", p)
	}
	return cur
}

// restoreFromBackup restores kd from the newest snapshot of the EtcdBackup
// backup with an EtcdRestore called name, and fails t unless it succeeds;
// onto names kd's hosts in the failure.
func restoreFromBackup(t testing.TB, kd *kaov1.KarmadaDeployment, name, backup, onto string) {
	t.Helper()
	er := &kaov1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kd.Namespace},
		Spec:       kaov1.EtcdRestoreSpec{DeploymentName: kd.Name, Source: kaov1.RestoreSource{BackupName: backup}},
	}
	if err := k8s.Create(context.Background(), er); err != nil {
		t.Fatal(err)
	}
	if restored := waitForRestore(t, er, 15*time.Minute); restored.Status.Phase != kaov1.RestoreSucceeded {
		t.Fatalf("the restore onto %s failed: %+v", onto, restored.Status)
	}
}
