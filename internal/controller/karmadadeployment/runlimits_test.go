package karmadadeployment

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// TestRunsBeyondTheNamespaceLimitWaitTheirTurn starts two deployments in one
// namespace with a limit of one run per namespace: the second waits with
// condition RunQueued while the first runs, starts when it ends (woken by
// that end: the fallback recheck is set far beyond the test's waits), and
// both succeed without their runs overlapping.
func TestRunsBeyondTheNamespaceLimitWaitTheirTurn(t *testing.T) {
	controllertest.RequireEnv(t)
	ns := controllertest.NewNamespace(t)
	startOperatorWith(t, ns, "", func(o *pipeline.Options) { o.RunLimits = pipeline.RunLimits{PerNamespace: 1, Recheck: time.Hour} })
	first := newDeployment(t, ns, "first", false, "slow-a")
	controllertest.WaitFor(t, first, 30*time.Second, "the first run under way", func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.Progress != nil
	})
	second := newDeployment(t, ns, "second", false, "ok-b")
	queued := controllertest.WaitFor(t, second, 30*time.Second, "the second deployment queued", func(kd *kaov1.KarmadaDeployment) bool {
		c := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition)
		return c != nil && c.Reason == kaov1.RunQueuedReason
	})
	c := meta.FindStatusCondition(queued.Status.Conditions, kaov1.PlaybookSucceededCondition)
	if c.Status != "Unknown" || !strings.Contains(c.Message, "namespace "+ns) || !strings.Contains(c.Message, "--max-concurrent-runs-per-namespace") {
		t.Errorf("the queued condition does not say which limit holds the run: %s %q", c.Status, c.Message)
	}
	if queued.Status.Progress != nil {
		t.Fatalf("the second deployment runs beside the first: %+v", queued.Status.Progress)
	}
	succeeded := func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.LastRun != nil && kd.Status.LastRun.Result == kaov1.RunSucceeded
	}
	a := controllertest.WaitFor(t, first, runWait, "the first run's success", succeeded)
	b := controllertest.WaitFor(t, second, runWait, "the second run's success, woken by the first's end", succeeded)
	if b.Status.LastRun.StartTime.Before(&a.Status.LastRun.EndTime) {
		t.Errorf("the runs overlap: the second started at %s, the first ended at %s", b.Status.LastRun.StartTime, a.Status.LastRun.EndTime)
	}
}
