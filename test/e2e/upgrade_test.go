package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	bundle "github.com/kao-io/kao/internal/artifacts"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/test/hosts"
	"github.com/kao-io/kao/test/readiness"
)

// Versions of the upgrade test: both are in the bundle (hack/artifacts.sh).
const (
	upgradeFrom = "v1.17.1"
	upgradeTo   = "v1.18.1"
)

// kaoServices are the systemd units kao runs, by component.
var kaoServices = map[string]string{
	"etcd":                         "karmada-etcd",
	"karmada-apiserver":            "karmada-apiserver",
	"karmada-aggregated-apiserver": "karmada-aggregated-apiserver",
	"kube-controller-manager":      "kube-controller-manager",
	"karmada-controller-manager":   "karmada-controller-manager",
	"karmada-scheduler":            "karmada-scheduler",
	"karmada-webhook":              "karmada-webhook",
}

// TestBinaryUpgrade installs Karmada v1.17.1 on three hosts (etcd on the
// first, karmada-apiserver and karmada-aggregated-apiserver on all three,
// the controllers on the last two) and upgrades it through the operator:
//
//  1. a single-component upgrade (spec.components.scheduler.version):
//     only karmada-scheduler moves, on both hosts, one at a time; no other
//     service on any host restarts; an etcd snapshot is taken first;
//  2. the full upgrade (spec.version), planned first (planUpgrade), then
//     applied with a failing step: node2's
//     karmada-aggregated-apiserver cannot start (a systemd drop-in makes
//     its start fail). The run stops there: node1 runs v1.18.1, node3 was
//     not touched and still runs v1.17.1 (same process), no component after
//     it moved, and status.lastRun says where it stopped;
//  3. with the cause removed, the next run finishes the upgrade:
//     every component on every host runs v1.18.1 (what the processes say
//     over SSH, and status), status.version moves, the CRDs are v1.18.1's;
//     in both runs no host's karmada-aggregated-apiserver restarts twice;
//  4. asking for v1.17.1 again is refused with a condition and a Warning
//     Event, and nothing runs;
//  5. back on v1.18.1 with drift checks every minute and autoRepair, a
//     unit edited, a service stopped and a certificate changed by hand are
//     found, exactly those, and repaired (drift_test.go);
//  6. adding a fourth host with karmada-apiserver is planned: the plan
//     lists the new host's program and unit, the certificate that must
//     name it, and the restart of every running karmada-apiserver, each on
//     its own host in spec order, and changes no file on any host, no
//     service and not the PKI Secret; taken back, the unchanged spec runs.
//
// From before step 2 to the end of step 3 a prober sends, every 250 ms,
// requests through the deployment's endpoint (node1's karmada-apiserver,
// which a Karmada upgrade does not restart): GET /readyz, a list of the
// Cluster API (served by karmada-aggregated-apiserver, restarted on each
// host) and a dry-run create of a PropagationPolicy (through
// karmada-webhook's admission, restarted on each host). Every list and
// create must succeed: hosts are taken out of routing before their
// component restarts. /readyz is judged as a load balancer's health check
// is: only readiness.Fall failed checks in a row fail the test (a single
// one came in CI when an etcd read took longer than the check's 2 s on a
// machine at load 20, with nothing restarting).
// It also reads each host's karmada-aggregated-apiserver /readyz and checks
// that no two were ever down in the same sample: one host at a time.
//
// It takes 4.5 (idle) to 17 minutes on a 2-core machine.
func TestBinaryUpgrade(t *testing.T) {
	longTest(t) // see the package doc: long tests share the machine's test lanes, longest first
	testStart := time.Now()
	dc := hosts.Start(t, 4)
	ctx := context.Background()
	ns := newNamespace(t)
	stateDir := startOperator(t, ns)
	// The fourth host stays empty until a host addition is planned, last.
	nodes, spare := dc.Hosts()[:3], dc.Hosts()[3]
	createSSHSecret(t, ns, "up-ssh", dc)

	kd := binaryDeployment(ns, "up", "up-ssh", nodes)
	kd.Spec.Version = upgradeFrom
	kd.Spec.Hosts[0].Roles = []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole}
	kd.Spec.Hosts[1].Roles = []kaov1.HostRole{kaov1.APIServerRole, kaov1.ControlPlaneRole}
	kd.Spec.Hosts[2].Roles = []kaov1.HostRole{kaov1.APIServerRole, kaov1.ControlPlaneRole}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	installed := waitForRun(t, kd, runWait)
	if r := installed.Status.LastRun; r.Result != kaov1.RunSucceeded || r.Playbook != "install.yml" {
		t.Fatalf("the install of %s failed: %+v", upgradeFrom, r)
	}
	t.Logf("installed Karmada %s on 3 hosts in %s", upgradeFrom, time.Since(testStart).Round(time.Second))
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	defaults := bundleManifest(t)
	want := map[string]string{}
	for name := range kaoServices {
		want[name] = upgradeFrom
	}
	want["etcd"], want["karmada-apiserver"], want["kube-controller-manager"] = defaults.Etcd, defaults.Kubernetes, defaults.Kubernetes
	checkRunning(t, dc, get(t, kd), want)

	// 1. One component's own version: only karmada-scheduler moves.
	step := time.Now()
	before := servicePIDs(t, dc, nodes)
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) { s.Components.Scheduler.Version = upgradeTo })
	one := waitForRun(t, kd, runWait)
	if r := one.Status.LastRun; r.Result != kaov1.RunSucceeded || r.Playbook != "upgrade.yml" {
		t.Fatalf("the scheduler's upgrade failed: %+v", r)
	}
	t.Logf("single-component upgrade (karmada-scheduler) took %s", time.Since(step).Round(time.Second))
	u := one.Status.Upgrade
	if u == nil || len(u.Components) != 1 || u.Components[0].Name != "karmada-scheduler" ||
		!slices.Equal(u.Components[0].Hosts, []string{nodes[1].Name, nodes[2].Name}) || u.Components[0].To != upgradeTo ||
		u.CompletionTime == nil || u.RunID != one.Status.LastRun.ID {
		t.Errorf("status.upgrade does not describe the scheduler's upgrade: %+v", u)
	}
	checkBackup(t, stateDir, one)
	want["karmada-scheduler"] = upgradeTo
	checkRunning(t, dc, one, want)
	after := servicePIDs(t, dc, nodes)
	for key, pid := range before {
		if moved := after[key] != pid; moved != strings.HasSuffix(key, "/karmada-scheduler") {
			t.Errorf("%s: main PID %s before, %s after the scheduler's upgrade (restarted: %v)", key, pid, after[key], moved)
		}
	}
	if one.Status.Version != upgradeFrom {
		t.Errorf("status.version is %s after a single-component upgrade, want %s", one.Status.Version, upgradeFrom)
	}
	if crd := karmadaKubectl(t, one)("get", "crd", "propagationpolicies.policy.karmada.io", "-o", "yaml"); strings.Contains(crd, "overflowAffinities") {
		t.Error("a single-component upgrade moved Karmada's CRDs to v1.18's")
	}
	waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)

	// 2. The full upgrade, with node2's karmada-aggregated-apiserver unable
	// to start.
	dropIn := "/etc/systemd/system/karmada-aggregated-apiserver.service.d"
	mustRun(t, dc, nodes[1].Name, "mkdir -p "+dropIn+" && printf '[Service]\\nExecStartPre=/bin/false\\n' > "+dropIn+"/zz-e2e-broken.conf && systemctl daemon-reload")
	// It is planned first (annotation kao.io/plan), and applied once the
	// annotation goes.
	planUpgrade(t, dc, kd, nodes)
	p := startUpgradeProber(t, kd, nodes)
	before = servicePIDs(t, dc, nodes)
	step = time.Now()
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) { delete(cur.Annotations, kaov1.PlanAnnotation) })
	stopped := waitForRun(t, kd, runWait)
	t.Logf("the upgrade stopped after %s", time.Since(step).Round(time.Second))
	last := stopped.Status.LastRun
	if last.Result != kaov1.RunFailed || last.Playbook != "upgrade.yml" {
		t.Fatalf("the upgrade with a broken host did not fail: %+v", last)
	}
	// Hold the operator's retry (15 s after the failure) while the test
	// looks at the hosts: it would stop at node2 again.
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) { s.Paused = true })
	if !strings.Contains(last.Message, "stopped at karmada-aggregated-apiserver on "+nodes[1].Name) ||
		!strings.Contains(last.Message, "before it: "+nodes[0].Name) || !strings.Contains(last.Message, "not touched: "+nodes[2].Name) {
		t.Errorf("status.lastRun.message does not say where the upgrade stopped: %q", last.Message)
	}
	if len(last.FailedTasks) == 0 || last.FailedTasks[0].Host != nodes[1].Name {
		t.Errorf("the failed task is not on %s: %+v", nodes[1].Name, last.FailedTasks)
	}
	if stopped.Status.Version != upgradeFrom || stopped.Status.Phase != kaov1.FailedPhase {
		t.Errorf("after a stopped upgrade status.version is %s and phase %s", stopped.Status.Version, stopped.Status.Phase)
	}
	checkBackup(t, stateDir, stopped)
	// One restart succeeded, node1's: node2's step must not restart node1
	// again, which serves in routing by then.
	if n := aggregatedRestarts(t, stopped); n != 1 {
		t.Errorf("the stopped upgrade restarted karmada-aggregated-apiserver %d times, want once, on %s", n, nodes[0].Name)
	}
	// node1 moved, node2 failed, node3 untouched; nothing after the
	// aggregated API server moved.
	checkInstances(t, dc, stopped, "karmada-aggregated-apiserver", map[string]string{
		nodes[0].Name: upgradeTo, nodes[1].Name: "", nodes[2].Name: upgradeFrom,
	})
	for _, c := range []string{"karmada-webhook", "karmada-controller-manager"} {
		checkInstances(t, dc, stopped, c, map[string]string{nodes[1].Name: upgradeFrom, nodes[2].Name: upgradeFrom})
	}
	pids := servicePIDs(t, dc, nodes)
	for _, key := range []string{nodes[2].Name + "/karmada-aggregated-apiserver", nodes[1].Name + "/karmada-webhook",
		nodes[2].Name + "/karmada-webhook", nodes[1].Name + "/karmada-controller-manager", nodes[2].Name + "/karmada-controller-manager"} {
		if pids[key] != before[key] {
			t.Errorf("%s restarted although the upgrade stopped before it (PID %s, then %s)", key, before[key], pids[key])
		}
	}
	if c := meta.FindStatusCondition(stopped.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("PlaybookSucceeded after the stopped upgrade: %+v", c)
	}

	// 3. The cause removed, the next run finishes the upgrade.
	mustRun(t, dc, nodes[1].Name, "rm -rf "+dropIn+" && systemctl daemon-reload")
	step = time.Now()
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) { s.Paused = false })
	done := waitForNextRun(t, kd, last.ID)
	if r := done.Status.LastRun; r.Result != kaov1.RunSucceeded || r.Playbook != "upgrade.yml" {
		t.Fatalf("the retried upgrade failed: %+v", r)
	}
	t.Logf("the upgrade finished %s after the cause was removed", time.Since(step).Round(time.Second))
	if done.Status.Version != upgradeTo || done.Status.Upgrade == nil || done.Status.Upgrade.CompletionTime == nil {
		t.Errorf("status after the upgrade: version %s, upgrade %+v", done.Status.Version, done.Status.Upgrade)
	}
	if u := done.Status.Upgrade; u != nil && (len(u.Components) == 0 || u.Components[0].Name != "karmada-crds" && u.Components[0].Name != "karmada-aggregated-apiserver") {
		t.Errorf("status.upgrade.components of the retry: %+v", u.Components)
	}
	checkBackup(t, stateDir, done)
	// node3's is restarted once; node2's, stopped since its failure, is
	// started.
	if n := aggregatedRestarts(t, done); n != 1 {
		t.Errorf("the retried upgrade restarted karmada-aggregated-apiserver %d times, want once, on %s", n, nodes[2].Name)
	}
	if b, a := stopped.Status.Upgrade.Backup, done.Status.Upgrade.Backup; b != nil && a != nil && a.Location == b.Location {
		t.Errorf("the retried upgrade did not take a snapshot of its own: %s", a.Location)
	}
	for name := range want {
		if want[name] == upgradeFrom {
			want[name] = upgradeTo
		}
	}
	checkRunning(t, dc, done, want)
	ready := waitForCondition(t, kd, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.ProbeSucceededReason, 3*time.Minute)
	for _, c := range ready.Status.Components {
		if c.TargetVersion != "" {
			t.Errorf("%s still has a target version after the upgrade: %+v", c.Name, c)
		}
	}
	kubectl := karmadaKubectl(t, ready)
	if crd := kubectl("get", "crd", "propagationpolicies.policy.karmada.io", "-o", "yaml"); !strings.Contains(crd, "overflowAffinities") {
		t.Error("the PropagationPolicy CRD lacks v1.18's overflowAffinities: the CRDs did not move")
	}
	if failures := p.stop(t); len(failures) > 0 {
		printRunLogsAround(t, kd, failures, stopped.Status.LastRun.LogConfigMapName, done.Status.LastRun.LogConfigMapName)
		printAggregatorJournal(t, dc, nodes[0].Name, failures)
	}

	// 4. Going back is refused, and nothing runs.
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) { s.Version = upgradeFrom; s.Components.Scheduler.Version = "" })
	refused := waitForCondition(t, kd, kaov1.PlaybookSucceededCondition, metav1.ConditionFalse, kaov1.DowngradeRefusedReason, time.Minute)
	if c := meta.FindStatusCondition(refused.Status.Conditions, kaov1.PlaybookSucceededCondition); !strings.Contains(c.Message, "kao does not downgrade") {
		t.Errorf("the refusal does not say why: %q", c.Message)
	}
	if refused.Status.LastRun.ID != done.Status.LastRun.ID || refused.Status.Progress != nil {
		t.Errorf("a run started for a downgrade: %+v %+v", refused.Status.LastRun, refused.Status.Progress)
	}
	warned := false
	for _, e := range deploymentEvents(t, kd) {
		warned = warned || e.Reason == kaov1.DowngradeRefusedReason && e.Type == corev1.EventTypeWarning
	}
	if !warned {
		t.Error("no DowngradeRefused Warning Event")
	}

	// 5. Back to the version that runs, with drift checks: what is changed
	// by hand is found and repaired (drift_test.go).
	t.Run("Drift check and repair", func(t *testing.T) { driftCheckAndRepair(t, dc, kd, upgradeTo) })

	// 6. Adding a host is planned: what the new host would get, the
	// certificates issued for it (in memory only), and nothing changed.
	t.Run("Plan a host addition", func(t *testing.T) { planHostAddition(t, dc, kd, nodes, spare) })
	t.Logf("TestBinaryUpgrade took %s", time.Since(testStart).Round(time.Second))
}

