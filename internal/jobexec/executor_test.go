package jobexec

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		var err error
		if env, err = testenv.Start(); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	if env != nil {
		_ = env.Stop()
	}
	os.Exit(code)
}

// newExecutor is an executor against the test's API server, which has no
// kubelet: a Job's pod is never created there, so a run waits for it until
// its context ends.
func newExecutor(t *testing.T) (*Executor, client.Client, string) {
	t.Helper()
	if env == nil {
		t.Skip("needs kube-apiserver: run without -short")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c, "jobexec")
	return &Executor{Client: c, Reader: c, Clientset: cs, Image: "kao-manager:test", PullPolicy: corev1.PullNever,
		StateDir: "/var/lib/kao", UID: ImageUID, GID: ImageUID}, c, ns
}

func testSpec(t *testing.T, ns string, id string) runner.Spec {
	key, known := testenv.SSHMaterial(t, "node1")
	return runner.Spec{
		ID: id, Dir: filepath.Join(t.TempDir(), "runs", id), Playbook: "/opt/kao/playbooks/install.yml",
		Inventory: []byte(`{"all":{"hosts":{"node1":{}}}}`), Groups: map[string][]string{"all": {"node1"}},
		ExtraVars:     map[string]any{"kao_pki_dir": map[string]string{"__ansible_unsafe": "/var/lib/kao/runs/x/secrets/pki"}},
		SSHPrivateKey: key, KnownHosts: known, Timeout: 10 * time.Minute,
		Owner: runner.Owner{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "owner", UID: "0b5e5d6a-0000-4000-8000-000000000001"},
		Meta:  map[string]string{"generation": "3"},
	}
}

// TestAJobRunCarriesItsRequestAndIsLeftToRunWhenTheOperatorStops starts a
// run, checks its Job and Secret, stops it as the operator's shutdown
// would, and finds it again.
func TestAJobRunCarriesItsRequestAndIsLeftToRunWhenTheOperatorStops(t *testing.T) {
	e, c, ns := newExecutor(t)
	spec := testSpec(t, ns, "20261126-120000-000-ab12")
	ctx, stop := context.WithCancelCause(context.Background())
	done := make(chan *runner.Result, 1)
	go func() {
		res, err := e.Run(ctx, spec)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()

	key := client.ObjectKey{Namespace: ns, Name: JobName(spec.ID)}
	secret := &corev1.Secret{}
	deadline := time.Now().Add(30 * time.Second)
	for c.Get(context.Background(), key, secret) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no Secret of the run")
		}
		time.Sleep(100 * time.Millisecond)
	}
	job := &batchv1.Job{}
	if err := c.Get(context.Background(), key, job); err != nil {
		t.Fatal(err)
	}
	pod := job.Spec.Template.Spec
	switch {
	case *job.Spec.BackoffLimit != 0:
		t.Errorf("the Job is retried: backoffLimit %d", *job.Spec.BackoffLimit)
	case *job.Spec.ActiveDeadlineSeconds != int64((spec.Timeout + deadlineMargin).Seconds()):
		t.Errorf("deadline %d, want the run's timeout and the margin", *job.Spec.ActiveDeadlineSeconds)
	case pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken:
		t.Error("the pod mounts a service account token")
	case pod.Containers[0].Image != e.Image || strings.Join(pod.Containers[0].Args, " ") != "run --request="+RequestPath:
		t.Errorf("the pod runs %s %v", pod.Containers[0].Image, pod.Containers[0].Args)
	case len(job.OwnerReferences) != 1 || string(job.OwnerReferences[0].UID) != spec.Owner.UID:
		t.Errorf("the Job is not owned by the run's object: %+v", job.OwnerReferences)
	case len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != job.UID:
		t.Errorf("the Secret is not owned by the Job: %+v", secret.OwnerReferences)
	}
	for _, s := range []string{string(spec.SSHPrivateKey), strings.Split(string(spec.SSHPrivateKey), "\n")[1]} {
		for what, text := range map[string]string{"Job": mustJSON(t, job), "pod args": strings.Join(pod.Containers[0].Args, " ")} {
			if strings.Contains(text, s) {
				t.Errorf("the %s holds the SSH key", what)
			}
		}
	}
	got, err := ReadRequestData(secret.Data[requestKey])
	if err != nil {
		t.Fatal(err)
	}
	if string(got.SSHPrivateKey) != string(spec.SSHPrivateKey) || got.Dir != spec.Dir || got.Timeout != spec.Timeout ||
		got.Groups["all"][0] != "node1" || got.ExtraVars["kao_pki_dir"] == nil {
		t.Errorf("the Secret's request differs from the run's spec: %+v", got)
	}

	stop(runner.ErrStopping)
	res := <-done
	if res.Outcome != runner.Detached {
		t.Fatalf("a run the operator stops following ended %s: %s", res.Outcome, res.Message)
	}
	if err := c.Get(context.Background(), key, &batchv1.Job{}); err != nil {
		t.Fatalf("the Job of a detached run is gone: %v", err)
	}
	meta, found, err := e.Find(context.Background(), spec.Owner, spec.ID)
	if err != nil || !found || meta["generation"] != "3" {
		t.Fatalf("Find: %v %v %v", meta, found, err)
	}
	other := spec.Owner
	other.UID = "0b5e5d6a-0000-4000-8000-000000000002"
	if _, found, err := e.Find(context.Background(), other, spec.ID); err != nil || found {
		t.Errorf("another object's Find found the run: %v %v", found, err)
	}
}

