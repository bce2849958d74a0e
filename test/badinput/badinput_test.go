// Package badinput runs kao's corpus of invalid and hostile custom resources
// (testdata/, one case per file, described in testdata/README.md) against a
// real kube-apiserver with kao's CRDs and the real operator, and checks that
// every case ends as its file says: rejected by the API server with a
// message, refused by the operator with a condition and a Warning Event
// before any playbook runs, or accepted with every hostile string carried as
// data that Ansible never templates. docs/bad-input.md tabulates the corpus.
package badinput

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/testenv"
)

var (
	env    *testenv.Env
	scheme = runtime.NewScheme()
	// k8s reads and writes without a cache.
	k8s client.Client
	// operatorLog collects what the operator logs, to scan for secrets.
	operatorLog = &testenv.LogBuffer{}
)

// Waits of the test. The operator acts on a change within a second or two;
// a run that cannot reach its host ends within seconds (connectTimeoutSeconds: 1).
const (
	// operatorWait bounds the wait for the operator to refuse a case or finish a run.
	operatorWait = 90 * time.Second
	// pollInterval is how often the test looks at an object.
	pollInterval = 200 * time.Millisecond
	// baselineRunID names the run an installed baseline pretends to have finished.
	baselineRunID = "baseline-install"
)

// statusBackoff retries the test's status write while the operator writes
// the same object's status.
var statusBackoff = wait.Backoff{Steps: 20, Duration: 50 * time.Millisecond, Factor: 1.5, Jitter: 0.1, Cap: time.Second}

// caseParallelism is how many cases run at once: most of the time a case
// waits for the operator, so more than the machine's cores.
const caseParallelism = 8

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the bad-input corpus in -short mode: it needs a real kube-apiserver and ansible")
		os.Exit(0)
	}
	// Unless -parallel was given, run caseParallelism cases at once.
	if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == strconv.Itoa(goruntime.GOMAXPROCS(0)) {
		_ = f.Value.Set(strconv.Itoa(caseParallelism))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	_ = clientgoscheme.AddToScheme(scheme)
	_ = kaov1.AddToScheme(scheme)
	ctrl.SetLogger(zap.New(zap.WriteTo(operatorLog), zap.UseDevMode(true)))
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// harness is what every case shares: one namespace watched by one operator.
type harness struct {
	ns       string
	stateDir string
}

// TestBadInputCorpus runs every case of testdata/ against the API server and
// the operator, then checks that the operator still serves a valid
// deployment, that no secret reached its log, and that docs/bad-input.md
// lists every case.
func TestBadInputCorpus(t *testing.T) {
	start := time.Now()
	m := newMaterial(t)
	cases := loadCorpus(t, "testdata", m)
	if len(cases) < 40 {
		t.Errorf("the corpus has %d cases; issue 10 asks for at least 40", len(cases))
	}

	h := &harness{ns: testenv.Namespace(t, k8s, "kao-badinput-"), stateDir: testenv.StateDir(t)}
	root := testenv.RepoRoot()
	bundle := fakeBundle(t)
	// The operator runs as a user holding only kao's namespaced Role
	// (config/rbac-namespaced, the ClusterRole's rules in one namespace):
	// every case doubles as a check that those rules are enough.
	testenv.StartManagerAs(t, operatorUser(t, h.ns), scheme, []string{h.ns}, func(mgr ctrl.Manager) error {
		return controller.SetupAll(mgr, controller.Options{
			StateDir:                h.stateDir,
			PlaybookDir:             filepath.Join(root, "playbooks"),
			RolesPath:               []string{filepath.Join(root, "roles")},
			ArtifactsDir:            bundle,
			RunTimeout:              2 * time.Minute,
			MaxConcurrentReconciles: 4,
			ProbeInterval:           time.Minute,
			// What this administrator lets tenants ask for: one bundle
			// URL prefix (nothing answers there), control planes in the
			// operator's own cluster only in karmada-* namespaces, no
			// HostPath, no tolerations, no other bundle directory.
			Policy: controller.Policy{
				ArtifactURLs:        []string{"https://127.0.0.1:9/kao"},
				InClusterNamespaces: []string{"karmada-*"},
			},
		})
	})
	canary := h.createCanary(t, m)

	t.Run("case", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.id, func(t *testing.T) {
				t.Parallel()
				h.runCase(t, c)
			})
		}
	})

	t.Run("operator still serves a valid deployment", func(t *testing.T) { h.checkCanary(t, canary) })
	t.Run("no secret in the operator log", func(t *testing.T) {
		logged := operatorLog.String()
		for _, c := range cases {
			for _, s := range leakCandidates(c.secrets) {
				if strings.Contains(logged, s) {
					t.Errorf("the operator log holds a secret of case %s: %.40q...", c.id, s)
				}
			}
		}
	})
	t.Run("no kubeconfig ran a program in the operator", func(t *testing.T) {
		if _, err := os.Stat(m["EXEC_MARKER"]); !os.IsNotExist(err) {
			t.Errorf("a kubeconfig's exec plugin ran in the operator: %s exists (%v)", m["EXEC_MARKER"], err)
		}
	})
	t.Run("no request of the operator was forbidden", func(t *testing.T) {
		for _, line := range strings.Split(operatorLog.String(), "\n") {
			if strings.Contains(line, "forbidden") {
				t.Errorf("the operator's Role lacks a permission: %.300s", line)
			}
		}
	})
	t.Run("docs/bad-input.md lists every case", func(t *testing.T) { checkDocs(t, cases) })

	counts := map[string]int{}
	for _, c := range cases {
		key := c.expect.Outcome
		if c.expect.Today != "" {
			key += " (known gap, today " + c.expect.Today + ")"
		}
		counts[key]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	summary := []string{}
	for _, k := range keys {
		summary = append(summary, fmt.Sprintf("%s: %d", k, counts[k]))
	}
	t.Logf("%d cases in %s: %s", len(cases), time.Since(start).Round(time.Second), strings.Join(summary, ", "))
}

