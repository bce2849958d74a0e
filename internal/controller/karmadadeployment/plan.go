package karmadadeployment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/drift"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
)

// A plan (kaov1.PlanAnnotation) is the run a generation asks for, made in
// Ansible's check mode with diffs: the playbook decideRun's run would be
// (upgrade.yml, members.yml or install.yml), its plays on the hosts or the
// host cluster's workloads alone (pipeline.HostsTag, as a drift check;
// pipeline.UpgradeHostsTag for an upgrade), with the inventory of the new
// spec and the certificates the run would issue, made for the plan alone
// and never stored in the PKI Secret. Every task compares a host with what
// it would make it, and a workload's apply is a server-side dry run that
// the host cluster compares with what it holds; nothing changes on a host,
// in the host cluster, in Karmada or in kao's Secrets; an upgrade's
// pre-upgrade snapshot is not taken. What Ansible cannot see is told from
// the spec: the members the run would join or unjoin (the inventory's
// groups), the certificates it would issue, the components an upgrade
// would move. The result is status.plan; the generation then waits until
// the annotation is removed.

// planExtras is what a plan knows before its run ends, kept with the run
// (an operator that follows a plan in its Job after a restart records it
// too).
type planExtras struct {
	// Request is the annotation's value the plan answers.
	Request string `json:"request"`
	// Certificates are what the run would issue.
	Certificates []string `json:"certificates,omitempty"`
	// Join and Unjoin are the members the run would join and unjoin.
	Join   []string `json:"join,omitempty"`
	Unjoin []string `json:"unjoin,omitempty"`
	// Upgrade is what an upgrade would move.
	Upgrade []kaov1.ComponentUpgrade `json:"upgrade,omitempty"`
}

// planRequest is kaov1.PlanAnnotation's value as status.plan.request
// keeps it (at most 256 bytes), and whether the annotation is set.
func planRequest(kd *kaov1.KarmadaDeployment) (string, bool) {
	req, asked := kd.Annotations[kaov1.PlanAnnotation]
	return pipeline.TruncateString(req, 256), asked
}

// checkMode tells whether the run changes nothing: a drift check or a plan.
func (e runExtras) checkMode() bool { return e.check || e.plan != nil }

// describe records what the spec and the run's inventory groups say about
// the run a plan stands for.
func (p *planExtras) describe(kd *kaov1.KarmadaDeployment, groups map[string][]string, upgrade *upgradePlan) {
	p.Request, _ = planRequest(kd)
	p.Join = memberNames(groups[inventory.GroupMembersJoin])
	p.Unjoin = memberNames(groups[inventory.GroupMembersUnjoin])
	if upgrade != nil {
		p.Upgrade = upgrade.components
	}
}

// memberNames are the spec.members names of the inventory's member hosts.
func memberNames(hosts []string) []string {
	var names []string
	for _, h := range hosts {
		names = append(names, strings.TrimPrefix(h, inventory.MemberHostPrefix))
	}
	sort.Strings(names)
	return names
}

// planPKI is what ensurePKI would deploy, made in memory: the certificates
// of the deployment's PKI Secret with those the run would issue, and their
// names. The Secret and status are not touched.
func (r *Reconciler) planPKI(ctx context.Context, kd *kaov1.KarmadaDeployment, now time.Time) (pki.Bundle, []string, error) {
	secret, _, _, err := r.pkiSecret(ctx, kd)
	if err != nil {
		return nil, nil, err
	}
	bundle, _, changed, err := pki.Ensure(pki.Bundle(secret.Data), issueRequest(kd, len(secret.Data) > 0), now)
	if err != nil {
		return nil, nil, reason.Missing("planning the certificates from Secret %s: %v", secret.Name, err)
	}
	sort.Strings(changed)
	return bundle, changed, nil
}

// planOf is status.plan for a plan of ran (the deployment as the plan ran
// it) that ended with res.
func planOf(ran *kaov1.KarmadaDeployment, spec runner.Spec, res *runner.Result, found *planExtras, now time.Time) *kaov1.PlanStatus {
	p := &kaov1.PlanStatus{
		RunID: res.ID, Generation: ran.Generation, Request: found.Request, Playbook: filepath.Base(spec.Playbook),
		PlanTime: metav1.NewTime(now), MembersToJoin: found.Join, MembersToUnjoin: found.Unjoin,
		Certificates: found.Certificates, Upgrade: found.Upgrade,
	}
	if res.Outcome != runner.Succeeded {
		p.Result = kaov1.PlanFailed
		p.Message = pipeline.TruncateString(fmt.Sprintf("plan %s of generation %d did not finish, so what its run would do is unknown: %s",
			res.ID, ran.Generation, res.Message), 1024)
		return p
	}
	p.Result = kaov1.PlanPlanned
	p.Items, p.ItemsDropped = drift.PlanItems(res.Changes, res.ChangesDropped)
	left := notPlanned(ran, p.Playbook)
	var names []string
	for _, u := range left {
		names = append(names, u.name)
		p.NotPlanned = append(p.NotPlanned, u.what)
	}
	notShown := ""
	if len(names) > 0 {
		notShown = "; not planned: " + strings.Join(names, ", ") + " (status.plan.notPlanned)"
	}
	p.Message = pipeline.TruncateString(fmt.Sprintf("plan %s of generation %d: %s would %s%s; remove annotation %s to apply it",
		res.ID, ran.Generation, p.Playbook, planSummary(p), notShown, kaov1.PlanAnnotation), 1024)
	return p
}