func mustRun(t testing.TB, dc *hosts.Cluster, host, script string) string {
	t.Helper()
	out, err := dc.Run(context.Background(), host, script)
	if err != nil {
		t.Fatalf("%s on %s: %v: %s", script, host, err, out)
	}
	return out
}

// runningVersionScript prints "<unit> <main PID> <version>" for every kao
// unit on a host, the version from the running process's own image
// (/proc/PID/exe): what serves, whatever file is on disk now.
const runningVersionScript = `for u in %s; do
  systemctl cat "$u.service" >/dev/null 2>&1 || continue
  pid=$(systemctl show -p MainPID --value "$u.service")
  v=-
  if [ "$pid" != 0 ]; then
    case "$u" in
      karmada-etcd) v=v$(/proc/$pid/exe --version | sed -n 's/^etcd Version: //p') ;;
      karmada-apiserver|kube-controller-manager) v=$(/proc/$pid/exe --version | sed -n 's/^Kubernetes //p') ;;
      *) v=$(/proc/$pid/exe version | sed -n 's/.*GitVersion:"\([^"]*\)".*/\1/p') ;;
    esac
  fi
  echo "$u $pid $v"
done`

// hostServices reads every kao unit's main PID and running version on the hosts.
func hostServices(t testing.TB, dc *hosts.Cluster, hs []hosts.Host) map[string][2]string {
	t.Helper()
	units := []string{}
	for _, u := range kaoServices {
		units = append(units, u)
	}
	slices.Sort(units)
	out := map[string][2]string{}
	for _, h := range hs {
		for _, line := range strings.Split(strings.TrimSpace(mustRun(t, dc, h.Name, fmt.Sprintf(runningVersionScript, strings.Join(units, " ")))), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 {
				v := f[2]
				if v == "-" {
					v = ""
				}
				out[h.Name+"/"+f[0]] = [2]string{f[1], v}
			}
		}
	}
	return out
}

