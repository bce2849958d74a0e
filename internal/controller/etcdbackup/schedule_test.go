package etcdbackup

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

func TestDecideBackup(t *testing.T) {
	created := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
	at := func(d time.Duration) time.Time { return created.Add(d) }
	mt := func(ti time.Time) *metav1.Time { return &metav1.Time{Time: ti} }
	failedNow := []metav1.Condition{{Type: kaov1.BackupSucceededCondition, Status: metav1.ConditionFalse, ObservedGeneration: 1}}
	failedBefore := []metav1.Condition{{Type: kaov1.BackupSucceededCondition, Status: metav1.ConditionFalse, ObservedGeneration: 0}}
	tests := []struct {
		// name says what the backup looks like.
		name string
		// schedule is spec.schedule; "" for one-shot.
		schedule string
		// status is the backup's status before the reconcile.
		status kaov1.EtcdBackupStatus
		// now is when the reconcile runs.
		now time.Time
		// want is the decision.
		want backupDecision
	}{
		{
			name: "one-shot without a snapshot takes it at once",
			now:  at(time.Second),
			want: backupDecision{take: true},
		},
		{
			name:   "one-shot with its snapshot is done",
			status: kaov1.EtcdBackupStatus{LastSnapshot: &kaov1.Snapshot{Name: "x"}},
			now:    at(time.Hour),
			want:   backupDecision{done: true},
		},
		{
			name:   "failed one-shot waits for its retry time",
			status: kaov1.EtcdBackupStatus{Conditions: failedNow, NextScheduleTime: mt(at(time.Minute))},
			now:    at(30 * time.Second),
			want:   backupDecision{next: at(time.Minute)},
		},
		{
			name:   "failed one-shot retries at its retry time",
			status: kaov1.EtcdBackupStatus{Conditions: failedNow, NextScheduleTime: mt(at(time.Minute))},
			now:    at(time.Minute),
			want:   backupDecision{take: true},
		},
		{
			name:   "failed one-shot retries at once after a spec change",
			status: kaov1.EtcdBackupStatus{Conditions: failedBefore, NextScheduleTime: mt(at(time.Hour))},
			now:    at(time.Second),
			want:   backupDecision{take: true},
		},
		{
			name:     "scheduled before its first time waits for it",
			schedule: "0 * * * *",
			now:      at(time.Minute),
			want:     backupDecision{next: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)},
		},
		{
			name:     "scheduled at its first time takes it",
			schedule: "0 * * * *",
			now:      time.Date(2026, 3, 1, 11, 0, 5, 0, time.UTC),
			want: backupDecision{take: true, slot: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC),
				next: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		},
		{
			name:     "scheduled after a week down takes one snapshot for the newest missed time",
			schedule: "*/5 * * * *",
			status:   kaov1.EtcdBackupStatus{LastScheduleTime: mt(time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC))},
			now:      time.Date(2026, 3, 8, 9, 7, 0, 0, time.UTC),
			want: backupDecision{take: true, slot: time.Date(2026, 3, 8, 9, 5, 0, 0, time.UTC),
				next: time.Date(2026, 3, 8, 9, 10, 0, 0, time.UTC)},
		},
		{
			name:     "scheduled with its last time taken waits for the next",
			schedule: "@daily",
			status:   kaov1.EtcdBackupStatus{LastScheduleTime: mt(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))},
			now:      time.Date(2026, 3, 2, 13, 0, 0, 0, time.UTC),
			want:     backupDecision{next: time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)},
		},
		{
			name:     "a failed scheduled attempt is not repeated before the next time",
			schedule: "@hourly",
			status: kaov1.EtcdBackupStatus{Conditions: failedNow,
				LastScheduleTime: mt(time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC))},
			now:  time.Date(2026, 3, 1, 11, 1, 0, 0, time.UTC),
			want: backupDecision{next: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eb := &kaov1.EtcdBackup{
				ObjectMeta: metav1.ObjectMeta{Generation: 1, CreationTimestamp: metav1.Time{Time: created}},
				Spec:       kaov1.EtcdBackupSpec{Schedule: tc.schedule},
				Status:     tc.status,
			}
			sched, err := parseSchedule(tc.schedule)
			if err != nil {
				t.Fatal(err)
			}
			got := decideBackup(eb, sched, tc.now)
			if got.take != tc.want.take || got.done != tc.want.done || !got.slot.Equal(tc.want.slot) || !got.next.Equal(tc.want.next) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOneShotRetryWaitsDouble(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	eb := &kaov1.EtcdBackup{}
	if got := oneShotRetryAt(eb, now).Sub(now); got != backupRetryBase {
		t.Errorf("first retry after %s, want %s", got, backupRetryBase)
	}
	eb.Status.Conditions = []metav1.Condition{{Type: kaov1.BackupSucceededCondition, Status: metav1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(now.Add(-4 * time.Minute))}}
	if got := oneShotRetryAt(eb, now).Sub(now); got != 4*time.Minute {
		t.Errorf("after failing 4m, retry after %s, want 4m", got)
	}
	eb.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-5 * time.Hour))
	if got := oneShotRetryAt(eb, now).Sub(now); got != backupRetryCap {
		t.Errorf("after failing 5h, retry after %s, want the cap %s", got, backupRetryCap)
	}
}

