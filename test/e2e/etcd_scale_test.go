package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/testenv"
	"github.com/kao-io/kao/test/hosts"
)

// TestEtcdScale scales a Binary control plane's managed etcd from one member
// to three, then moves two of the members to two other hosts in one edit
// (five members for a while, then three), by editing the hosts' roles, while
// a writer keeps creating objects through karmada-apiserver. Each run must
// succeed and add or remove exactly the members the edit asks for, one
// promotion per joining host and one removal per leaving host; status.etcd
// must show exactly the members the spec asks for, all healthy with a
// leader; the members that were running keep running in the same process;
// the hosts that left must have no etcd left, not even its certificates,
// and the next install run must change nothing on them; and every object
// karmada-apiserver acknowledged must still be there. Then
// an EtcdBackup is taken while the leader's host is powered off.
//
// The quorum-loss scenario of docs/disaster-recovery.md lives here too, as
// the last step ("Restore after a quorum loss", restoreAfterQuorumLoss in
// disaster_test.go): the plane the scaling ends with, every role on the
// first host and etcd alone on the next two, with two spare hosts that left
// etcd, is the one that scenario needs, and building it again would cost a
// second install.
func TestEtcdScale(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	dc := hosts.Start(t, 5)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	nodes := dc.Hosts()
	createSSHSecret(t, ns, "scale-ssh", dc)

	kd := binaryDeployment(ns, "scale", "scale-ssh", nodes)
	for i := range kd.Spec.Hosts {
		kd.Spec.Hosts[i].Roles = []kaov1.HostRole{}
	}
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	if done := waitForRun(t, kd, runWait); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the install failed: %+v", done.Status.LastRun)
	}
	waitForEtcdMembers(t, kd, nodes[:1], 2*time.Minute)
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	// The API refuses to drop an etcd host from spec.hosts in one step.
	err := k8s.Update(ctx, func() *kaov1.KarmadaDeployment {
		cur := get(t, kd)
		cur.Spec.Hosts = cur.Spec.Hosts[1:]
		return cur
	}())
	if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "cannot leave spec.hosts in one step") {
		t.Errorf("removing an etcd host from spec.hosts: %v", err)
	}

	w := startObjectWriter(t, kd)
	testenv.Step(t, "1 to 3", func(t *testing.T) { scaleEtcd(t, dc, kd, 3) })
	// One edit moves two members: the second and third hosts leave etcd
	// and the fourth and fifth join. The run grows etcd to five members
	// before it removes two, so this is 3→5 and 5→3 in one run.
	testenv.Step(t, "two members move to two other hosts", func(t *testing.T) { setEtcdHosts(t, dc, kd, 0, 3, 4) })
	// The hosts that left stay in the inventory: that a later run finds
	// nothing to remove again on them is checked on the next install run,
	// the one the quorum-loss restore releases (restoreAfterQuorumLoss),
	// rather than by a run of its own.
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	acked, failed := w.stop()
	t.Logf("karmada-apiserver acknowledged %d ConfigMaps; %d creates failed while etcd and the API server changed", len(acked), failed)
	w.checkNothingLost(t, acked, 50)

	testenv.Step(t, "EtcdBackup while the leader is powered off", func(t *testing.T) { backupWithoutLeader(t, dc, kd) })
	testenv.Step(t, "Restore after a quorum loss", func(t *testing.T) { restoreAfterQuorumLoss(t, dc, kd) })
}

// Task names, as a run's log gives them, of the two membership changes of
// roles/etcd: a learner promoted to a voting member (tasks/join.yml, once
// per joining host) and a member removed (tasks/leave_one.yml, once per
// leaving host).
const (
	etcdPromoteTask = "etcd : Etcd | Join | Promote the new member once it has caught up"
	etcdRemoveTask  = "etcd : Etcd | Leave | Remove the member"
)

// scaleEtcd gives the etcd role to the first n hosts of spec.hosts and takes
// it from the others; see setEtcdHosts.
func scaleEtcd(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, n int) {
	t.Helper()
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	setEtcdHosts(t, dc, kd, idx...)
}