// servicePIDs maps host/unit to the unit's main PID.
func servicePIDs(t testing.TB, dc *hosts.Cluster, hs []hosts.Host) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range hostServices(t, dc, hs) {
		out[k] = v[0]
	}
	return out
}

// checkRunning checks that every component with a wanted version runs it on
// each of its hosts, as its process says over SSH and as status says.
func checkRunning(t testing.TB, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, want map[string]string) {
	t.Helper()
	for _, c := range kd.Status.Components {
		v, ok := want[c.Name]
		if !ok || v == "" {
			continue
		}
		if c.Version != v || c.TargetVersion != "" {
			t.Errorf("status.components says %s runs %s (target %q), want %s", c.Name, c.Version, c.TargetVersion, v)
		}
		perHost := map[string]string{}
		for _, h := range c.Hosts {
			perHost[h] = v
		}
		checkInstances(t, dc, kd, c.Name, perHost)
	}
}

// checkInstances checks, for each host, the version status records for a
// component and the one its process reports over SSH ("" = not running).
func checkInstances(t testing.TB, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, name string, want map[string]string) {
	t.Helper()
	var status kaov1.ComponentStatus
	for _, c := range kd.Status.Components {
		if c.Name == name {
			status = c
		}
	}
	for host, v := range want {
		i := slices.IndexFunc(status.Instances, func(in kaov1.ComponentInstance) bool { return in.Host == host })
		if i < 0 || status.Instances[i].Version != v {
			t.Errorf("status.components[%s].instances has no %s running %q: %+v", name, host, v, status.Instances)
		}
		h, err := dc.Host(host)
		if err != nil {
			t.Fatal(err)
		}
		if got := hostServices(t, dc, []hosts.Host{h})[host+"/"+kaoServices[name]][1]; got != v {
			t.Errorf("%s on %s runs %q, want %q", name, host, got, v)
		}
	}
}

