package karmadadeployment

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/runner"
)

// TestAContainerizedPlanWaitsForTheAnnotationToGo proves the plan of a
// Containerized deployment's first generation: the run is install.yml in
// check mode (status.plan Planned, PlaybookSucceeded Planned, a Planned
// Event, nothing in status.lastRun), nothing runs while the annotation
// stays, and removing it applies the generation. What such a plan lists,
// a workload's apply as a server-side dry run of the host cluster, is
// proven on a real host cluster in test/e2e TestContainerizedInstall; plans
// of Binary deployments on real hosts in TestBinaryUpgrade.
func TestAContainerizedPlanWaitsForTheAnnotationToGo(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeploymentWith(t, ns, "planned", func(kd *kaov1.KarmadaDeployment) {
		metav1.SetMetaDataAnnotation(&kd.ObjectMeta, kaov1.PlanAnnotation, "true")
	}, "ok-a")
	planned := controllertest.WaitFor(t, kd, runWait, "the plan", func(kd *kaov1.KarmadaDeployment) bool {
		return kd.Status.Plan != nil && kd.Status.Progress == nil
	})
	p := planned.Status.Plan
	if p.Result != kaov1.PlanPlanned || p.Generation != planned.Generation || p.Request != "true" || p.Playbook != "install.yml" ||
		!strings.Contains(p.Message, "remove annotation "+kaov1.PlanAnnotation+" to apply it") {
		t.Errorf("status.plan of a Containerized deployment: %+v", p)
	}
	if c := meta.FindStatusCondition(planned.Status.Conditions, kaov1.PlaybookSucceededCondition); c == nil || c.Reason != kaov1.PlannedReason {
		t.Errorf("PlaybookSucceeded: %+v", c)
	}
	if e := waitForEvent(t, kd, kaov1.PlannedReason); e.Type != "Normal" {
		t.Errorf("the Planned Event is %s", e.Type)
	}
	time.Sleep(3 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.LastRun != nil || cur.Status.Progress != nil {
		t.Fatalf("a run started while the generation waited for the annotation to go: %+v %+v", cur.Status.LastRun, cur.Status.Progress)
	}

	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := controllertest.Get(t, kd)
		delete(cur.Annotations, kaov1.PlanAnnotation)
		return controllertest.K8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	done := controllertest.WaitFor(t, kd, runWait, "the run once the annotation went", lastRunIs(kaov1.RunSucceeded))
	if done.Status.LastRun.Generation != planned.Generation {
		t.Errorf("the run applied generation %d, the plan was of %d", done.Status.LastRun.Generation, planned.Generation)
	}
}

// TestPlanOfSaysWhatTheRunWouldDo proves status.plan from a plan's end: a
// finished plan lists its items with what the spec said before the run
// (moves, members, certificates) and sums it up in its message; one that
// did not finish says that what the run would do is unknown.
func TestPlanOfSaysWhatTheRunWouldDo(t *testing.T) {
	ran := &kaov1.KarmadaDeployment{}
	ran.Generation = 4
	spec := runner.Spec{Playbook: "/playbooks/upgrade.yml"}
	found := &planExtras{Request: "true", Join: []string{"edge"}, Unjoin: []string{"old"}, Certificates: []string{"karmada-apiserver-server"},
		Upgrade: []kaov1.ComponentUpgrade{{Name: "karmada-webhook", To: "v1.18.1", Hosts: []string{"node2"}}}}
	res := &runner.Result{ID: "run-1", Outcome: runner.Succeeded, Changes: []runner.Change{
		{Host: "node2", Task: "Binaries", Action: "ansible.builtin.copy", Item: "/usr/local/bin/karmada-webhook"},
		{Host: "node2", Task: "Restart", Action: "ansible.builtin.systemd", Item: "karmada-webhook", State: "restarted"},
	}}
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	p := planOf(ran, spec, res, found, now)
	want := "plan run-1 of generation 4: upgrade.yml would move karmada-webhook; change 1 item on node2; restart 1 service; " +
		"join edge; unjoin old; issue 1 certificate; not planned: Karmada's objects, the install that ends the upgrade (status.plan.notPlanned); " +
		"remove annotation kao.io/plan to apply it"
	if p.Result != kaov1.PlanPlanned || p.Message != want || p.Playbook != "upgrade.yml" || p.Generation != 4 || p.Request != "true" ||
		len(p.Items) != 2 || p.Items[1].Kind != kaov1.DriftRestart || !p.PlanTime.Time.Equal(now) {
		t.Errorf("status.plan of a finished plan: %+v\nmessage %q\nwant    %q", p, p.Message, want)
	}
	if len(p.NotPlanned) != 2 || !strings.HasPrefix(p.NotPlanned[1], "the install run that ends the upgrade") {
		t.Errorf("an upgrade's plan does not say that the install ending it is left out: %q", p.NotPlanned)
	}

	nothing := planOf(ran, runner.Spec{Playbook: "install.yml"}, &runner.Result{ID: "run-2", Outcome: runner.Succeeded}, &planExtras{}, now)
	if !strings.Contains(nothing.Message, "install.yml would change nothing on any host; not planned: Karmada's objects, the addons (status.plan.notPlanned)") {
		t.Errorf("a plan that finds nothing says %q", nothing.Message)
	}
	// An install plan says it leaves the user roles out when there are
	// some; a members.yml plan leaves nothing out (its joins are listed).
	withRoles := ran.DeepCopy()
	withRoles.Spec.Addons.UserRoles = []kaov1.UserRole{{Name: "motd"}, {Name: "disk"}}
	roles := planOf(withRoles, runner.Spec{Playbook: "install.yml"}, &runner.Result{ID: "run-4", Outcome: runner.Succeeded}, &planExtras{}, now)
	if len(roles.NotPlanned) != 3 || roles.NotPlanned[2] != "the user roles (2 in spec.addons.userRoles): their plays are your own, and kao does not run them in check mode" {
		t.Errorf("an install plan with user roles leaves out %q", roles.NotPlanned)
	}
	members := planOf(ran, runner.Spec{Playbook: "members.yml"}, &runner.Result{ID: "run-5", Outcome: runner.Succeeded}, found, now)
	if len(members.NotPlanned) != 0 || strings.Contains(members.Message, "not planned") {
		t.Errorf("a members.yml plan leaves out %q: %s", members.NotPlanned, members.Message)
	}
	failed := planOf(ran, spec, &runner.Result{ID: "run-3", Outcome: runner.Failed, Message: "node2 unreachable"}, found, now)
	if failed.Result != kaov1.PlanFailed || len(failed.Items) != 0 ||
		!strings.Contains(failed.Message, "did not finish, so what its run would do is unknown: node2 unreachable") {
		t.Errorf("status.plan of a failed plan: %+v", failed)
	}
}