// unplanned is a part of a run that its plan leaves out: a short name for
// the plan's message, and what status.plan.notPlanned says of it.
type unplanned struct{ name, what string }

// notPlanned lists what a run of playbook for kd would do beyond what its
// plan shows. A plan runs the plays on the hosts in check mode; the rest of
// the run is said here rather than guessed at: Karmada's objects, which
// every run applies again, the addons, which every install converges, the
// user roles, whose plays are the user's, and for an upgrade the install
// that ends it. The members a run joins and unjoins are not here: they are
// listed from the spec.
func notPlanned(kd *kaov1.KarmadaDeployment, playbook string) []unplanned {
	if playbook == pipeline.MembersPlaybook {
		return nil
	}
	left := []unplanned{{"Karmada's objects",
		"Karmada's objects in karmada-apiserver (the CRDs, the webhook configurations, the Cluster API's registration): every run applies them again, and check mode on the hosts does not compare them"}}
	if playbook == pipeline.UpgradePlaybook {
		return append(left, unplanned{"the install that ends the upgrade",
			"the install run that ends the upgrade and converges the rest of the spec: in check mode nothing moved, so it would list every move a second time; plan other edits on their own"})
	}
	left = append(left, unplanned{"the addons",
		"the addons (spec.addons): every install run installs those enabled and removes the others, on the control-plane hosts and in karmada-apiserver"})
	if n := len(kd.Spec.Addons.UserRoles); n > 0 {
		left = append(left, unplanned{"the user roles",
			fmt.Sprintf("the user roles (%d in spec.addons.userRoles): their plays are your own, and kao does not run them in check mode", n)})
	}
	return left
}

// planSummary says in words what a planned run would do.
func planSummary(p *kaov1.PlanStatus) string {
	var parts []string
	if n := len(p.Upgrade); n > 0 {
		var names []string
		for _, c := range p.Upgrade {
			names = append(names, c.Name)
		}
		parts = append(parts, "move "+strings.Join(names, ", "))
	}
	changes, restarts := 0, 0
	for _, it := range p.Items {
		if it.Kind == kaov1.DriftRestart {
			restarts++
		} else {
			changes++
		}
	}
	if changes > 0 || p.ItemsDropped > 0 {
		parts = append(parts, fmt.Sprintf("change %s on %s", counted(changes+int(p.ItemsDropped), "item"), driftHosts(p.Items)))
	}
	if restarts > 0 {
		parts = append(parts, "restart "+counted(restarts, "service"))
	}
	if n := len(p.MembersToJoin); n > 0 {
		parts = append(parts, "join "+strings.Join(p.MembersToJoin, ", "))
	}
	if n := len(p.MembersToUnjoin); n > 0 {
		parts = append(parts, "unjoin "+strings.Join(p.MembersToUnjoin, ", "))
	}
	if n := len(p.Certificates); n > 0 {
		parts = append(parts, "issue "+counted(n, "certificate"))
	}
	if len(parts) == 0 {
		return "change nothing on any host"
	}
	return strings.Join(parts, "; ")
}

// counted is n of a noun, in words: "1 item", "2 items".
func counted(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// endPlan records a plan's end: status.plan, the PlaybookSucceeded
// condition and an Event; nothing about runs (status.lastRun, the retry,
// what was applied). The plan's log is kept as a run's.
func (r *Reconciler) endPlan(ctx context.Context, log logr.Logger, kd *kaov1.KarmadaDeployment, spec runner.Spec, res *runner.Result, found *planExtras) {
	if res.Outcome == runner.Cancelled {
		// The deployment went, or the operator stops: nothing to record; a
		// plan not recorded is made again.
		if err := os.RemoveAll(spec.Dir); err != nil {
			log.Error(err, "Removing the plan's directory")
		}
		err := r.statusWriter().Update(ctx, kd, func(cur *kaov1.KarmadaDeployment) {
			if cur.Status.Progress != nil && cur.Status.Progress.RunID == spec.ID {
				cur.Status.Progress = nil
			}
		})
		if err != nil {
			log.Error(err, "Clearing the cancelled plan's progress")
		}
		r.runs.End(kd)
		r.forgetIfGone(ctx, kd, res)
		return
	}
	p := planOf(kd, spec, res, found, r.Clock.Now())
	p.LogConfigMapName = r.Logs(r.Client, r.APIReader).KeepRunLog(ctx, log, kd, spec.ID, res.Log)
	recorded := false
	err := r.statusWriter().Update(ctx, kd, func(cur *kaov1.KarmadaDeployment) {
		cur.Status.Progress = nil
		cur.Status.Plan = p.DeepCopy()
		if p.Result == kaov1.PlanPlanned {
			setCondition(cur, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.PlannedReason, p.Message)
		} else {
			setCondition(cur, kaov1.PlaybookSucceededCondition, metav1.ConditionUnknown, kaov1.PlanFailedReason, p.Message)
		}
		cur.Status.Phase = phaseFor(cur, false)
		recorded = true
	})
	if err != nil {
		log.Error(err, "Recording the plan")
	}
	if recorded {
		if p.Result == kaov1.PlanPlanned {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeNormal, kaov1.PlannedReason, "Plan", "%s", p.Message)
		} else {
			r.Recorder.Eventf(kd, nil, corev1.EventTypeWarning, kaov1.PlanFailedReason, "Plan", "%s", p.Message)
		}
	}
	r.runs.End(kd)
}