// bundleManifest reads the bundle's default versions.
func bundleManifest(t testing.TB) bundle.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(artifactsDir, bundle.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m := bundle.Manifest{}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// upgradeProber sends requests through the deployment's endpoint while an
// upgrade runs and records every failure, and samples each host's
// karmada-aggregated-apiserver /readyz.
type upgradeProber struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	requests map[string]int
	failures []string
	// blips are failed /readyz checks fewer than readiness.Fall in a row:
	// /readyz is a load balancer's health check, which keeps a server in
	// rotation through them (an etcd read slower than the check's 2 s on
	// a loaded machine fails one); they are logged, not failures.
	blips []string
	// downTogether records samples in which more than one host's
	// karmada-aggregated-apiserver was not ready.
	downTogether []string
	samples      int
}

func startUpgradeProber(t *testing.T, kd *kaov1.KarmadaDeployment, nodes []hosts.Host) *upgradeProber {
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
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-upgrade"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	aggregated := map[string]*kubernetes.Clientset{}
	for _, h := range nodes {
		c := rest.CopyConfig(cfg)
		c.Host = "https://" + h.Address + ":7443"
		if aggregated[h.Name], err = kubernetes.NewForConfig(c); err != nil {
			t.Fatal(err)
		}
	}
	policies := schema.GroupVersionResource{Group: "policy.karmada.io", Version: "v1alpha1", Resource: "propagationpolicies"}
	ctx, cancel := context.WithCancel(context.Background())
	p := &upgradeProber{cancel: cancel, done: make(chan struct{}), requests: map[string]int{}}
	fail := func(what string, err error) {
		if ctx.Err() != nil {
			// stop cut the round short: its requests end canceled.
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.requests[what]++
		if err != nil {
			p.failures = append(p.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), what, err))
		}
	}
	go func() {
		defer close(p.done)
		readyzFails := 0 // failed /readyz checks in a row
		for i := 0; ctx.Err() == nil; i++ {
			_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				readyzFails++
			} else {
				readyzFails = 0
			}
			if err != nil && readyzFails < readiness.Fall && ctx.Err() == nil {
				p.mu.Lock()
				p.blips = append(p.blips, fmt.Sprintf("%s GET /readyz: %s", time.Now().Format("15:04:05.000"), truncate(err.Error(), 300)))
				p.mu.Unlock()
				err = nil
			}
			fail("GET /readyz", err)
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/cluster.karmada.io/v1alpha1/clusters").DoRaw(ctx)
			if err != nil {
				// The body says which part of karmada-apiserver's
				// aggregator answered: "service unavailable" (no endpoint,
				// or the APIService not Available) or the proxy's error.
				err = fmt.Errorf("%w; body %q", err, truncate(string(body), 300))
			}
			fail("list clusters (karmada-aggregated-apiserver)", err)
			pp := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
				"metadata": map[string]any{"name": fmt.Sprintf("probe-%d", i), "namespace": "e2e-upgrade"},
				"spec": map[string]any{
					"resourceSelectors": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}},
					"placement":         map[string]any{"clusterAffinity": map[string]any{"clusterNames": []any{"member1"}}},
				},
			}}
			_, err = dyn.Resource(policies).Namespace("e2e-upgrade").Create(ctx, pp, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			fail("dry-run create PropagationPolicy (karmada-webhook)", err)

			down := []string{}
			for _, h := range nodes {
				if _, err := aggregated[h.Name].Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
					down = append(down, h.Name)
				}
			}
			if ctx.Err() != nil {
				break
			}
			p.mu.Lock()
			p.samples++
			if len(down) > 1 {
				p.downTogether = append(p.downTogether, time.Now().Format("15:04:05.000")+" "+strings.Join(down, ","))
			}
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-p.done })
	return p
}