// runCase creates the case's objects and checks its outcome.
func (h *harness) runCase(t *testing.T, c *testCase) {
	ctx := context.Background()
	subject := c.subject()
	for _, o := range c.objects {
		o.SetNamespace(h.ns)
	}
	for _, o := range c.objects[:len(c.objects)-1] {
		if c.expect.Operation == onUpdate && o == c.base() && o.GetKind() == "KarmadaDeployment" {
			h.createInstalled(t, o)
			continue
		}
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("creating %s %s, which the case needs: %v", o.GetKind(), o.GetName(), err)
		}
	}

	var before *unstructured.Unstructured
	var err error
	if c.expect.Operation == onUpdate {
		before = h.get(t, subject)
		err = h.patch(ctx, c.base(), subject)
	} else {
		err = k8s.Create(ctx, subject)
	}

	switch c.expect.Outcome {
	case rejected:
		h.checkRejected(t, c, err, before)
	case refused:
		if err != nil {
			t.Fatalf("the API server rejected the object; the case expects the operator to refuse it: %v", err)
		}
		h.checkRefused(t, c, before)
	case accepted:
		if err != nil {
			t.Fatalf("the API server rejected the object; the case expects it accepted: %v", err)
		}
		h.checkAccepted(t, c)
	}
	h.checkNoLeaks(t, c, err)
}

