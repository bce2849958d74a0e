// Package e2e tests kao end to end on the real test ground: a real
// kube-apiserver and etcd (make tools), the real ansible-playbook, and SSH
// into systemd-nspawn test hosts.
//
// Every long test (each on its own test hosts, node or host cluster, with its
// own namespace and operator) runs in parallel with the others, in one of the
// machine's test lanes (testenv.Lane), which the heavy tests of test/roles,
// test/incluster and test/image share: two on the 2-core CI machine, where
// three at once kept the CPU busy all the time. The longest start first, so
// that the last minutes of a run are not one long test alone. The short
// tests of the package's own helpers run first, alone. Checks that watch
// processes (TestChurn, TestInstallFaults) select them by their own state
// directory, and the readyz probers count a server out only when it
// refuses, answers "not ready" or stays silent for a load balancer's check
// timeout.
package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller"
	"github.com/kao-io/kao/internal/etcdsnapshot"
	"github.com/kao-io/kao/internal/testenv"
)

var (
	env *testenv.Env
	// artifactsDir is the offline bundle built by hack/artifacts.sh.
	artifactsDir string
	scheme       = runtime.NewScheme()
	k8s          client.Client
	// operatorLog collects what the operator logs, to scan for secrets.
	operatorLog = &testenv.LogBuffer{}
)

// runWait bounds a wait for one playbook run to end (an install, an
// upgrade, a plan, an addon's run). It only catches a run that never ends:
// on 2026-12-02 a Binary install took 7m45s and a single-component upgrade
// over 8 minutes on the 2-core machine beside another lane, and on CI's a
// Containerized upgrade took over 8 minutes. The same day, with a second
// heavy test beside it and nothing else, TestBinaryInstall's run enabling
// every addon took 9m55s and its re-run refused for a changed host key
// over 5 minutes.
const runWait = 15 * time.Minute

func TestMain(m *testing.M) {
	flag.Parse()
	releaseEveryLongTest()
	if testing.Short() {
		fmt.Println("skipping end-to-end tests in -short mode")
		os.Exit(0)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = kaov1.AddToScheme(scheme)
	ctrl.SetLogger(zap.New(zap.WriteTo(operatorLog)))
	artifactsDir = filepath.Join(testenv.RepoRoot(), "_out", "artifacts")
	build := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "artifacts.sh"))
	build.Env = append(os.Environ(), "KAO_ARTIFACTS_DIR="+artifactsDir)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the artifacts bundle (hack/artifacts.sh): %v\n", err)
		return 1
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	url, stopMetrics, err := testenv.ServeMetrics()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopMetrics()
	metricsURL = url
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startOperator runs kao's controllers, with the repository's playbooks and
// roles, for one namespace until the test ends. It returns the state directory.
func startOperator(t testing.TB, ns string) string {
	t.Helper()
	return startOperatorAs(t, env.Config, ns)
}

// startOperatorAs is startOperator for an operator that reaches its own
// cluster with cfg.
func startOperatorAs(t testing.TB, cfg *rest.Config, ns string) string {
	t.Helper()
	stateDir := testenv.StateDir(t)
	root := testenv.RepoRoot()
	testenv.StartManagerAs(t, cfg, scheme, []string{ns}, func(mgr ctrl.Manager) error {
		return controller.SetupAll(mgr, controller.Options{
			StateDir:                stateDir,
			PlaybookDir:             filepath.Join(root, "playbooks"),
			RolesPath:               []string{filepath.Join(root, "roles")},
			ArtifactsDir:            artifactsDir,
			RunTimeout:              10 * time.Minute,
			MaxConcurrentReconciles: 2,
			ProbeInterval:           3 * time.Second,
			ConfigMapUserRoles:      true,
			// The tests' host clusters are their own: inCluster control
			// planes may go into any of their namespaces.
			Policy: controller.Policy{InClusterNamespaces: []string{"*"}},
		})
	})
	return stateDir
}

func newNamespace(t testing.TB) string { return testenv.Namespace(t, k8s, "kao-e2e-") }