// stop ends the prober and fails t on any failed request, or on a sample
// with two hosts' aggregated API servers down at once. It returns the
// failed requests, each starting with its time of day.
func (p *upgradeProber) stop(t *testing.T) []string {
	t.Helper()
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("the prober sent %v requests through the endpoint and sampled every host's karmada-aggregated-apiserver %d times", p.requests, p.samples)
	for _, b := range p.blips {
		t.Logf("a failed /readyz check, fewer than %d in a row (a load balancer keeps the server): %s", readiness.Fall, b)
	}
	if p.samples < 100 {
		t.Errorf("only %d samples: the prober proves nothing", p.samples)
	}
	for i, f := range p.failures {
		if i == 10 {
			t.Errorf("... %d failures in all", len(p.failures))
			break
		}
		t.Errorf("a request failed during the upgrade: %s", f)
	}
	for i, d := range p.downTogether {
		if i == 10 {
			break
		}
		t.Errorf("more than one host's karmada-aggregated-apiserver was down at once: %s", d)
	}
	return slices.Clone(p.failures)
}

// printRunLogsAround logs the lines of the runs' logs (ConfigMap names)
// stamped within three seconds of each failure (which starts with its time
// of day, 15:04:05.000), to show what the run was doing then.
// aggregatedRestarts counts the restarts of karmada-aggregated-apiserver
// that succeeded in the deployment's last run, from its log.
func aggregatedRestarts(t *testing.T, kd *kaov1.KarmadaDeployment) int {
	t.Helper()
	n := 0
	for _, l := range stampedLines(lastRunLog(t, kd)) {
		if strings.HasPrefix(l.rest, "changed") && strings.Contains(l.rest, "Restart | Restart karmada-aggregated-apiserver") {
			n++
		}
	}
	return n
}

