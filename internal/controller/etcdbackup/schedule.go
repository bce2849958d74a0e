package etcdbackup

import (
	"slices"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/cronschedule"
)

// backupDecision is what a reconcile of an EtcdBackup does now.
type backupDecision struct {
	// take is true when a snapshot is due.
	take bool
	// slot is the schedule time the snapshot stands for (zero for a one-shot backup).
	slot time.Time
	// next is when the next snapshot (or retry) is due; zero when none is.
	next time.Time
	// done is true for a one-shot backup that has its snapshot.
	done bool
}

// parseSchedule parses spec.schedule (cronschedule.Parse). A nil schedule
// means a one-shot backup.
func parseSchedule(spec string) (cron.Schedule, error) { return cronschedule.Parse(spec) }

// decideBackup decides whether a snapshot is due. A scheduled backup takes
// one snapshot for the newest schedule time that has passed since the last
// one it took (missed times while the operator was down or the deployment
// was not installed collapse into one); a failed attempt waits for the next
// time. A one-shot backup takes its snapshot at once and, after a failure,
// again at status.nextScheduleTime, or at once after a spec change.
func decideBackup(eb *kaov1.EtcdBackup, sched cron.Schedule, now time.Time) backupDecision {
	st := eb.Status
	if sched == nil {
		if st.LastSnapshot != nil {
			return backupDecision{done: true}
		}
		c := meta.FindStatusCondition(st.Conditions, kaov1.BackupSucceededCondition)
		retried := c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == eb.Generation
		if retried && st.NextScheduleTime != nil && now.Before(st.NextScheduleTime.Time) {
			return backupDecision{next: st.NextScheduleTime.Time}
		}
		return backupDecision{take: true}
	}
	after := eb.CreationTimestamp.Time
	if st.LastScheduleTime != nil {
		after = st.LastScheduleTime.Time
	}
	slot, due := latestSlot(sched, after, now)
	if !due {
		return backupDecision{next: sched.Next(after.UTC())}
	}
	return backupDecision{take: true, slot: slot, next: sched.Next(now.UTC())}
}

// latestSlot finds the newest schedule time in (after, now]. The walk starts
// from a time close to now, so a long pause costs a few steps, not one per
// missed time.
func latestSlot(sched cron.Schedule, after, now time.Time) (time.Time, bool) {
	after, now = after.UTC(), now.UTC()
	slot := sched.Next(after)
	if slot.IsZero() || slot.After(now) {
		return time.Time{}, false
	}
	for _, window := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		if c := sched.Next(now.Add(-window)); !c.IsZero() && !c.After(now) && c.After(slot) {
			slot = c
			break
		}
	}
	for range maxScheduleSteps {
		n := sched.Next(slot)
		if n.IsZero() || n.After(now) {
			break
		}
		slot = n
	}
	return slot, true
}

// oneShotRetryAt is when a failing one-shot backup tries again: it waits as
// long as it has been failing (so the waits double), within bounds.
func oneShotRetryAt(eb *kaov1.EtcdBackup, now time.Time) time.Time {
	wait := backupRetryBase
	if c := meta.FindStatusCondition(eb.Status.Conditions, kaov1.BackupSucceededCondition); c != nil && c.Status == metav1.ConditionFalse {
		if failing := now.Sub(c.LastTransitionTime.Time); failing > wait {
			wait = failing
		}
	}
	return now.Add(min(wait, backupRetryCap))
}

// backupRetention is how many snapshots a backup keeps: one for a one-shot
// backup, spec.retention or the default for a scheduled one.
func backupRetention(eb *kaov1.EtcdBackup) int {
	switch {
	case eb.Spec.Schedule == "":
		return 1
	case eb.Spec.Retention != nil:
		return int(*eb.Spec.Retention)
	}
	return defaultBackupRetention
}

// splitRetained puts a new snapshot first and splits the list into what
// retention keeps and what it drops (oldest last).
//
// One snapshot beyond keep is never dropped: the last good one, when every
// snapshot taken after it falls short of it (an older revision: etcd was
// wiped or replaced; or under half its keys: most of the data went). Then
// held is that snapshot: a run of snapshots of an emptied etcd prunes
// everything but the newest one that still held the data.
func splitRetained(snap kaov1.Snapshot, have []kaov1.Snapshot, keep int) (kept, dropped []kaov1.Snapshot, held *kaov1.Snapshot) {
	all := append([]kaov1.Snapshot{snap}, have...)
	if keep < 1 {
		keep = 1
	}
	if len(all) <= keep {
		return all, nil, nil
	}
	kept, dropped = all[:keep:keep], slices.Clone(all[keep:])
	if i := lastGood(all); i >= keep {
		held = all[i].DeepCopy()
		kept = append(kept, *held)
		dropped = slices.Delete(dropped, i-keep, i-keep+1)
	}
	return kept, dropped, held
}

// lastGood is the index of the newest snapshot that every newer one falls
// short of, or -1 when the newest is as good as those before it.
func lastGood(all []kaov1.Snapshot) int {
	for i := 1; i < len(all); i++ {
		short := true
		for _, newer := range all[:i] {
			short = short && fallsShort(newer, all[i])
		}
		if short {
			return i
		}
	}
	return -1
}

// fallsShort tells whether a newer snapshot holds less than an older one
// should let it: an older revision (a revision only grows in a live
// cluster), or under half the keys when both are known.
func fallsShort(newer, older kaov1.Snapshot) bool {
	return newer.Revision < older.Revision || newer.Keys > 0 && older.Keys > 0 && newer.Keys*2 < older.Keys
}
