package etcdbackup

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
)

// setBackupCondition records a condition of an EtcdBackup at its current
// generation, with the reconciler's clock.
func setBackupCondition(eb *kaov1.EtcdBackup, now time.Time, t string, status metav1.ConditionStatus, reason, message string) {
	pipeline.SetConditionAt(&eb.Status.Conditions, eb.Generation, now, t, status, reason, message)
}

// setReadyFromLastAttempt sets Ready from the last attempt (BackupSucceeded)
// and when the next snapshot is due: Ready while the last snapshot
// succeeded, not Ready after a failure, Unknown before the first snapshot.
func setReadyFromLastAttempt(eb *kaov1.EtcdBackup, now time.Time, next *time.Time) {
	last := meta.FindStatusCondition(eb.Status.Conditions, kaov1.BackupSucceededCondition)
	switch {
	case last == nil || last.Status == metav1.ConditionUnknown:
		msg := "no snapshot taken yet"
		if next != nil {
			msg = "the first snapshot is due at " + next.UTC().Format(time.RFC3339)
		}
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionUnknown, kaov1.WaitingForRunReason, msg)
	case last.Status == metav1.ConditionFalse:
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionFalse, kaov1.SnapshotFailedReason,
			"the last attempt failed (see BackupSucceeded)"+nextAttemptText(next))
	case eb.Status.LastSnapshot != nil:
		s := eb.Status.LastSnapshot
		setBackupCondition(eb, now, kaov1.ReadyCondition, metav1.ConditionTrue, kaov1.SnapshotSavedReason,
			fmt.Sprintf("the last snapshot, %s, was taken at %s and is stored at %s%s",
				s.Name, s.Time.UTC().Format(time.RFC3339), s.Location, nextAttemptText(next)))
	}
}