// printAggregatorJournal logs what the endpoint host's karmada-apiserver
// said about the aggregated APIs from 20 s before the first failure to 20 s
// after the last: its aggregator logs the endpoints it could not resolve
// and the proxy errors.
func printAggregatorJournal(t *testing.T, dc *hosts.Cluster, host string, failures []string) {
	t.Helper()
	first, last := strings.Fields(failures[0])[0], strings.Fields(failures[len(failures)-1])[0]
	from, err1 := time.Parse("15:04:05.000", first)
	to, err2 := time.Parse("15:04:05.000", last)
	if err1 != nil || err2 != nil {
		return
	}
	script := fmt.Sprintf("journalctl -u karmada-apiserver --no-pager -o short-precise --since %s --until %s | "+
		"grep -iE 'aggregat|resolv|proxy|endpoint|cluster.karmada.io|unavailable' | tail -60",
		from.Add(-20*time.Second).Format("15:04:05"), to.Add(20*time.Second).Format("15:04:05"))
	out, err := dc.Run(context.Background(), host, script)
	t.Logf("%s's karmada-apiserver journal around the failures (%v):\n%s", host, err, out)
}

func printRunLogsAround(t *testing.T, kd *kaov1.KarmadaDeployment, failures []string, logs ...string) {
	t.Helper()
	var at []time.Duration
	for _, f := range failures {
		if ts, err := time.Parse("15:04:05.000", strings.Fields(f)[0]); err == nil {
			at = append(at, ts.Sub(ts.Truncate(24*time.Hour)))
		}
	}
	for _, name := range logs {
		cm := &corev1.ConfigMap{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: kd.Namespace, Name: name}, cm); err != nil {
			t.Logf("run log %s: %v", name, err)
			continue
		}
		text, err := runLogText(cm)
		if err != nil {
			t.Log(err)
			continue
		}
		var near []string
		for _, l := range stampedLines(text) {
			of := l.at.Sub(l.at.Truncate(24 * time.Hour))
			for _, a := range at {
				if d := of - a; d > -3*time.Second && d < 3*time.Second {
					near = append(near, l.at.Format(time.RFC3339Nano)+" "+l.rest)
					break
				}
			}
		}
		if len(near) > 0 {
			t.Logf("run log %s around the failures:\n%s", name, strings.Join(near, "\n"))
		}
	}
}

// planUpgrade plans the full upgrade to upgradeTo with annotation
// kao.io/plan (docs/plan.md) and checks the plan on the hosts: it names
// upgrade.yml and the components it would move; it lists, host by host in
// rollout order, each moving component's new program and its restart
// (every component in the order upgrade.yml moves them, each on its hosts
// in spec order); and it changed nothing: every file under /etc,
// /usr/local and /var/lib (but etcd's data and systemd's own state) on
// every host has the content, mode and owner it had, no service restarted,
// and status still shows the last run and version. The deployment is left
// with the annotation and the new version, planned.
func planUpgrade(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, nodes []hosts.Host) {
	t.Helper()
	sums, pids := hostFiles(t, dc, nodes), servicePIDs(t, dc, nodes)
	was := get(t, kd)
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, kaov1.PlanAnnotation, "true")
		cur.Spec.Version = upgradeTo
	})
	var planned *kaov1.KarmadaDeployment
	waitFor(t, runWait, "the plan of the upgrade", func() bool {
		planned = get(t, kd)
		pl := planned.Status.Plan
		return pl != nil && pl.Generation == planned.Generation && planned.Status.Progress == nil
	})
	pl := planned.Status.Plan
	t.Logf("plan: %s", pl.Message)
	if pl.Result != kaov1.PlanPlanned || pl.Playbook != "upgrade.yml" {
		t.Fatalf("the plan of the upgrade: %s with %s: %s", pl.Result, pl.Playbook, pl.Message)
	}
	if c := meta.FindStatusCondition(planned.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.PlannedReason {
		t.Errorf("PlaybookSucceeded after the plan: %+v", c)
	}
	if !slices.ContainsFunc(deploymentEvents(t, kd), func(e eventsv1.Event) bool { return e.Reason == kaov1.PlannedReason }) {
		t.Error("no Planned Event")
	}
	// What check mode cannot show is named, not guessed at.
	if !slices.ContainsFunc(pl.NotPlanned, func(s string) bool { return strings.HasPrefix(s, "the install run that ends the upgrade") }) ||
		!strings.Contains(pl.Message, "not planned: Karmada's objects, the install that ends the upgrade") {
		t.Errorf("the plan does not say what it leaves out: %q; %s", pl.NotPlanned, pl.Message)
	}

	// Rollout order: the restarts, component after component as
	// status.plan.upgrade lists them, each on its hosts in order, and each
	// restart after the new program on that host.
	var want []string
	for _, c := range pl.Upgrade {
		for _, h := range c.Hosts {
			want = append(want, c.Name+"@"+h)
		}
	}
	var restarts []string
	programs := map[string]int{}
	for i, it := range pl.Items {
		switch it.Kind {
		case kaov1.DriftBinary:
			programs[filepath.Base(it.Item)+"@"+it.Host] = i
		case kaov1.DriftRestart:
			name := strings.TrimSuffix(it.Item, ".service")
			restarts = append(restarts, name+"@"+it.Host)
			if at, ok := programs[name+"@"+it.Host]; !ok || at > i {
				t.Errorf("the plan restarts %s on %s without, or before, its new program", name, it.Host)
			}
		}
	}
	if len(want) == 0 || !slices.Equal(restarts, want) {
		t.Errorf("the plan's restarts are %v, want %v (status.plan.upgrade in rollout order)", restarts, want)
	}
	if slices.ContainsFunc(pl.Upgrade, func(c kaov1.ComponentUpgrade) bool { return c.Name == "karmada-scheduler" }) {
		t.Errorf("the plan moves karmada-scheduler, which runs %s already: %+v", upgradeTo, pl.Upgrade)
	}

	checkPlanChangedNothing(t, dc, nodes, nodes, sums, pids)
	if planned.Status.LastRun.ID != was.Status.LastRun.ID || planned.Status.Version != was.Status.Version {
		t.Errorf("the plan changed status.lastRun (%s, was %s) or status.version (%s, was %s)",
			planned.Status.LastRun.ID, was.Status.LastRun.ID, planned.Status.Version, was.Status.Version)
	}
	// And nothing runs while the annotation stays.
	time.Sleep(5 * time.Second)
	if cur := get(t, kd); cur.Status.Progress != nil || cur.Status.LastRun.ID != was.Status.LastRun.ID {
		t.Fatalf("a run started while the generation was planned: %+v", cur.Status.Progress)
	}
}

