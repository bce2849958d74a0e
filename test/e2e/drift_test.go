package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/test/hosts"
)

// driftCheckAndRepair turns on drift checks every minute with autoRepair on
// an installed, healthy Binary control plane of three hosts, with a spec
// change that changes nothing on the hosts (version, the version running).
// Then, by hand: a flag is added to nodes[1]'s karmada-scheduler unit,
// nodes[2]'s karmada-controller-manager is stopped, and a line is appended
// to an etcd certificate on nodes[0]. The next check must name exactly those
// three (a check of the unchanged hosts before would have named nothing),
// with a Warning Event and its log kept; the repair run it starts must put
// all three back, and InSync is True again.
func driftCheckAndRepair(t *testing.T, dc *hosts.Cluster, kd *kaov1.KarmadaDeployment, version string) {
	nodes := dc.Hosts()
	updateSpec(t, kd, func(s *kaov1.KarmadaDeploymentSpec) {
		s.Version = version
		s.Components.Scheduler.Version = ""
		s.DriftCheck = &kaov1.DriftCheckSpec{Interval: metav1.Duration{Duration: time.Minute}, AutoRepair: true}
	})
	ran := waitForRun(t, kd, runWait)
	if r := ran.Status.LastRun; r.Result != kaov1.RunSucceeded {
		t.Fatalf("the run that turned drift checks on failed: %+v", r)
	}
	if c := meta.FindStatusCondition(ran.Status.Conditions, kaov1.InSyncCondition); c == nil || c.Status != metav1.ConditionTrue || c.Reason != kaov1.ConvergedReason {
		t.Errorf("after a successful run InSync is %+v, want True (%s)", c, kaov1.ConvergedReason)
	}

	const unit = "/etc/systemd/system/karmada-scheduler.service"
	mustRun(t, dc, nodes[1].Name, `sed -i 's|^\(ExecStart=.*\) \\$|\1 --v=4 \\|' `+unit+` && grep -q -- '--v=4' `+unit)
	mustRun(t, dc, nodes[2].Name, "systemctl stop karmada-controller-manager")
	cert := strings.TrimSpace(mustRun(t, dc, nodes[0].Name,
		`ls /etc/karmada/pki/etcd/*.crt | grep -v '/ca\.crt$' | head -n 1`))
	if cert == "" {
		t.Fatalf("no etcd certificate on %s", nodes[0].Name)
	}
	mustRun(t, dc, nodes[0].Name, "echo '# edited by hand' >> "+cert)
	edited := time.Now()

	var found *kaov1.KarmadaDeployment
	waitFor(t, 5*time.Minute, "a drift check that finds the three changes", func() bool {
		found = get(t, kd)
		d := found.Status.Drift
		return d != nil && d.Generation == found.Generation && d.CheckTime.After(edited) && d.Result != kaov1.DriftInSync
	})
	d := found.Status.Drift
	t.Logf("drift check %s: %s", d.RunID, d.Message)
	if d.Result != kaov1.DriftDrifted {
		t.Fatalf("the check did not find drift: %+v", d)
	}
	want := map[string]kaov1.DriftKind{
		nodes[1].Name + " " + unit:                            kaov1.DriftUnit,
		nodes[2].Name + " karmada-controller-manager.service": kaov1.DriftService,
		nodes[0].Name + " " + cert:                            kaov1.DriftCertificate,
	}
	for _, it := range d.Items {
		item := it.Item
		if it.Kind == kaov1.DriftService && !strings.HasSuffix(item, ".service") {
			item += ".service"
		}
		kind, ok := want[it.Host+" "+item]
		if !ok || kind != it.Kind {
			t.Errorf("the check names what was not changed by hand: %+v", it)
			continue
		}
		delete(want, it.Host+" "+item)
		switch it.Kind {
		case kaov1.DriftUnit:
			if !strings.Contains(it.Diff, "--v=4") {
				t.Errorf("the unit's item does not show the flag added: %q", it.Diff)
			}
		case kaov1.DriftCertificate:
			if it.Diff != "" {
				t.Errorf("a certificate's content is shown: %q", it.Diff)
			}
		}
	}
	for missing := range want {
		t.Errorf("the check does not name %s", missing)
	}
	if d.LogConfigMapName == "" {
		t.Error("the check that found drift kept no log")
	}
	warned := false
	for _, e := range deploymentEvents(t, kd) {
		warned = warned || e.Reason == kaov1.DriftDetectedReason && e.Type == corev1.EventTypeWarning
	}
	if !warned {
		t.Error("no DriftDetected Warning Event")
	}

	// autoRepair: the install runs once, and InSync is True again.
	repaired := waitForCondition(t, kd, kaov1.InSyncCondition, metav1.ConditionTrue, kaov1.ConvergedReason, runWait)
	r := repaired.Status.LastRun
	if repaired.Status.Drift.RepairRunID == "" || r.ID != repaired.Status.Drift.RepairRunID || r.Result != kaov1.RunSucceeded {
		t.Fatalf("the repair: status.drift %+v, last run %+v", repaired.Status.Drift, r)
	}
	if out := mustRun(t, dc, nodes[1].Name, "grep -c -- '--v=4' "+unit+" || true"); strings.TrimSpace(out) != "0" {
		t.Error("the repair left the flag added by hand in the scheduler's unit")
	}
	if out := mustRun(t, dc, nodes[2].Name, "systemctl is-active karmada-controller-manager || true"); strings.TrimSpace(out) != "active" {
		t.Errorf("the repair left karmada-controller-manager %s", strings.TrimSpace(out))
	}
	if out := mustRun(t, dc, nodes[0].Name, "grep -c 'edited by hand' "+cert+" || true"); strings.TrimSpace(out) != "0" {
		t.Error("the repair left the edited certificate")
	}
	t.Logf("drift found and repaired %s after the hand edits", time.Since(edited).Round(time.Second))
}