// setEtcdHosts gives the etcd role to the hosts of spec.hosts at the given
// indexes and takes it from the others (the first host, index 0, keeps its
// roles and must be among them), and waits for the run. It must succeed;
// status.etcd must list exactly those hosts,
// healthy, with a leader; the run must have promoted one learner per
// joining host and removed one member per leaving host; the members that
// stay must run in the same etcd process as before (none restarted); and a
// host that left must have no etcd member left: not running, and no data,
// unit or certificates.
func setEtcdHosts(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, idx ...int) {
	t.Helper()
	ctx := context.Background()
	spec := get(t, kd).Spec
	n := len(idx)
	if !slices.Contains(idx, 0) || slices.ContainsFunc(idx, func(i int) bool { return i < 0 || i >= len(spec.Hosts) }) {
		t.Fatalf("cannot give etcd to hosts %v of %d: the first host is always a member", idx, len(spec.Hosts))
	}
	var was, want, joining, leaving []hosts.Host
	for i, sh := range spec.Hosts {
		h, err := dc.Host(sh.Name)
		if err != nil {
			t.Fatal(err)
		}
		member := slices.Contains(sh.Roles, kaov1.EtcdRole)
		if member {
			was = append(was, h)
		}
		wanted := slices.Contains(idx, i)
		switch {
		case wanted && !member:
			joining = append(joining, h)
		case !wanted && member:
			leaving = append(leaving, h)
		}
		if wanted {
			want = append(want, h)
		}
	}
	pids := map[string]string{}
	for _, h := range was {
		if !slices.Contains(leaving, h) {
			pids[h.Name] = mainPID(t, dc, h.Name, "karmada-etcd")
		}
	}

	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		for i := 1; i < len(s.Hosts); i++ {
			if slices.Contains(idx, i) {
				s.Hosts[i].Roles = []kaov1.HostRole{kaov1.EtcdRole}
			} else {
				s.Hosts[i].Roles = []kaov1.HostRole{}
			}
		}
	})
	start := time.Now()
	done := waitForRun(t, kd, runWait)
	if done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Fatalf("the run scaling etcd from %d to %d members failed: %+v", len(was), n, done.Status.LastRun)
	}
	waitForEtcdMembers(t, kd, want, 2*time.Minute)
	t.Logf("etcd has %d healthy members, %s after the spec changed", n, time.Since(start).Round(time.Second))

	promoted, removed := 0, 0
	for _, c := range changedTasks(t, done) {
		switch c.task {
		case etcdPromoteTask:
			promoted++
		case etcdRemoveTask:
			removed++
		}
	}
	if promoted != len(joining) || removed != len(leaving) {
		t.Errorf("scaling %d→%d: the run promoted %d learners and removed %d members, want %d and %d (one per joining and per leaving host; log of run %s)",
			len(was), n, promoted, removed, len(joining), len(leaving), done.Status.LastRun.ID)
	}
	for name, before := range pids {
		if after := mainPID(t, dc, name, "karmada-etcd"); after != before {
			t.Errorf("scaling %d→%d restarted the running member on %s: etcd PID %s before, %s after", len(was), n, name, before, after)
		}
	}
	for _, h := range leaving {
		out, err := dc.Run(ctx, h.Name, "systemctl is-active karmada-etcd || true; test -e /var/lib/karmada-etcd && echo data; "+
			"test -e /etc/systemd/system/karmada-etcd.service && echo unit; test -e /etc/karmada/pki/etcd && echo pki; true")
		if err != nil || strings.TrimSpace(out) != "inactive" {
			t.Errorf("%s still has parts of its etcd member after leaving (want only \"inactive\"): %q (%v)", h.Name, out, err)
		}
	}
}

// etcdHosts returns the hosts that spec.hosts gives the etcd role.
func etcdHosts(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) []hosts.Host {
	t.Helper()
	var hs []hosts.Host
	for _, sh := range get(t, kd).Spec.Hosts {
		if !slices.Contains(sh.Roles, kaov1.EtcdRole) {
			continue
		}
		h, err := dc.Host(sh.Name)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

// backupWithoutLeader powers off the host of the etcd leader and takes a
// backup at once, while the others elect a new leader. kao refuses to
// snapshot a cluster without a live leader, saying so and naming the member
// that is off; once a new leader is elected a follower's snapshot would do.
// Either way no snapshot comes from the host that is off, and once it is
// back the next backup succeeds.
func backupWithoutLeader(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment) {
	ctx := context.Background()
	leader := get(t, kd).Status.Etcd.Leader
	if leader == "" {
		t.Fatal("status.etcd names no leader")
	}
	if err := dc.Stop(ctx, leader); err != nil {
		t.Fatal(err)
	}
	powered := false
	defer func() {
		if !powered {
			_ = dc.Start(ctx, leader)
		}
	}()
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "leader-off", Namespace: kd.Namespace},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if err := k8s.Create(ctx, eb); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		cur := &kaov1.EtcdBackup{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(eb), cur); err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.BackupSucceededCondition)
		if c != nil && c.Status == metav1.ConditionTrue && cur.Status.LastSnapshot != nil {
			if s := cur.Status.LastSnapshot; s.Member == leader || s.SHA256 == "" || s.Revision == 0 {
				t.Errorf("a snapshot recorded with %s off: %+v", leader, s)
			}
			t.Logf("with the leader %s off, the backup took a verified snapshot from %s", leader, cur.Status.LastSnapshot.Member)
			break
		}
		if c != nil && c.Status == metav1.ConditionFalse {
			if !strings.Contains(c.Message, leader+": ") || cur.Status.LastSnapshot != nil {
				t.Errorf("a failed backup must name the member that is off and record no snapshot: %+v", cur.Status)
			}
			t.Logf("with the leader %s off, the backup failed: %s", leader, c.Message)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backup with the leader off did not end within 3m: %+v", cur.Status)
		}
		time.Sleep(time.Second)
	}

	if err := dc.Start(ctx, leader); err != nil {
		t.Fatal(err)
	}
	powered = true
	waitForEtcdMembers(t, kd, etcdHosts(t, dc, kd), 3*time.Minute)
	next := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Name: "leader-back", Namespace: kd.Namespace},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: kd.Name, Destination: kaov1.BackupDestination{Type: kaov1.LocalDestination}},
	}
	if err := k8s.Create(ctx, next); err != nil {
		t.Fatal(err)
	}
	waitForBackup(t, next)
}