// checkPlanChangedNothing checks that every file a run could write on the
// hosts hs is as sums recorded it before a plan, and that no service of
// the hosts running ran restarted (pids, recorded with it).
func checkPlanChangedNothing(t *testing.T, dc *hosts.Cluster, hs, running []hosts.Host, sums, pids map[string]string) {
	t.Helper()
	if after := hostFiles(t, dc, hs); !maps.Equal(after, sums) {
		for k, v := range after {
			if sums[k] != v {
				t.Errorf("the plan changed %s: %q, was %q", k, v, sums[k])
			}
		}
		for k := range sums {
			if _, ok := after[k]; !ok {
				t.Errorf("the plan removed %s", k)
			}
		}
	}
	for key, pid := range servicePIDs(t, dc, running) {
		if pid != pids[key] {
			t.Errorf("%s restarted during the plan (PID %s, then %s)", key, pids[key], pid)
		}
	}
}

// planHostAddition plans adding the empty host added, with
// karmada-apiserver, to the running plane of nodes: the plan must be
// install.yml's, list on the new host the program, unit, certificate and
// start of karmada-apiserver, list the serving certificate that must now name it
// among those it would issue and the restart it causes on each running API
// server, on that host, in spec order, say what it leaves out, and change nothing:
// no file on any host, the new one included, no service restarted, the PKI
// Secret as it was (the plan's certificates live in memory), status.lastRun
// the last applied run's. The addition is then taken back with the
// annotation, and the run of the unchanged spec succeeds.
func planHostAddition(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, nodes []hosts.Host, added hosts.Host) {
	all := append(slices.Clone(nodes), added)
	sums, pids := hostFiles(t, dc, all), servicePIDs(t, dc, nodes)
	secretBefore := readPKISecret(t, kd)
	was := get(t, kd)
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, kaov1.PlanAnnotation, "add-"+added.Name)
		cur.Spec.Hosts = append(cur.Spec.Hosts, kaov1.Host{Name: added.Name, Address: added.Address, Port: int32(added.Port),
			User: added.User, Roles: []kaov1.HostRole{kaov1.APIServerRole}})
	})
	var planned *kaov1.KarmadaDeployment
	waitFor(t, runWait, "the plan of the host addition", func() bool {
		planned = get(t, kd)
		pl := planned.Status.Plan
		return pl != nil && pl.Generation == planned.Generation && pl.Request == "add-"+added.Name && planned.Status.Progress == nil
	})
	pl := planned.Status.Plan
	t.Logf("plan: %s", pl.Message)
	if pl.Result != kaov1.PlanPlanned || pl.Playbook != "install.yml" {
		t.Fatalf("the plan of the host addition: %s with %s: %s", pl.Result, pl.Playbook, pl.Message)
	}
	// karmada-apiserver's program is Kubernetes' kube-apiserver; its start
	// is a Service item although check mode wrote no unit for systemd.
	want := map[string]kaov1.DriftKind{
		"/usr/local/bin/kube-apiserver":                 kaov1.DriftBinary,
		"/etc/systemd/system/karmada-apiserver.service": kaov1.DriftUnit,
		"/etc/karmada/pki/karmada-apiserver-server.crt": kaov1.DriftCertificate,
		"karmada-apiserver.service":                     kaov1.DriftService,
	}
	for _, it := range pl.Items {
		if it.Host == added.Name && want[it.Item] == it.Kind {
			delete(want, it.Item)
		}
	}
	if len(want) > 0 {
		t.Errorf("the plan lacks, on %s, %v: %+v", added.Name, want, pl.Items)
	}
	// The serving certificate every running API server has must name the
	// new host too: each of them restarts, one at a time in spec order,
	// after its new certificate. Each restart is its own host's, though a
	// role's restarts run once and are delegated to each host in turn.
	var restarts, wantRestarts []string
	certAt := map[string]int{}
	for i, it := range pl.Items {
		switch {
		case it.Kind == kaov1.DriftCertificate && it.Item == "/etc/karmada/pki/karmada-apiserver-server.crt":
			certAt[it.Host] = i
		case it.Kind == kaov1.DriftRestart && it.Item == "karmada-apiserver.service":
			restarts = append(restarts, it.Host)
			if at, ok := certAt[it.Host]; !ok || at > i {
				t.Errorf("the plan restarts karmada-apiserver on %s without, or before, its new certificate", it.Host)
			}
		}
	}
	for _, n := range nodes {
		wantRestarts = append(wantRestarts, n.Name)
	}
	if !slices.Equal(restarts, wantRestarts) {
		t.Errorf("the plan restarts karmada-apiserver on %v, want %v (each running one, in spec order)", restarts, wantRestarts)
	}
	if !slices.Contains(pl.Certificates, pki.APIServerServer) {
		t.Errorf("the plan would not issue %s, which must now name %s: %v", pki.APIServerServer, added.Name, pl.Certificates)
	}
	if !slices.ContainsFunc(pl.NotPlanned, func(s string) bool { return strings.HasPrefix(s, "Karmada's objects") }) {
		t.Errorf("the plan does not say it leaves Karmada's objects out: %q", pl.NotPlanned)
	}
	checkPlanChangedNothing(t, dc, all, nodes, sums, pids)
	if after := readPKISecret(t, kd); !maps.EqualFunc(after, secretBefore, bytes.Equal) {
		t.Error("the plan changed the PKI Secret: its certificates must stay in memory")
	}
	if planned.Status.LastRun.ID != was.Status.LastRun.ID {
		t.Errorf("the plan changed status.lastRun: %s, was %s", planned.Status.LastRun.ID, was.Status.LastRun.ID)
	}

	// Taken back: the spec as applied, the annotation gone.
	changeDeployment(t, kd, func(cur *kaov1.KarmadaDeployment) {
		delete(cur.Annotations, kaov1.PlanAnnotation)
		cur.Spec.Hosts = slices.DeleteFunc(cur.Spec.Hosts, func(h kaov1.Host) bool { return h.Name == added.Name })
	})
	if done := waitForNextRun(t, kd, was.Status.LastRun.ID); done.Status.LastRun.Result != kaov1.RunSucceeded {
		t.Errorf("the run of the spec without the addition failed: %+v", done.Status.LastRun)
	}
}