// createInstalled creates a KarmadaDeployment and makes it look like kao
// installed it: created paused, given the status of a successful install of
// the generation it reaches when unpaused, then unpaused. No run starts: the
// last run of the current generation succeeded.
func (h *harness) createInstalled(t *testing.T, obj *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, kd); err != nil {
		t.Fatal(err)
	}
	if kd.Spec.Paused {
		t.Fatalf("the base of an Update case must not be paused: the test pauses it itself")
	}
	kd.Spec.Paused = true
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatalf("creating the deployment to update: %v", err)
	}
	// Wait for the finalizer: the operator's own update that adds it must not
	// land after the unpause below.
	h.waitFor(t, obj, "the operator's finalizer", func(u *unstructured.Unstructured) bool {
		return len(u.GetFinalizers()) > 0
	})
	installedGen := kd.Generation + 1
	now := metav1.Now()
	err := retry.RetryOnConflict(statusBackoff, func() error {
		cur := &kaov1.KarmadaDeployment{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(kd), cur); err != nil {
			return err
		}
		cur.Status.LastRun = &kaov1.RunStatus{
			ID: baselineRunID, Playbook: "install.yml", Generation: installedGen, Result: kaov1.RunSucceeded,
			StartTime: now, EndTime: now,
		}
		cur.Status.ObservedGeneration = installedGen
		cur.Status.Version = cur.Spec.Version
		cur.Status.Phase = kaov1.RunningPhase
		return k8s.Status().Update(ctx, cur)
	})
	if err != nil {
		t.Fatalf("writing the installed status: %v", err)
	}
	// Removing the field rather than setting it false keeps the stored spec
	// what a typed client writes back (paused is omitempty).
	if err := k8s.Patch(ctx, kd, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":null}}`))); err != nil {
		t.Fatal(err)
	}
	if kd.Generation != installedGen {
		t.Fatalf("unpausing moved the generation to %d, want %d", kd.Generation, installedGen)
	}
	got := h.waitFor(t, obj, "the operator to see the unpaused deployment", func(u *unstructured.Unstructured) bool {
		c := meta.FindStatusCondition(conditions(t, u), kaov1.PausedCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == installedGen
	})
	h.checkNoRun(t, got, baselineRunID)
}

// patch applies the subject of an Update case as a JSON merge patch.
func (h *harness) patch(ctx context.Context, base, subject *unstructured.Unstructured) error {
	p := subject.DeepCopy().Object
	delete(p, "apiVersion")
	delete(p, "kind")
	if md, ok := p["metadata"].(map[string]any); ok {
		delete(md, "name")
		delete(md, "namespace")
		if len(md) == 0 {
			delete(p, "metadata")
		}
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	target := base.DeepCopy()
	return k8s.Patch(ctx, target, client.RawPatch(types.MergePatchType, data))
}

// checkRejected checks an API rejection, and that a rejected update left the object as it was.
func (h *harness) checkRejected(t *testing.T, c *testCase, err error, before *unstructured.Unstructured) {
	t.Helper()
	want := strings.ReplaceAll(c.expect.Message, "{ns}", h.ns)
	if err == nil {
		t.Fatalf("the API server accepted the object; want a rejection containing %q", want)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid error containing %q, got %v", want, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not tell the user what is wrong:\n got: %v\nwant: ...%s...", err, want)
	}
	t.Logf("Rejected: %v", err)
	if before != nil {
		after := h.get(t, c.subject())
		if after.GetGeneration() != before.GetGeneration() {
			t.Errorf("the rejected update moved the generation from %d to %d", before.GetGeneration(), after.GetGeneration())
		}
		if after.GetKind() == "KarmadaDeployment" {
			h.checkNoRun(t, after, baselineRunID)
		}
	}
}