// TestCancellingAnAttachedRunDeletesItsJobAndSecret follows a run an earlier
// process started, cancels it as a deletion would, and checks that its Job
// and Secret are gone; attaching to a run without a Job is an error.
func TestCancellingAnAttachedRunDeletesItsJobAndSecret(t *testing.T) {
	e, c, ns := newExecutor(t)
	spec := testSpec(t, ns, "20261126-120001-000-cd34")
	ctx, stop := context.WithCancelCause(context.Background())
	go func() {
		time.Sleep(2 * time.Second)
		stop(runner.ErrStopping)
	}()
	if res, err := e.Run(ctx, spec); err != nil || res.Outcome != runner.Detached {
		t.Fatalf("starting the run: %v %+v", err, res)
	}

	attach := runner.Spec{ID: spec.ID, Dir: spec.Dir, Playbook: spec.Playbook, Owner: spec.Owner, Attach: true}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		time.Sleep(2 * time.Second)
		cancel()
	}()
	res, err := e.Run(ctx, attach)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != runner.Cancelled {
		t.Fatalf("a cancelled attached run ended %s: %s", res.Outcome, res.Message)
	}
	key := client.ObjectKey{Namespace: ns, Name: JobName(spec.ID)}
	if err := c.Get(context.Background(), key, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the cancelled run's Secret is left: %v", err)
	}
	job := &batchv1.Job{}
	if err := c.Get(context.Background(), key, job); err == nil && job.DeletionTimestamp == nil {
		t.Errorf("the cancelled run's Job is left")
	}
	if _, err := e.Run(context.Background(), attach); !errors.Is(err, ErrNoJob) {
		t.Errorf("attaching to a run without a Job: %v, want ErrNoJob", err)
	}
}

// TestARequestTooLargeForASecretIsRefusedBeforeAnyJob checks the size limit
// is said in words and leaves nothing behind.
func TestARequestTooLargeForASecretIsRefusedBeforeAnyJob(t *testing.T) {
	e, c, ns := newExecutor(t)
	spec := testSpec(t, ns, "20261126-120002-000-ef56")
	spec.Files = []runner.File{{Path: "user-roles/big/files/blob", Data: make([]byte, maxRequestBytes)}}
	_, err := e.Run(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "in-process executor") {
		t.Fatalf("want the size refused with the way out, got %v", err)
	}
	jobs := &batchv1.JobList{}
	if err := c.List(context.Background(), jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("Jobs left: %d %v", len(jobs.Items), err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