// hostFiles maps "host:path" to the sha256 of the file's content and
// "host:path mode" to its mode and owner, for every file a kao run could
// write on the hosts: under /etc, /usr/local and /var/lib, but etcd's data
// and systemd's own state, which change on their own.
func hostFiles(t *testing.T, dc *hosts.Cluster, hs []hosts.Host) map[string]string {
	t.Helper()
	// One pass for modes and owners, one for the content: a process per
	// file would take seconds per host.
	const script = `set -e
list() { find /etc /usr/local /var/lib -xdev \( -path /var/lib/etcd -o -path /var/lib/karmada-etcd -o -path /var/lib/systemd \) -prune -o -type f -print0; }
list | xargs -0 stat -c 'S %a %U:%G %n'
list | xargs -0 sha256sum | sed 's/^/H /'`
	out := map[string]string{}
	for _, h := range hs {
		text, err := dc.Run(context.Background(), h.Name, script)
		if err != nil {
			t.Fatalf("listing the files on %s: %v", h.Name, err)
		}
		before := len(out)
		for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
			switch kind, rest, _ := strings.Cut(line, " "); kind {
			case "S": // mode owner path
				mode, rest, _ := strings.Cut(rest, " ")
				owner, path, _ := strings.Cut(rest, " ")
				out[h.Name+":"+path+" mode"] = mode + " " + owner
			case "H": // sum, two spaces, path
				sum, path, _ := strings.Cut(rest, "  ")
				out[h.Name+":"+path] = sum
			}
		}
		// kao's units, certificates and programs alone are dozens of files.
		if len(out)-before < 100 {
			t.Fatalf("listing the files on %s found %d entries:\n%s", h.Name, len(out)-before, text)
		}
	}
	return out
}
