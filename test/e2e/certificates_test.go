package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/kubeconfig"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/readiness"
)

// Certificate lifetimes of the rotation step. Certificates valid for 24
// minutes, renewed 23 minutes before they expire, are due for renewal a
// minute after they are issued: the step shows that a paused deployment
// holds that renewal. The lifetime leaves room for the rotating run, which
// took up to six minutes in CI, and the checks after it.
const (
	shortValidity    = 24 * time.Minute
	shortRenewBefore = 23 * time.Minute
)

// readPKISecret reads the deployment's PKI Secret.
func readPKISecret(t testing.TB, kd *kaov1.KarmadaDeployment) pki.Bundle {
	t.Helper()
	s := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: kd.Name + "-pki"}, s); err != nil {
		t.Fatal(err)
	}
	return pki.Bundle(s.Data)
}

// parseCert parses name's certificate in b.
func parseCert(t testing.TB, b pki.Bundle, name string) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(b[pki.CertFile(name)])
	if block == nil {
		t.Fatalf("the PKI Secret has no %s", pki.CertFile(name))
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// proberCredential issues, with kao's CA, the prober's own client
// certificate: a monitoring system has its own identity, valid whatever kao
// renews meanwhile.
func proberCredential(t testing.TB, b pki.Bundle) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ca := parseCert(t, b, pki.CA)
	block, _ := pem.Decode(b[pki.KeyFile(pki.CA)])
	if block == nil {
		t.Fatal("the PKI Secret has no CA key")
		return tls.Certificate{}, nil
	}
	caKey, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "e2e-readyz-prober", Organization: []string{"system:masters"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(2 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// changeDeployment changes the deployment's annotations and spec in one
// update, retrying on conflicts with the operator's status writes.
func changeDeployment(t testing.TB, kd *kaov1.KarmadaDeployment, change func(*kaov1.KarmadaDeployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := get(t, kd)
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		change(cur)
		return k8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// leaves lists the leaf certificates of status.certificates.
func leaves(kd *kaov1.KarmadaDeployment) []string {
	var out []string
	for _, c := range kd.Status.Certificates {
		if c.Name != pki.CA && c.Name != pki.FrontProxyCA && c.Name != pki.EtcdCA {
			out = append(out, c.Name)
		}
	}
	return out
}

// statusNotAfter is a certificate's expiry in status.certificates.
func statusNotAfter(kd *kaov1.KarmadaDeployment, name string) time.Time {
	for _, c := range kd.Status.Certificates {
		if c.Name == name {
			return c.NotAfter.Time
		}
	}
	return time.Time{}
}

// motdRole and diskSpaceRole are the README's worked example of user roles:
// a message of the day on the control-plane hosts after the install, and a
// free-space check on the etcd hosts before it.
func motdRole(ns string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "motd-role", Namespace: ns},
		Data: map[string]string{
			"defaults__main.yml": "motd_text: Karmada control plane host, managed by kao. Local changes are overwritten.\n",
			"templates__motd.j2": "{{ motd_text }}\nHost: {{ inventory_hostname }}\n",
			"tasks__main.yml": `- name: Motd | Write the message of the day
  ansible.builtin.template:
    src: motd.j2
    dest: /etc/motd
    owner: root
    group: root
    mode: "0644"
`,
		},
	}
}

func diskSpaceRole(ns string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "disk-space-role", Namespace: ns},
		Data: map[string]string{
			"defaults__main.yml": "disk_space_path: /var/lib\ndisk_space_min_mib: 64\n",
			"tasks__main.yml": `- name: Disk space | Measure the free space
  ansible.builtin.command:
    argv: [df, --output=avail, --block-size=1M, "{{ disk_space_path }}"]
  register: disk_space_df
  changed_when: false
  check_mode: false

- name: Disk space | Require enough free space
  ansible.builtin.assert:
    that: disk_space_free | int >= disk_space_min_mib | int
    fail_msg: "{{ disk_space_path }} has {{ disk_space_free }} MiB free, less than {{ disk_space_min_mib }} MiB"
    quiet: true
  vars:
    disk_space_free: "{{ disk_space_df.stdout_lines | last | trim }}"
`,
		},
	}
}

// rotateCertificates runs on TestBinaryInstall's control plane (three hosts,
// two API servers, three members joined, one in Pull mode). A prober asks
// both karmada-apiservers for /readyz every 200 ms throughout. In Binary
// mode clients reach karmada-apiserver through an endpoint, a VIP or a load
// balancer that health-checks the API servers, so what clients see is
// whether at least one API server is ready: that is what the prober checks
// (this test ground's endpoint is the first host itself, with no balancer).
//
// One change sets certificates valid for 24 minutes, renewed 23 minutes
// before they expire, the two user roles of the README's example, and
// kao.io/rotate-certificates, and disables the addons. Its run re-issues
// every leaf with the short lifetime and rolls them out host by host: the
// three etcd members and the two API servers restart one at a time (the
// restart windows systemd records do not overlap), the etcd leader hands
// its leadership on before it restarts (the run's log), both API servers
// serve the rotated certificate, no round of the prober finds neither
// ready, the roles run on their groups, the addons are gone from the
// hosts, karmada-apiserver and status, the Pull member's agent gets its
// rotated certificate and restarts with it, the exported kubeconfig follows
// and every member is Ready again.
//
// The rotated certificates are due for renewal a minute after they are
// issued. While the rotation runs, the test pauses the deployment, as an SRE
// holds kao's runs: the run in progress finishes, and no renewal starts
// although one is due. The deletion that ends TestBinaryInstall still
// uninstalls. The renewal that kao starts on its own, its Event and
// status.certificateRenewal are the KarmadaDeployment controller's tests
// (renewal_test.go); the rollout it runs is the one this step proves.
func rotateCertificates(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, agent *pullAgent) {
	ctx := context.Background()
	ns := kd.Namespace
	nodes := dc.Hosts()
	started := time.Now()
	// The run before this step may have failed (TestBinaryInstall's refused
	// host key), so Ready may be False: the components must be healthy.
	before := waitForCondition(t, kd, kaov1.ControlPlaneReadyCondition, metav1.ConditionTrue, kaov1.ComponentsHealthyReason, 5*time.Minute)
	original := readPKISecret(t, before)
	originalEnd := statusNotAfter(before, pki.APIServerServer)

	cred, roots := proberCredential(t, original)
	urls := []string{"https://" + nodes[0].Address + ":5443", "https://" + nodes[1].Address + ":5443"}
	prober := readiness.Start(urls, cred, roots, 200*time.Millisecond)
	stopped := false
	defer func() {
		if !stopped {
			prober.Stop()
		}
	}()
	for _, cm := range []*corev1.ConfigMap{motdRole(ns), diskSpaceRole(ns)} {
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}

	// Rotate into short-lived certificates, with the user roles; the same
	// run disables the addons addonsBySpec enabled.
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		disableAddons(&cur.Spec)
		cur.Annotations[kaov1.RotateCertificatesAnnotation] = "e2e-short-lived"
		cur.Spec.Certificates = kaov1.CertificatesSpec{
			Validity:    &metav1.Duration{Duration: shortValidity},
			RenewBefore: &metav1.Duration{Duration: shortRenewBefore},
		}
		cur.Spec.Addons.UserRoles = []kaov1.UserRole{
			{Name: "disk_space", Stage: kaov1.BeforeInstallStage, Groups: []kaov1.InventoryGroup{"etcd"}, ConfigMapName: "disk-space-role"},
			{Name: "motd", Stage: kaov1.AfterInstallStage, Groups: []kaov1.InventoryGroup{"karmada_control_plane"}, ConfigMapName: "motd-role"},
		}
	})
	// The rotating run is the one that records the request.
	var during *kaov1.KarmadaDeployment
	waitFor(t, 15*time.Minute, "the run that rotates the certificates", func() bool {
		during = get(t, kd)
		r := during.Status.CertificateRenewal
		return during.Status.Progress != nil && r != nil && r.RotationRequest == "e2e-short-lived"
	})
	r1ID := during.Status.Progress.RunID
	// Hold every later run: the rotated certificates are due for renewal
	// a minute after they are issued.
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) { cur.Spec.Paused = true })
	var rotated *kaov1.KarmadaDeployment
	waitFor(t, 12*time.Minute, "the end of the rotating run "+r1ID, func() bool {
		rotated = get(t, kd)
		return rotated.Status.LastRun != nil && rotated.Status.LastRun.ID == r1ID
	})
	r1 := rotated.Status.LastRun
	if r1.Result != kaov1.RunSucceeded {
		t.Fatalf("the rotation into short-lived certificates failed: %+v", r1)
	}
	for _, h := range r1.Hosts {
		if h.Failed != 0 || h.Unreachable != 0 {
			t.Errorf("the rotation run failed on %s: %+v", h.Name, h)
		}
	}
	t.Logf("rotation run %s took %s", r1.ID, r1.EndTime.Sub(r1.StartTime.Time).Round(time.Second))
	// The run restarted every etcd member and both API servers, one host at
	// a time: each went down only after the one before it was back, and the
	// etcd leader handed its leadership on before it stopped. The paused
	// deployment starts no run that restarts them again before these reads.
	checkRestartsOneAtATime(t, dc, r1, "karmada-etcd", nodes[0].Name, nodes[1].Name, nodes[2].Name)
	checkRestartsOneAtATime(t, dc, r1, "karmada-apiserver", nodes[0].Name, nodes[1].Name)
	checkLeadershipHandedOn(t, rotated)
	if r := rotated.Status.CertificateRenewal; r == nil || r.RotationRequest != "e2e-short-lived" {
		t.Fatalf("status.certificateRenewal after the rotation: %+v", r)
	}
	short := readPKISecret(t, rotated)
	for _, name := range leaves(rotated) {
		if string(short[pki.KeyFile(name)]) == string(original[pki.KeyFile(name)]) {
			t.Errorf("the rotation kept %s", name)
		}
		if end := statusNotAfter(rotated, name); end.Sub(r1.StartTime.Time) > shortValidity+time.Minute {
			t.Errorf("%s expires at %s: not short-lived", name, end)
		}
	}
	if string(short[pki.CertFile(pki.CA)]) != string(original[pki.CertFile(pki.CA)]) {
		t.Error("the rotation replaced the CA")
	}
	// The rotation shows in the expiry series Prometheus alerts on.
	checkCertificateMetrics(t, kd, pki.APIServerServer, originalEnd)
	// The user roles ran on their groups: the message of the day is on the
	// control-plane hosts (nodes 1 and 2), not on the first.
	for i, n := range nodes {
		out, err := dc.Run(ctx, n.Name, "cat /etc/motd 2>/dev/null || true")
		if err != nil {
			t.Fatal(err)
		}
		want := "Karmada control plane host, managed by kao. Local changes are overwritten.\nHost: " + n.Name + "\n"
		switch {
		case i > 0 && out != want:
			t.Errorf("/etc/motd on control-plane host %s is %q, want %q", n.Name, out, want)
		case i == 0 && strings.Contains(out, "managed by kao"):
			t.Errorf("the motd role ran on %s, which is not a control-plane host", n.Name)
		}
	}
	if rotated.Status.UserRolesDigest == "" {
		t.Error("status.userRolesDigest is empty after a run with user roles")
	}
	checkAddonsGone(t, dc, rotated)
	rotatedAgentEnd := statusNotAfter(rotated, pki.AgentClient("pull-d"))
	for _, m := range rotated.Status.Members {
		if m.Name == "pull-d" && (m.AgentCertificateNotAfter == nil || !m.AgentCertificateNotAfter.Time.Equal(rotatedAgentEnd)) {
			t.Errorf("status.members[pull-d].agentCertificateNotAfter is %v, want the rotated %s", m.AgentCertificateNotAfter, rotatedAgentEnd)
		}
	}

	// Both API servers served the original, then the rotated certificate,
	// and never were both not ready.
	serials := []*big.Int{
		parseCert(t, original, pki.APIServerServer).SerialNumber,
		parseCert(t, short, pki.APIServerServer).SerialNumber,
	}
	waitFor(t, 30*time.Second, "both API servers serving the rotated certificate", func() bool {
		snap := prober.Snapshot()
		for _, u := range urls {
			if s := snap.LastSerial(u); s == nil || s.Cmp(serials[1]) != 0 {
				return false
			}
		}
		return true
	})
	stopped = true
	report := prober.Stop()
	t.Logf("readyz prober: %s", report)
	for _, o := range report.Outages() {
		t.Errorf("neither API server was in rotation at %s (each failed %d checks in a row): %v", o.At.Format(time.RFC3339Nano), readiness.Fall, o.Errors)
	}
	for _, u := range urls {
		if !inOrder(report.Serials[u], serials) {
			t.Errorf("%s served the certificates %v; want the original, then the rotated %v", u, report.Serials[u], serials)
		}
	}

	// The Pull member has the rotated agent certificate, and a new Pod
	// template so its agents restart with it; the test's kubelet rolls them
	// and the member is Ready with it.
	agentCert := short[pki.CertFile(pki.AgentClient("pull-d"))]
	sum := sha256.Sum256(agentCert)
	if got := agent.template(t, "kao.io/agent-certificate-sha256"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("the agent's Pod template names certificate %q, want the rotated one %x", got, sum)
	}
	if !kubeconfigHasCert(agent.roll(t), agentCert) {
		t.Error("the Pull member's karmada-kubeconfig Secret lacks the rotated agent certificate")
	}
	// The exported admin kubeconfig follows.
	waitFor(t, time.Minute, "the exported kubeconfig with the rotated admin certificate", func() bool {
		ref := get(t, kd).Status.KubeconfigSecretRef
		s := &corev1.Secret{}
		return ref != nil && k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, s) == nil &&
			kubeconfigHasCert(s.Data[ref.Key], short[pki.CertFile(pki.AdminClient)])
	})
	// The paused deployment is not probed, so ask Karmada itself, with the
	// exported kubeconfig: every member's Cluster is Ready again.
	waitFor(t, 3*time.Minute, "every member's Cluster Ready after the rotation", func() bool {
		out, err := karmadaKubectlErr(t, get(t, kd), "get", "clusters", "-o",
			`jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		lines := strings.Fields(out)
		if err != nil || len(lines) != len(get(t, kd).Spec.Members) {
			return false
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, "=True") {
				return false
			}
		}
		return true
	})
	// By now the rotated certificates have been due for renewal for a
	// while: the pause holds it.
	if due := r1.EndTime.Add(shortValidity - shortRenewBefore); time.Now().Before(due) {
		time.Sleep(time.Until(due) + 5*time.Second)
	}
	if c := get(t, kd); c.Status.Phase != kaov1.PausedPhase || c.Status.LastRun.ID != r1.ID || c.Status.Progress != nil {
		t.Errorf("paused with certificates due: phase %s, last run %s, progress %+v (want Paused, the rotation %s and no run)",
			c.Status.Phase, c.Status.LastRun.ID, c.Status.Progress, r1.ID)
	}
	t.Logf("the rotation step took %s", time.Since(started).Round(time.Second))
}

// checkRestartsOneAtATime reads the last restart of unit on each host and
// checks that run restarted it there, and that no two hosts had it down at
// once.
func checkRestartsOneAtATime(t *testing.T, dc *hosts.Cluster, run *kaov1.RunStatus, unit string, on ...string) {
	t.Helper()
	var rs []hosts.Restart
	for _, h := range on {
		r, err := dc.LastRestart(context.Background(), h, unit)
		if err != nil {
			t.Error(err)
			continue
		}
		if r.DownAt.Before(run.StartTime.Truncate(time.Second)) {
			t.Errorf("%s on %s last went down at %s, before run %s started at %s: the run did not restart it",
				unit, h, r.DownAt.Format(time.RFC3339), run.ID, run.StartTime.Format(time.RFC3339))
		}
		rs = append(rs, r)
	}
	if hosts.Overlap(rs) {
		t.Errorf("two %s were down at once in run %s (host monotonic clock, µs): %v", unit, run.ID, rs)
	}
}

// checkLeadershipHandedOn checks, in the log of kd's last run, that the etcd
// role moved the leadership away from a member before restarting it: a
// leader that just stops leaves the cluster without one until an election
// ends, and every linearizable read fails meanwhile (karmada-apiserver's
// /readyz among them).
func checkLeadershipHandedOn(t *testing.T, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	const task = "Etcd | Restart | Hand the leadership to another member"
	var restarts []string
	for _, l := range stampedLines(lastRunLog(t, kd)) {
		if !strings.Contains(l.rest, "Etcd | Restart |") {
			continue
		}
		restarts = append(restarts, l.at.Format("15:04:05.000")+" "+l.rest)
		if f := strings.Fields(l.rest); len(f) > 0 && (f[0] == "ok" || f[0] == "changed") && strings.Contains(l.rest, task) {
			return
		}
	}
	t.Errorf("run %s did not move etcd's leadership before restarting the leader (no ok or changed %q); its etcd restart lines:\n%s",
		kd.Status.LastRun.ID, task, strings.Join(restarts, "\n"))
}

// inOrder tells whether want appears in got in order, other values between
// them allowed.
func inOrder(got, want []*big.Int) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g.Cmp(want[i]) == 0 {
			i++
		}
	}
	return i == len(want)
}

// kubeconfigHasCert tells whether a user of the kubeconfig presents the
// PEM certificate cert.
func kubeconfigHasCert(kubeconfig, cert []byte) bool {
	cfg, err := clientcmd.Load(kubeconfig)
	want, _ := pem.Decode(cert)
	if err != nil || want == nil {
		return false
	}
	for _, u := range cfg.AuthInfos {
		if got, _ := pem.Decode(u.ClientCertificateData); got != nil && string(got.Bytes) == string(want.Bytes) {
			return true
		}
	}
	return false
}

// kubeconfigTrusts tells whether a kubeconfig kao wrote trusts the PEM CA
// certificate ca: one of the certificates of its cluster's CA data. It is
// read as kao reads any kubeconfig (internal/kubeconfig.Minimize), so one
// that is not minimal (a credential plugin, a file, a proxy) trusts
// nothing here.
func kubeconfigTrusts(data, ca []byte) bool {
	m, err := kubeconfig.Minimize(data, "")
	want, _ := pem.Decode(ca)
	if err != nil || want == nil {
		return false
	}
	for rest := m.Config.Clusters[kubeconfig.ClusterName].CertificateAuthorityData; ; {
		var got *pem.Block
		if got, rest = pem.Decode(rest); got == nil {
			return false
		}
		if bytes.Equal(got.Bytes, want.Bytes) {
			return true
		}
	}
}

// waitFor polls ok until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(time.Second)
	}
}
