package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
)

// outcome is what a reconcile shows for a run that did not start: the
// condition it sets, the Event it emits and when it looks again.
type outcome struct {
	status  metav1.ConditionStatus
	reason  string
	message string
	// event is "Type Reason message"; "" for none.
	event   string
	requeue time.Duration
	// retried says status.retry counts the attempt.
	retried bool
	// handed says the error goes back to controller-runtime.
	handed bool
}

// TestRecordNotStartedOutcomes pins, for each kind of error a run can fail
// to start with, the condition, Event and requeue a KarmadaDeployment gets.
func TestRecordNotStartedOutcomes(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	long := strings.Repeat("x", 1100)
	cases := []struct {
		name string
		err  error
		want outcome
	}{
		{name: "missing input", err: reason.Missing("%s", "Secret team-a/ssh named in spec.ssh.privateKeySecretRef does not exist"),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.PrerequisitesMissingReason,
				message: "Secret team-a/ssh named in spec.ssh.privateKeySecretRef does not exist",
				event:   "Warning PrerequisitesMissing Secret team-a/ssh named in spec.ssh.privateKeySecretRef does not exist",
				requeue: retryBase, retried: true}},
		{name: "missing secret", err: reason.SecretMissing("%s", "Secret team-a/m has no key \"k\""),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.PrerequisitesMissingReason, message: "Secret team-a/m has no key \"k\"",
				event: "Warning PrerequisitesMissing Secret team-a/m has no key \"k\"", requeue: retryBase, retried: true}},
		{name: "user role", err: userRoleErrorf("%s", "spec.addons.userRoles[0].path: not under --user-roles-dir"),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.UserRoleInvalidReason, message: "spec.addons.userRoles[0].path: not under --user-roles-dir",
				event: "Warning UserRoleInvalid spec.addons.userRoles[0].path: not under --user-roles-dir", requeue: retryBase, retried: true}},
		{name: "host cluster unreachable", err: reason.Invalid(kaov1.HostClusterUnreachableReason, "%s", "creating Namespace karmada-system in the host cluster: forbidden"),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.HostClusterUnreachableReason,
				message: "creating Namespace karmada-system in the host cluster: forbidden",
				event:   "Warning HostClusterUnreachable creating Namespace karmada-system in the host cluster: forbidden", requeue: retryBase, retried: true}},
		{name: "exposure pending", err: reason.Pending(kaov1.ExposurePendingReason, exposurePollInterval, "%s", "Service karmada-system/karmada-apiserver has no node port yet"),
			want: outcome{status: metav1.ConditionUnknown, reason: kaov1.ExposurePendingReason,
				message: "Service karmada-system/karmada-apiserver has no node port yet",
				event:   "Normal ExposurePending Service karmada-system/karmada-apiserver has no node port yet", requeue: exposurePollInterval}},
		{name: "downgrade, cut at 1024 bytes", err: downgradeRefused("%s", long),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.DowngradeRefusedReason, message: long[:1024],
				event: "Warning DowngradeRefused " + long[:1024], requeue: retryBase, retried: true}},
		{name: "anything else", err: errors.New("the API server is down"), want: outcome{handed: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &KarmadaDeploymentReconciler{Recorder: rec}
			kd := &kaov1.KarmadaDeployment{ObjectMeta: metav1.ObjectMeta{Name: "dc1", Namespace: "team-a", Generation: 4}}
			res, err := r.recordNotStarted(context.Background(), kd, c.err, now)
			got := outcome{requeue: res.RequeueAfter, handed: err != nil, retried: kd.Status.Retry != nil}
			if cond := meta.FindStatusCondition(kd.Status.Conditions, kaov1.PlaybookSucceededCondition); cond != nil {
				got.status, got.reason, got.message = cond.Status, cond.Reason, cond.Message
			}
			select {
			case e := <-rec.Events:
				got.event = e
			default:
			}
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
			// Waiting for an address tells once: the same message again emits no Event.
			if c.want.reason == kaov1.ExposurePendingReason {
				if _, err := r.recordNotStarted(context.Background(), kd, c.err, now); err != nil {
					t.Fatal(err)
				}
				select {
				case e := <-rec.Events:
					t.Errorf("a second Event for the same wait: %s", e)
				default:
				}
			}
		})
	}
}

// TestRestoreNotStartedOutcomes pins, for each kind of error a restore can
// fail to start with, what the EtcdRestore shows and when kao looks again.
func TestRestoreNotStartedOutcomes(t *testing.T) {
	now := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
	cases := []struct {
		name string
		err  error
		// ready and succeeded are the conditions' status and reason.
		ready, succeeded string
		phase            kaov1.RestorePhase
		event            string
		requeue          time.Duration
		handed           bool
	}{
		{name: "refused", err: reason.Refused(kaov1.ChecksumMismatchReason, "%s", "the snapshot does not match its sha256"),
			ready: "False/ChecksumMismatch", succeeded: "False/ChecksumMismatch", phase: kaov1.RestoreFailed,
			event: "Warning ChecksumMismatch the snapshot does not match its sha256"},
		{name: "busy", err: reason.Pending(kaov1.WaitingForRunReason, restoreBusyRequeueAfter, "%s", "KarmadaDeployment dc1 runs install.yml"),
			ready: "False/WaitingForRun", succeeded: "Unknown/WaitingForRun", requeue: restoreBusyRequeueAfter},
		{name: "missing input", err: reason.Missing("%s", "EtcdBackup nightly does not exist"),
			ready: "False/PrerequisitesMissing", succeeded: "Unknown/PrerequisitesMissing", requeue: restoreWaitRequeueAfter},
		{name: "anything else", err: errors.New("the API server is down"), handed: true},
	}
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			cl := fake.NewClientBuilder().WithScheme(scheme).Build()
			r := &EtcdRestoreReconciler{Client: cl, APIReader: cl, Recorder: rec, Options: Options{StateDir: t.TempDir()}}
			er := &kaov1.EtcdRestore{ObjectMeta: metav1.ObjectMeta{Name: "r1", Namespace: "team-a", Generation: 1},
				Spec: kaov1.EtcdRestoreSpec{DeploymentName: "dc1"}}
			res, err := r.notStarted(context.Background(), er, nil, c.err, now)
			if (err != nil) != c.handed {
				t.Fatalf("error %v, want handed back: %v", err, c.handed)
			}
			if res.RequeueAfter != c.requeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, c.requeue)
			}
			if c.handed {
				return
			}
			show := func(t string) string {
				cond := meta.FindStatusCondition(er.Status.Conditions, t)
				if cond == nil {
					return ""
				}
				return fmt.Sprintf("%s/%s", cond.Status, cond.Reason)
			}
			if got := show(kaov1.ReadyCondition); got != c.ready {
				t.Errorf("Ready %s, want %s", got, c.ready)
			}
			if got := show(kaov1.RestoreSucceededCondition); got != c.succeeded {
				t.Errorf("RestoreSucceeded %s, want %s", got, c.succeeded)
			}
			if er.Status.Phase != c.phase {
				t.Errorf("phase %q, want %q", er.Status.Phase, c.phase)
			}
			got := ""
			select {
			case got = <-rec.Events:
			default:
			}
			if got != c.event {
				t.Errorf("Event %q, want %q", got, c.event)
			}
		})
	}
}