// createSSHSecret stores the test hosts' SSH key and known_hosts.
func createSSHSecret(t testing.TB, ns, name string, dc *hosts.Cluster) {
	t.Helper()
	data, err := dc.SSHSecretData()
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, name, data)
}

// waitForEtcdMembers waits until status.etcd lists exactly the hosts, all
// healthy, one of them the leader.
func waitForEtcdMembers(t testing.TB, kd *kaov1.KarmadaDeployment, hs []hosts.Host, timeout time.Duration) {
	t.Helper()
	var want []string
	for _, h := range hs {
		want = append(want, h.Name)
	}
	slices.Sort(want)
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if e := cur.Status.Etcd; e != nil {
			var names []string
			healthy := 0
			for _, m := range e.Members {
				names = append(names, m.Name)
				if m.Healthy {
					healthy++
				}
			}
			slices.Sort(names)
			if slices.Equal(names, want) && healthy == len(want) && slices.Contains(want, e.Leader) &&
				e.Healthy == fmt.Sprintf("%d/%d", len(want), len(want)) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("status.etcd does not show %v healthy with a leader within %s: %+v", want, timeout, cur.Status.Etcd)
		}
		time.Sleep(time.Second)
	}
}

const writerNamespace = "scale-writer"

// objectWriter creates numbered ConfigMaps in karmada-apiserver, one every
// 100 ms, and records those the API server acknowledged.
type objectWriter struct {
	client *kubernetes.Clientset
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	acked  map[string]string
	failed int
}

func startObjectWriter(t *testing.T, kd *kaov1.KarmadaDeployment) *objectWriter {
	t.Helper()
	cur := get(t, kd)
	ref := cur.Status.KubeconfigSecretRef
	if ref == nil {
		t.Fatal("no exported kubeconfig in status")
	}
	secret := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: ref.Name}, secret); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[ref.Key])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: writerNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &objectWriter{client: cs, cancel: cancel, done: make(chan struct{}), acked: map[string]string{}}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			name, v := fmt.Sprintf("w-%06d", i), fmt.Sprintf("%d-%d", i, time.Now().UnixNano())
			_, err := cs.CoreV1().ConfigMaps(writerNamespace).Create(ctx,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v}}, metav1.CreateOptions{})
			w.mu.Lock()
			if err == nil {
				w.acked[name] = v
			} else if ctx.Err() == nil {
				w.failed++
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// stop ends the writer and returns the acknowledged writes and the failures.
func (w *objectWriter) stop() (map[string]string, int) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed
}

// checkNothingLost reads the writer's ConfigMaps back and fails t for each
// acknowledged write that is missing or differs. Fewer than least
// acknowledged writes prove nothing: that fails t too.
func (w *objectWriter) checkNothingLost(t *testing.T, acked map[string]string, least int) {
	t.Helper()
	if len(acked) < least {
		t.Fatalf("only %d writes were acknowledged: the test proves nothing", len(acked))
	}
	list, err := w.client.CoreV1().ConfigMaps(writerNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, cm := range list.Items {
		got[cm.Name] = cm.Data["v"]
	}
	lost := 0
	for name, v := range acked {
		if got[name] != v {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged ConfigMap %s (v=%s) reads back as %q", name, v, got[name])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes were lost", lost, len(acked))
	}
}