func createSecret(t testing.TB, ns, name string, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, kd *kaov1.KarmadaDeployment) *kaov1.KarmadaDeployment {
	t.Helper()
	cur := &kaov1.KarmadaDeployment{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(kd), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

// waitForRun waits for the deployment's current generation to finish a run.
func waitForRun(t testing.TB, kd *kaov1.KarmadaDeployment, timeout time.Duration) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cur := get(t, kd)
		if last := cur.Status.LastRun; last != nil && cur.Status.Progress == nil && last.Generation == cur.Generation {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("no finished run after %s; status: %+v", timeout, cur.Status)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func deploymentEvents(t testing.TB, kd *kaov1.KarmadaDeployment) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(kd.Namespace)); err != nil {
		t.Fatal(err)
	}
	out := []eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Name == kd.Name {
			out = append(out, e)
		}
	}
	return out
}

// runLogText is the text of a run's log ConfigMap (kept gzip-compressed).
func runLogText(cm *corev1.ConfigMap) (string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(cm.BinaryData[kaov1.LogKey]))
	if err != nil {
		return "", fmt.Errorf("run log %s: %w", cm.Name, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return "", fmt.Errorf("run log %s: %w", cm.Name, err)
	}
	return string(data), nil
}

// lastRunLog is the text of the log of the deployment's last run, which
// must have ended.
func lastRunLog(t testing.TB, kd *kaov1.KarmadaDeployment) string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: kd.Namespace, Name: kd.Status.LastRun.LogConfigMapName}
	if err := k8s.Get(context.Background(), key, cm); err != nil {
		t.Fatalf("reading the log of run %s: %v", kd.Status.LastRun.ID, err)
	}
	text, err := runLogText(cm)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// logLine is one line of a run log: its time stamp, and the rest of it
// (status, host, task, message).
type logLine struct {
	at   time.Time
	rest string
}

// stampedLines are the lines of a run log that start with a time stamp:
//
//	2026-01-02T03:04:05.678Z changed     member_a             task -- message
func stampedLines(text string) []logLine {
	var out []logLine
	for _, line := range strings.Split(text, "\n") {
		stamp, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil {
			out = append(out, logLine{at: at, rest: rest})
		}
	}
	return out
}

// waitForNextRun waits up to runWait for a finished run other than prev of
// the deployment's current generation.
func waitForNextRun(t testing.TB, kd *kaov1.KarmadaDeployment, prev string) *kaov1.KarmadaDeployment {
	t.Helper()
	deadline := time.Now().Add(runWait)
	for {
		cur := get(t, kd)
		if last := cur.Status.LastRun; last != nil && last.ID != prev && cur.Status.Progress == nil && last.Generation == cur.Generation {
			return cur
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run after %s within %s; status: %+v", prev, runWait, cur.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkBackup checks that status.upgrade.backup names a snapshot taken for
// this upgrade run, stored in the operator's state directory with the
// recorded checksum, and that an Event said so.
func checkBackup(t testing.TB, stateDir string, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	u := kd.Status.Upgrade
	if u == nil || u.Backup == nil || u.RunID != kd.Status.LastRun.ID {
		t.Errorf("no etcd snapshot in status.upgrade for run %s: %+v", kd.Status.LastRun.ID, u)
		return
	}
	b := u.Backup
	if !strings.HasPrefix(b.Location, filepath.Join(stateDir, "backups", kd.Namespace, kd.Name)+"/") || b.Revision == 0 ||
		b.Time.Before(&u.StartTime) || b.Time.After(kd.Status.LastRun.EndTime.Time) {
		t.Errorf("status.upgrade.backup: %+v (upgrade started %s)", b, u.StartTime)
	}
	sum, _, err := etcdsnapshot.FileSHA256(b.Location)
	if err != nil || sum != b.SHA256 {
		t.Errorf("the snapshot %s: sha256 %s (%v), status says %s", b.Location, sum, err, b.SHA256)
	}
	if st, err := os.Stat(b.Location); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot file %s is not private: %v %v", b.Location, st, err)
	}
	found := false
	for _, e := range deploymentEvents(t, kd) {
		found = found || e.Reason == "UpgradeBackupTaken" && strings.Contains(e.Note, b.Location)
	}
	if !found {
		t.Errorf("no UpgradeBackupTaken Event names %s", b.Location)
	}
}
