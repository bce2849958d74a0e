package metrics

import (
	"path"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// runBuckets span a no-op re-run (seconds) to a large install (an hour).
var runBuckets = []float64{5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800, 3600}

// snapshotBuckets span a small etcd's snapshot to a multi-gigabyte one.
var snapshotBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}

// events are the counters and histograms of what happens, registered once
// with controller-runtime's registry, which the manager's metrics endpoint
// serves.
var events = struct {
	once          sync.Once
	runsStarted   *prometheus.CounterVec
	runsFinished  *prometheus.CounterVec
	runDuration   *prometheus.HistogramVec
	failedTasks   *prometheus.CounterVec
	retries       *prometheus.CounterVec
	snapshots     *prometheus.CounterVec
	snapshotTime  *prometheus.HistogramVec
	pruned        *prometheus.CounterVec
	restoresEnded *prometheus.CounterVec
	perDeployment []deletable
	perBackup     []deletable
}{}

// deletable is a vector whose series of one object can be dropped.
type deletable interface {
	DeletePartialMatch(prometheus.Labels) int
}

// counter makes the counter vector the catalog describes under name.
func counter(name string) *prometheus.CounterVec {
	m := lookup(name)
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: m.Name, Help: m.Help}, m.Labels)
}

// histogram makes the histogram vector the catalog describes under name.
func histogram(name string, buckets []float64) *prometheus.HistogramVec {
	m := lookup(name)
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: m.Name, Help: m.Help, Buckets: buckets}, m.Labels)
}

// register creates and registers the event metrics and the state
// collector on first use.
func register() {
	events.once.Do(func() {
		events.runsStarted = counter(RunsStarted)
		events.runsFinished = counter(RunsFinished)
		events.runDuration = histogram(RunDuration, runBuckets)
		events.failedTasks = counter(RunFailedTasks)
		events.retries = counter(RunRetries)
		events.snapshots = counter(BackupSnapshots)
		events.snapshotTime = histogram(BackupDuration, snapshotBuckets)
		events.pruned = counter(BackupPruned)
		events.restoresEnded = counter(RestoresFinished)
		events.perDeployment = []deletable{events.runsStarted, events.runsFinished, events.runDuration, events.failedTasks, events.retries, events.restoresEnded}
		events.perBackup = []deletable{events.snapshots, events.snapshotTime, events.pruned}
		ctrlmetrics.Registry.MustRegister(
			events.runsStarted, events.runsFinished, events.runDuration, events.failedTasks, events.retries,
			events.snapshots, events.snapshotTime, events.pruned, events.restoresEnded,
			state,
		)
	})
}

// CheckSuffix ends the playbook label of a drift check (install.yml:check),
// so that checks and the runs that change hosts count apart.
const CheckSuffix = ":check"

// PlanSuffix ends the playbook label of a plan (upgrade.yml:plan), so that
// plans count apart from the runs that apply them.
const PlanSuffix = ":plan"

// PlaybookLabel is the playbook label of a run of playbook: with
// CheckSuffix for a drift check, PlanSuffix for a plan.
func PlaybookLabel(playbook string, check, plan bool) string {
	switch {
	case check:
		return playbook + CheckSuffix
	case plan:
		return playbook + PlanSuffix
	}
	return playbook
}

// Run identifies a playbook run for its metrics.
type Run struct {
	Namespace  string
	Deployment string
	// Playbook is the playbook's file name, for example install.yml.
	Playbook string
}

func (r Run) labels() []string {
	return []string{r.Namespace, r.Deployment, path.Base(r.Playbook)}
}

// RunStarted counts a run that starts.
func RunStarted(r Run) {
	register()
	events.runsStarted.WithLabelValues(r.labels()...).Inc()
}

// RunFinished counts a run that ended with result after duration, and its
// failed tasks by the role each belongs to ("" for a play's own task).
func RunFinished(r Run, result string, duration time.Duration, failedRoles []string) {
	register()
	lv := append(r.labels(), result)
	events.runsFinished.WithLabelValues(lv...).Inc()
	events.runDuration.WithLabelValues(lv...).Observe(duration.Seconds())
	for _, role := range failedRoles {
		if role == "" {
			role = "playbook"
		}
		events.failedTasks.WithLabelValues(r.Namespace, r.Deployment, role).Inc()
	}
}

// RetryScheduled counts a retry kao scheduled after a failed run.
func RetryScheduled(namespace, deployment string) {
	register()
	events.retries.WithLabelValues(namespace, deployment).Inc()
}

// Backup identifies an EtcdBackup for its metrics.
type Backup struct {
	Namespace  string
	Name       string
	Deployment string
}

func (b Backup) labels() []string { return []string{b.Namespace, b.Name, b.Deployment} }

// SnapshotTaken counts a successful snapshot and how long it took.
func SnapshotTaken(b Backup, duration time.Duration) {
	register()
	events.snapshots.WithLabelValues(append(b.labels(), "Succeeded")...).Inc()
	events.snapshotTime.WithLabelValues(b.labels()...).Observe(max(0, duration).Seconds())
}

// SnapshotFailed counts a snapshot attempt that failed.
func SnapshotFailed(b Backup) {
	register()
	events.snapshots.WithLabelValues(append(b.labels(), "Failed")...).Inc()
}

// SnapshotsPruned counts snapshots retention deleted.
func SnapshotsPruned(b Backup, n int) {
	register()
	events.pruned.WithLabelValues(b.labels()...).Add(float64(n))
}

// RestoreFinished counts a restore that ended.
func RestoreFinished(namespace, deployment, result string) {
	register()
	events.restoresEnded.WithLabelValues(namespace, deployment, result).Inc()
}

// ForgetDeployment drops the event series of a deployment that is gone, so
// a deleted deployment leaves no series behind and one created again
// under its name starts from zero.
func ForgetDeployment(namespace, name string) {
	register()
	match := prometheus.Labels{labelNamespace: namespace, labelDeployment: name}
	for _, v := range events.perDeployment {
		v.DeletePartialMatch(match)
	}
}

// ForgetBackup drops the event series of an EtcdBackup that is gone.
func ForgetBackup(namespace, name string) {
	register()
	match := prometheus.Labels{labelNamespace: namespace, labelBackup: name}
	for _, v := range events.perBackup {
		v.DeletePartialMatch(match)
	}
}
