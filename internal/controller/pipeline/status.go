package pipeline

import (
	"math"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/runner"
)

// SetUnknownIfMissing records a condition as Unknown on an object's first
// visit, so every condition kao owns is present from the start. Conditions
// that already exist are left as they are.
func SetUnknownIfMissing(conds *[]metav1.Condition, generation int64, reason, message string, types ...string) {
	for _, t := range types {
		if meta.FindStatusCondition(*conds, t) != nil {
			continue
		}
		meta.SetStatusCondition(conds, metav1.Condition{
			Type:               t,
			Status:             metav1.ConditionUnknown,
			ObservedGeneration: generation,
			Reason:             reason,
			Message:            message,
		})
	}
}

// SetConditionAt records a condition at the object's generation with the
// reconciler's clock; the transition time is kept when the status does not
// change. The message is cut to 1024 bytes.
func SetConditionAt(conds *[]metav1.Condition, generation int64, now time.Time, t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               t,
		Status:             status,
		ObservedGeneration: generation,
		LastTransitionTime: metav1.NewTime(now),
		Reason:             reason,
		Message:            TruncateString(message, 1024),
	})
}

// TimePtr is t as a *metav1.Time, for optional status fields.
func TimePtr(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// RunStatus converts a runner result into status.lastRun.
func RunStatus(res *runner.Result, generation int64, logConfigMap string) *kaov1.RunStatus {
	rs := &kaov1.RunStatus{
		ID:               res.ID,
		Playbook:         res.Playbook,
		Generation:       generation,
		Result:           kaov1.RunResult(res.Outcome),
		Message:          res.Message,
		StartTime:        metav1.NewTime(res.StartTime),
		EndTime:          metav1.NewTime(res.EndTime),
		LogConfigMapName: logConfigMap,
	}
	for _, host := range sortedHostNames(res.Hosts) {
		s := res.Hosts[host]
		rs.Hosts = append(rs.Hosts, kaov1.HostRunStats{
			Name: host, OK: clampInt32(s.OK), Changed: clampInt32(s.Changed), Failed: clampInt32(s.Failures),
			Unreachable: clampInt32(s.Unreachable), Skipped: clampInt32(s.Skipped), Rescued: clampInt32(s.Rescued), Ignored: clampInt32(s.Ignored),
		})
	}
	for i, f := range res.FailedTasks {
		if i == 50 {
			break
		}
		rs.FailedTasks = append(rs.FailedTasks, kaov1.FailedTask{Host: f.Host, Task: f.Task, Unreachable: f.Unreachable, Message: f.Message})
	}
	return rs
}

// ProgressStatus converts runner progress into status.progress.
func ProgressStatus(runID, playbook string, start time.Time, p runner.Progress, now time.Time) *kaov1.RunProgress {
	return &kaov1.RunProgress{
		RunID:       runID,
		Playbook:    playbook,
		TasksDone:   clampInt32(p.TasksDone),
		TasksTotal:  clampInt32(p.TasksTotal),
		Percent:     clampInt32(p.Percent()),
		CurrentTask: TruncateString(p.Task, 256),
		CurrentHost: TruncateString(p.Host, 253),
		StartTime:   metav1.NewTime(start),
		UpdateTime:  TimePtr(now),
	}
}

// TruncateString shortens s to at most n bytes without splitting a character.
func TruncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clampInt32 converts a count for status, saturating instead of overflowing.
func clampInt32(n int) int32 {
	switch {
	case n > math.MaxInt32:
		return math.MaxInt32
	case n < 0:
		return 0
	}
	return int32(n)
}
