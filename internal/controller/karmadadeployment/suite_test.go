package karmadadeployment

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(controllertest.Main(m)) }

// runWait bounds a wait for a playbook run to end. A run of the test
// playbooks takes seconds on an idle machine; CI runs this package beside
// the e2e suites on two cores, where one took over a minute, so the bound
// only catches a run that never ends.
const runWait = 3 * time.Minute

// operator is a running manager with the KarmadaDeployment reconciler,
// watching one namespace.
type operator struct {
	reconciler *Reconciler
	stateDir   string
	stop       func()
}

// startOperator starts a manager for namespace ns with the real runner and the
// test playbooks. stateDir is reused when not empty, as after a restart.
func startOperator(t *testing.T, ns, stateDir string) *operator {
	t.Helper()
	return startOperatorWith(t, ns, stateDir, nil)
}

// startOperatorWith is startOperator with options changed by tune.
func startOperatorWith(t *testing.T, ns, stateDir string, tune func(*pipeline.Options)) *operator {
	t.Helper()
	controllertest.RequireEnv(t)
	if stateDir == "" {
		stateDir = testenv.StateDir(t)
	}
	op := &operator{stateDir: stateDir}
	opts := pipeline.Options{StateDir: stateDir, PlaybookDir: controllertest.PlaybookDir(), RunTimeout: 2 * time.Minute, ArtifactsDir: controllertest.CRDBundle, Policy: controllertest.TestPolicy}
	if tune != nil {
		tune(&opts)
	}
	op.stop = controllertest.Env.StartManager(t, controllertest.Scheme, ns, func(mgr ctrl.Manager) error {
		op.reconciler = &Reconciler{
			Client:          mgr.GetClient(),
			APIReader:       mgr.GetAPIReader(),
			Recorder:        mgr.GetEventRecorder("kao"),
			InClusterConfig: mgr.GetConfig(),
			Options:         opts,
		}
		return op.reconciler.SetupWithManager(mgr)
	})
	return op
}

// fakeKubeconfig is member kubeconfig content with a token that must never leak.
func fakeKubeconfig(member string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: https://127.0.0.1:6443
users:
- name: admin
  user:
    token: %[1]s-TOKEN-e5b1c0ffee4242deadbeef
contexts:
- name: %[1]s
  context: {cluster: %[1]s, user: admin}
current-context: %[1]s
`, member)
}

// newDeployment creates the member kubeconfig Secret and a Containerized
// KarmadaDeployment whose members pick the test playbook's behaviour.
func newDeployment(t *testing.T, ns, name string, paused bool, members ...string) *kaov1.KarmadaDeployment {
	t.Helper()
	return newDeploymentWith(t, ns, name, func(kd *kaov1.KarmadaDeployment) { kd.Spec.Paused = paused }, members...)
}

// newDeploymentWith is newDeployment with change applied to the
// deployment before it is created.
func newDeploymentWith(t testing.TB, ns, name string, change func(*kaov1.KarmadaDeployment), members ...string) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-members", Namespace: ns}, Data: map[string][]byte{}}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:      kaov1.ContainerizedMode,
			Version:   "v1.18.1",
			Artifacts: kaov1.ArtifactsSpec{ImageRegistry: controllertest.TestImageRegistry},
			// The test environment's API server is the host cluster; each
			// deployment gets a namespace of its own there.
			HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: ns + "-" + name},
			Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
		},
	}
	for _, m := range members {
		secret.Data[m] = []byte(fakeKubeconfig(m))
		kd.Spec.Members = append(kd.Spec.Members, kaov1.MemberSpec{
			Name: m, SyncMode: kaov1.PushSyncMode,
			KubeconfigSecretRef: kaov1.SecretKeyReference{Name: secret.Name, Key: m},
		})
	}
	change(kd)
	if err := controllertest.K8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := controllertest.K8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	return kd
}

// update changes the latest version of a deployment's spec or metadata,
// again on a conflict: the operator writes the object too (its finalizer).
func update(t *testing.T, kd *kaov1.KarmadaDeployment, change func(*kaov1.KarmadaDeployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := controllertest.Get(t, kd)
		change(cur)
		return controllertest.K8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitForEvent waits until an Event with the reason exists for the deployment.
func waitForEvent(t *testing.T, kd *kaov1.KarmadaDeployment, reason string) eventsv1.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range controllertest.DeploymentEvents(t, kd) {
			if e.Reason == reason {
				return e
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s Event for %s", reason, kd.Name)
	return eventsv1.Event{}
}