// checkRefused waits for the operator to refuse the subject, with the
// condition and a Warning Event and without starting a run. For a known gap
// where the operator runs the playbook instead, it checks that the run
// reached nothing and failed.
func (h *harness) checkRefused(t *testing.T, c *testCase, before *unstructured.Unstructured) {
	t.Helper()
	typ, status, reason, _ := parseCondition(c.expect.Condition)
	want := strings.ReplaceAll(c.expect.Message, "{ns}", h.ns)
	subject := c.subject()
	generation := h.get(t, subject).GetGeneration()
	prevRun := ""
	if before != nil {
		prevRun, _, _ = unstructured.NestedString(before.Object, "status", "lastRun", "id")
	}

	var cond *metav1.Condition
	ran := false
	got := h.waitFor(t, subject, fmt.Sprintf("condition %s or a finished run", c.expect.Condition), func(u *unstructured.Unstructured) bool {
		cond = meta.FindStatusCondition(conditions(t, u), typ)
		if cond != nil && string(cond.Status) == status && cond.Reason == reason && cond.ObservedGeneration == generation {
			return true
		}
		id, _, _ := unstructured.NestedString(u.Object, "status", "lastRun", "id")
		_, progress, _ := unstructured.NestedMap(u.Object, "status", "progress")
		ran = id != "" && id != prevRun && !progress
		return ran
	})

	if ran {
		if c.expect.Today != todayRun {
			t.Fatalf("the operator started a playbook run; want it refused with %s: %s", c.expect.Condition, want)
		}
		h.checkHarmlessRun(t, got)
		t.Logf("KNOWN GAP (still open): the operator ran the playbook; %s", c.expect.Gap)
		return
	}
	t.Logf("Refused: %s=%s/%s: %s", typ, cond.Status, cond.Reason, cond.Message)
	if !strings.Contains(cond.Message, want) {
		t.Errorf("condition %s says %q; want it to contain %q", typ, cond.Message, want)
	}
	if subject.GetKind() == "KarmadaDeployment" {
		h.checkNoRun(t, got, prevRun)
		if before != nil {
			h.checkKeptResults(t, before, got)
		}
	}
	eventReason := c.expect.Event
	if eventReason == "" {
		eventReason = reason
	}
	ev := h.waitForEvent(t, subject, eventReason, c.expect.Today == todayNoEvent)
	switch {
	case ev == nil:
		t.Logf("KNOWN GAP (still open): condition set but no Warning Event; %s", c.expect.Gap)
	case !strings.Contains(ev.Note, want):
		t.Errorf("the %s Event says %q; want it to contain %q", eventReason, ev.Note, want)
	case c.expect.Today == todayRun:
		t.Logf("KNOWN GAP CLOSED: the operator now refuses this case; drop expect.gap and expect.today")
	case c.expect.Today == todayNoEvent:
		t.Logf("KNOWN GAP CLOSED: the operator now emits the Event; drop expect.gap and expect.today")
	}
}

// checkNoRun checks that no playbook run started for a deployment since the
// run prevRun ("" for none): status.lastRun and status.progress, and its run
// directories under the state directory.
func (h *harness) checkNoRun(t *testing.T, u *unstructured.Unstructured, prevRun string) {
	t.Helper()
	id, _, _ := unstructured.NestedString(u.Object, "status", "lastRun", "id")
	if id != prevRun {
		t.Errorf("status.lastRun is run %q; want %q: a run started", id, prevRun)
	}
	if _, found, _ := unstructured.NestedMap(u.Object, "status", "progress"); found {
		t.Errorf("status.progress is set: a run started")
	}
	dir := filepath.Join(h.stateDir, "runs", string(u.GetUID()))
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		t.Errorf("the state directory holds run directories for this deployment: %s", dir)
	}
}

// checkKeptResults checks that a refused update kept what the operator had
// recorded for the installed generation.
func (h *harness) checkKeptResults(t *testing.T, before, after *unstructured.Unstructured) {
	t.Helper()
	for _, path := range [][]string{
		{"status", "lastRun"}, {"status", "observedGeneration"}, {"status", "version"},
	} {
		b, _, _ := unstructured.NestedFieldNoCopy(before.Object, path...)
		a, _, _ := unstructured.NestedFieldNoCopy(after.Object, path...)
		bj, _ := json.Marshal(b)
		aj, _ := json.Marshal(a)
		if string(aj) != string(bj) {
			t.Errorf("%s changed from %s to %s: a refused update must keep the installed generation's results",
				strings.Join(path, "."), bj, aj)
		}
	}
}

