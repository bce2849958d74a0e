package karmadadeployment

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/controllertest"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// TestDecideRunWaitsForARestore proves the deployment side of the mutual
// exclusion: whatever else is due, no run starts while an EtcdRestore holds
// the deployment.
func TestDecideRunWaitsForARestore(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	succeeded := &kaov1.RunStatus{Generation: 1, Result: kaov1.RunSucceeded}
	failed := &kaov1.RunStatus{Generation: 2, Result: kaov1.RunFailed}
	due := &kaov1.RetryStatus{Failures: 1, Generation: 2, NextRetryTime: pipeline.TimePtr(now.Add(-time.Second))}
	tests := []struct {
		name string
		// generation is the deployment's spec generation.
		generation int64
		// holder is the value of kaov1.RestoreInProgressAnnotation ("" for none).
		holder string
		// last and retry are status.lastRun and status.retry.
		last  *kaov1.RunStatus
		retry *kaov1.RetryStatus
		// wantRun says whether a run starts.
		wantRun bool
	}{
		{name: "nothing ran yet, no restore", generation: 1, wantRun: true},
		{name: "nothing ran yet, a restore holds it", generation: 1, holder: "r1"},
		{name: "a new generation, a restore holds it", generation: 2, holder: "r1", last: succeeded},
		{name: "a retry is due, a restore holds it", generation: 2, holder: "r1", last: failed, retry: due},
		{name: "a retry is due, no restore", generation: 2, last: failed, retry: due, wantRun: true},
		{name: "up to date, no restore", generation: 1, last: succeeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Generation: tc.generation}}
			kd.Status.LastRun, kd.Status.Retry = tc.last, tc.retry
			if tc.holder != "" {
				kd.Annotations = map[string]string{kaov1.RestoreInProgressAnnotation: tc.holder}
			}
			d := decideRun(kd, now, "")
			if d.run != tc.wantRun || d.wait != 0 && tc.holder != "" {
				t.Fatalf("decideRun = %+v, want run=%v", d, tc.wantRun)
			}
			if tc.holder != "" && !strings.Contains(d.reason, "EtcdRestore "+tc.holder) {
				t.Errorf("the reason does not name the restore: %q", d.reason)
			}
		})
	}
}

// TestDeploymentWaitsWhileARestoreHoldsIt runs the KarmadaDeployment
// reconciler: a new generation of a deployment that an EtcdRestore holds
// starts no run until the annotation goes, then runs at once.
func TestDeploymentWaitsWhileARestoreHoldsIt(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "held", true, "ok-a")
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := controllertest.Get(t, kd)
		cur.Spec.Paused = false
		cur.Annotations = map[string]string{kaov1.RestoreInProgressAnnotation: "restore-1"}
		return controllertest.K8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.Progress != nil || cur.Status.LastRun != nil {
		t.Fatalf("a run started while an EtcdRestore held the deployment: %+v %+v", cur.Status.Progress, cur.Status.LastRun)
	}
	err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := controllertest.Get(t, kd)
		delete(cur.Annotations, kaov1.RestoreInProgressAnnotation)
		return controllertest.K8s.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
	controllertest.WaitFor(t, kd, time.Minute, "a run once the restore let go", lastRunIs(kaov1.RunSucceeded))
}

