package karmadadeployment

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

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
		{name: "host cluster unreachable", err: reason.Failed(kaov1.HostClusterUnreachableReason, "%s", "creating Namespace karmada-system in the host cluster: forbidden"),
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
		{name: "refused: no retry until the spec changes", err: reason.Refused(kaov1.DowngradeRefusedReason, "%s", "never as specified"),
			want: outcome{status: metav1.ConditionFalse, reason: kaov1.DowngradeRefusedReason, message: "never as specified",
				event: "Warning DowngradeRefused never as specified"}},
		{name: "anything else", err: errors.New("the API server is down"), want: outcome{handed: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Recorder: rec}
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