// checkHarmlessRun checks the run of a known gap: it reached no host and
// failed, and the deployment is paused so it does not retry.
func (h *harness) checkHarmlessRun(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	kd := &kaov1.KarmadaDeployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, kd); err != nil {
		t.Fatal(err)
	}
	for _, host := range kd.Spec.Hosts {
		if !strings.HasPrefix(host.Address, "203.0.113.") {
			t.Errorf("host %s is at %s, outside TEST-NET-3: a gap case's run could reach it", host.Name, host.Address)
		}
	}
	last := kd.Status.LastRun
	t.Logf("Run %s ended %s: %s; hosts %+v", last.ID, last.Result, last.Message, last.Hosts)
	if last.Result != kaov1.RunFailed {
		t.Errorf("the run of a gap case ended %s; want Failed (its hosts are unreachable)", last.Result)
	}
	for _, s := range last.Hosts {
		if s.Changed > 0 {
			t.Errorf("the run changed %d things on %s", s.Changed, s.Name)
		}
	}
	c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition)
	if c == nil || c.Reason != kaov1.HostUnreachableReason {
		t.Errorf("PlaybookSucceeded is %+v; want reason HostUnreachable", c)
	}
	if err := k8s.Patch(context.Background(), kd, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"paused":true}}`))); err != nil {
		t.Errorf("pausing the deployment so it does not retry: %v", err)
	}
}

// checkAccepted checks a case of hostile strings the API server accepts:
// no run starts (the deployment is paused), and the inventory the operator
// would hand Ansible carries every string of the object as an unsafe string.
func (h *harness) checkAccepted(t *testing.T, c *testCase) {
	t.Helper()
	got := h.waitFor(t, c.subject(), "the Paused condition", func(u *unstructured.Unstructured) bool {
		cond := meta.FindStatusCondition(conditions(t, u), kaov1.PausedCondition)
		return cond != nil && cond.Status == metav1.ConditionTrue
	})
	h.checkNoRun(t, got, "")
	kd := &kaov1.KarmadaDeployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, kd); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	inv, err := inventory.Build(kd, inventory.Options{MemberKubeconfigPath: func(m string) string {
		return filepath.Join(dir, "members", m+".kubeconfig")
	}})
	if err != nil {
		t.Fatalf("building the inventory: %v", err)
	}
	data, err := inv.FileJSON()
	if err != nil {
		t.Fatal(err)
	}
	checkUnsafe(t, data, c.expect.Unsafe)
	checkAnsibleLeavesStrings(t, dir, data, c.expect.Unsafe)
}

// checkNoLeaks checks that no Secret value of the case (nor MustNotLeak)
// appears in the API server's answer, the subject's status or its Events.
func (h *harness) checkNoLeaks(t *testing.T, c *testCase, apiErr error) {
	t.Helper()
	places := map[string]string{}
	if apiErr != nil {
		places["the API server's error"] = apiErr.Error()
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(c.subject().GroupVersionKind())
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: c.subject().GetName()}, u); err == nil {
		status, _ := json.Marshal(u.Object["status"])
		places["status"] = string(status)
	}
	for _, e := range h.events(t, c.subject()) {
		places["Event "+e.Reason] += e.Note + "\n"
	}
	for _, s := range leakCandidates(c.secrets) {
		for where, text := range places {
			if strings.Contains(text, s) {
				t.Errorf("%s holds a secret of the case: %.40q...", where, s)
			}
		}
	}
}

// leakCandidates drops values too short to be told from ordinary words.
func leakCandidates(secrets []string) []string {
	out := []string{}
	for _, s := range secrets {
		if s = strings.TrimSpace(s); len(s) >= 8 {
			out = append(out, s)
		}
	}
	return out
}

// get reads an object of the case's kind from the test namespace.
func (h *harness) get(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(obj.GroupVersionKind())
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: obj.GetName()}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// waitFor polls an object until cond holds.
func (h *harness) waitFor(t *testing.T, obj *unstructured.Unstructured, what string, cond func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	deadline := time.Now().Add(operatorWait)
	for {
		u := h.get(t, obj)
		if cond(u) {
			return u
		}
		if time.Now().After(deadline) {
			status, _ := json.MarshalIndent(u.Object["status"], "", "  ")
			t.Fatalf("timed out after %s waiting for %s; status:\n%s", operatorWait, what, status)
		}
		time.Sleep(pollInterval)
	}
}

// events lists the Events about an object.
func (h *harness) events(t *testing.T, obj *unstructured.Unstructured) []eventsv1.Event {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), list, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	out := []eventsv1.Event{}
	for _, e := range list.Items {
		if e.Regarding.Name == obj.GetName() && e.Regarding.Kind == obj.GetKind() {
			out = append(out, e)
		}
	}
	return out
}

// waitForEvent waits for a Warning Event with the reason about obj. With
// mayMiss (a known gap) it gives up after a short wait and returns nil.
func (h *harness) waitForEvent(t *testing.T, obj *unstructured.Unstructured, reason string, mayMiss bool) *eventsv1.Event {
	t.Helper()
	wait := 30 * time.Second
	if mayMiss {
		wait = 3 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		for _, e := range h.events(t, obj) {
			if e.Reason == reason && e.Type == "Warning" {
				return &e
			}
		}
		if time.Now().After(deadline) {
			if !mayMiss {
				t.Errorf("no Warning Event with reason %s about %s %s", reason, obj.GetKind(), obj.GetName())
			}
			return nil
		}
		time.Sleep(pollInterval)
	}
}

// conditions reads status.conditions of any kao kind.
func conditions(t *testing.T, u *unstructured.Unstructured) []metav1.Condition {
	t.Helper()
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	out := []metav1.Condition{}
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		c := metav1.Condition{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// createCanary creates a valid, paused deployment before the corpus runs.
func (h *harness) createCanary(t *testing.T, m material) *kaov1.KarmadaDeployment {
	t.Helper()
	ctx := context.Background()
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Name: "canary", Namespace: h.ns},
		Spec: kaov1.KarmadaDeploymentSpec{
			Mode:    kaov1.BinaryMode,
			Version: bundleVersions["karmada"],
			Hosts: []kaov1.Host{{Name: "node-1", Address: testHosts[0],
				Roles: []kaov1.HostRole{kaov1.EtcdRole, kaov1.APIServerRole, kaov1.ControlPlaneRole}}},
			SSH: &kaov1.SSHSpec{
				PrivateKeySecretRef: kaov1.SecretKeyReference{Name: "canary-ssh", Key: "id_ed25519"},
				KnownHostsSecretRef: kaov1.SecretKeyReference{Name: "canary-ssh", Key: "known_hosts"},
			},
			Etcd:   kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{}},
			Paused: true,
		},
	}
	secret := map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "canary-ssh", "namespace": h.ns},
		"stringData": map[string]any{"id_ed25519": m["SSH_PRIVATE_KEY"], "known_hosts": m["KNOWN_HOSTS"]},
	}
	if err := k8s.Create(ctx, &unstructured.Unstructured{Object: secret}); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, kd); err != nil {
		t.Fatal(err)
	}
	return kd
}

// checkCanary changes the canary after the corpus ran and checks that the
// operator still sees and reconciles it: no object of the corpus broke the
// operator's watch of the namespace (an object the API server stores but
// the operator cannot decode would).
func (h *harness) checkCanary(t *testing.T, kd *kaov1.KarmadaDeployment) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Patch(ctx, kd, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"kubernetesVersion":"v1.35.4"}}`))); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kaov1.GroupVersion.WithKind("KarmadaDeployment"))
	u.SetName(kd.Name)
	h.waitFor(t, u, "the operator to reconcile the canary's new generation", func(u *unstructured.Unstructured) bool {
		c := meta.FindStatusCondition(conditions(t, u), kaov1.PausedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == kd.Generation
	})
}

// checkDocs checks that docs/bad-input.md has a row for every case.
func checkDocs(t *testing.T, cases []*testCase) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "bad-input.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if !strings.Contains(string(data), "`"+c.id+"`") {
			t.Errorf("docs/bad-input.md has no row for case `%s`", c.id)
		}
	}
}