// TestARestoreIsFollowedByOneInstallRun runs the KarmadaDeployment
// reconciler on an installed deployment: the write that lets a successful
// restore's hold go and sets kao.io/restored-at starts one install run, with
// its Event, and no second one.
func TestARestoreIsFollowedByOneInstallRun(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "restored", false, "ok-a")
	installed := controllertest.WaitFor(t, kd, time.Minute, "the install", lastRunIs(kaov1.RunSucceeded))
	annotate := func(change func(map[string]string)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := controllertest.Get(t, kd)
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			change(cur.Annotations)
			return controllertest.K8s.Update(context.Background(), cur)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	annotate(func(a map[string]string) { a[kaov1.RestoreInProgressAnnotation] = "restore-1" })
	// What the EtcdRestore reconciler writes as a successful restore ends,
	// in a later second than the install's start (times have seconds).
	time.Sleep(1100 * time.Millisecond)
	annotate(func(a map[string]string) {
		delete(a, kaov1.RestoreInProgressAnnotation)
		a[kaov1.RestoredAtAnnotation] = time.Now().UTC().Format(time.RFC3339)
	})
	after := controllertest.WaitFor(t, kd, time.Minute, "an install run after the restore", func(cur *kaov1.KarmadaDeployment) bool {
		return lastRunIs(kaov1.RunSucceeded)(cur) && cur.Status.LastRun.ID != installed.Status.LastRun.ID
	})
	if after.Status.LastRun.Playbook != pipeline.InstallPlaybook {
		t.Errorf("the run after the restore ran %s, want %s", after.Status.LastRun.Playbook, pipeline.InstallPlaybook)
	}
	if e := waitForEvent(t, kd, "ReapplyingAfterRestore"); !strings.Contains(e.Note, kaov1.RestoredAtAnnotation) {
		t.Errorf("the Event does not say what asked for the run: %q", e.Note)
	}
	time.Sleep(3 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.Progress != nil || cur.Status.LastRun.ID != after.Status.LastRun.ID {
		t.Fatalf("a second run followed the restore: %+v %+v", cur.Status.Progress, cur.Status.LastRun)
	}
}

// TestDeletionWaitsWhileARestoreHoldsTheDeployment deletes a deployment an
// EtcdRestore holds: no uninstall starts (it would stop etcd under the
// restore) and Ready says why, until the restore lets go; then the uninstall
// runs and the object goes.
func TestDeletionWaitsWhileARestoreHoldsTheDeployment(t *testing.T) {
	ns := controllertest.NewNamespace(t)
	startOperator(t, ns, "")
	kd := newDeployment(t, ns, "held-delete", false, "ok-a")
	controllertest.WaitFor(t, kd, time.Minute, "the install", lastRunIs(kaov1.RunSucceeded))
	// No restore controller runs here: the restore only has to exist.
	er := controllertest.NewRestore(t, ns, "restore-1", kd.Name, kaov1.RestoreSource{Path: "/var/lib/kao/upload/snap.db", SHA256: strings.Repeat("ab", 32)})
	setHolder := func(holder string) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			cur := controllertest.Get(t, kd)
			if holder == "" {
				delete(cur.Annotations, kaov1.RestoreInProgressAnnotation)
			} else {
				cur.Annotations = map[string]string{kaov1.RestoreInProgressAnnotation: holder}
			}
			return controllertest.K8s.Update(context.Background(), cur)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setHolder(er.Name)
	if err := controllertest.K8s.Delete(context.Background(), controllertest.Get(t, kd)); err != nil {
		t.Fatal(err)
	}
	waiting := controllertest.WaitFor(t, kd, time.Minute, "Ready to say the deletion waits for the restore", func(cur *kaov1.KarmadaDeployment) bool {
		c := meta.FindStatusCondition(cur.Status.Conditions, kaov1.ReadyCondition)
		return c != nil && strings.Contains(c.Message, "waiting for EtcdRestore "+er.Name)
	})
	time.Sleep(3 * time.Second)
	if cur := controllertest.Get(t, kd); cur.Status.Progress != nil || cur.Status.LastRun.Playbook != waiting.Status.LastRun.Playbook ||
		cur.Status.LastRun.ID != waiting.Status.LastRun.ID {
		t.Fatalf("a run started while the restore held the deployment: %+v %+v", cur.Status.Progress, cur.Status.LastRun)
	}

	setHolder("")
	deadline := time.Now().Add(time.Minute)
	for {
		err := controllertest.K8s.Get(context.Background(), client.ObjectKeyFromObject(kd), &kaov1.KarmadaDeployment{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deployment was not removed once the restore let go: %v %+v", err, controllertest.Get(t, kd).Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