func TestParseScheduleRejectsWhatCronCannotRun(t *testing.T) {
	for _, bad := range []string{"61 * * * *", "* * * *", "0 0 30 2 * *", "@every 1h", "TZ=Europe/Paris 0 * * * *", "CRON_TZ=UTC 0 * * * *"} {
		if _, err := parseSchedule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, good := range []string{"0 */6 * * *", "@daily", "30 2 * * MON-FRI"} {
		if _, err := parseSchedule(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
}

// TestRetentionKeepsTheLastGoodSnapshot: retention keeps the newest
// snapshots, but never prunes the last one taken before etcd lost its data
// (newer ones hold an older revision, or under half its keys).
func TestRetentionKeepsTheLastGoodSnapshot(t *testing.T) {
	snap := func(name string, revision, keys int64) kaov1.Snapshot {
		return kaov1.Snapshot{Name: name, Revision: revision, Keys: keys}
	}
	names := func(ss []kaov1.Snapshot) string {
		out := []string{}
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		// name says what happened to etcd between the snapshots.
		name string
		// newest is the snapshot just taken; have is status.snapshots, newest first.
		newest kaov1.Snapshot
		have   []kaov1.Snapshot
		keep   int
		// kept, dropped and held are the names retention gives.
		kept, dropped, held string
	}{
		{"a growing cluster", snap("s4", 400, 90), []kaov1.Snapshot{snap("s3", 300, 80), snap("s2", 200, 70), snap("s1", 100, 60)}, 2,
			"s4,s3", "s2,s1", ""},
		{"keys shrinking by compaction, not by half", snap("s4", 400, 50), []kaov1.Snapshot{snap("s3", 300, 80), snap("s2", 200, 90)}, 2,
			"s4,s3", "s2", ""},
		{"etcd wiped: three snapshots of an empty cluster", snap("e3", 30, 12), []kaov1.Snapshot{snap("e2", 20, 11), snap("e1", 10, 10), snap("good", 5000, 900), snap("old", 4000, 850)}, 2,
			"e3,e2,good", "e1,old", "good"},
		{"most objects deleted at a higher revision", snap("d2", 6000, 100), []kaov1.Snapshot{snap("d1", 5500, 120), snap("good", 5000, 900)}, 2,
			"d2,d1,good", "", "good"},
		{"the last good one is still within retention", snap("e1", 10, 10), []kaov1.Snapshot{snap("good", 5000, 900), snap("old", 4000, 850)}, 2,
			"e1,good", "old", ""},
		{"keys unknown (snapshots from before keys were recorded)", snap("s3", 300, 0), []kaov1.Snapshot{snap("s2", 200, 0), snap("s1", 100, 0)}, 1,
			"s3", "s2,s1", ""},
	} {
		kept, dropped, held := splitRetained(tc.newest, tc.have, tc.keep)
		heldName := ""
		if held != nil {
			heldName = held.Name
		}
		if names(kept) != tc.kept || names(dropped) != tc.dropped || heldName != tc.held {
			t.Errorf("%s: kept %s, dropped %s, held %q; want kept %s, dropped %s, held %q",
				tc.name, names(kept), names(dropped), heldName, tc.kept, tc.dropped, tc.held)
		}
	}
}
