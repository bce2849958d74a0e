package etcdrestore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/controller/reason"
)

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
			r := &Reconciler{Client: cl, APIReader: cl, Recorder: rec, Options: pipeline.Options{StateDir: t.TempDir()}}
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
