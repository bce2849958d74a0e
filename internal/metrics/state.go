package metrics

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/cronschedule"
)

// listTimeout bounds one scrape's reads of the cache.
const listTimeout = 5 * time.Second

// stateCollector exports the state series from the objects of every
// registered source at scrape time.
type stateCollector struct {
	descs map[string]*prometheus.Desc

	mu      sync.Mutex
	sources map[*source]struct{}
}

// source is one manager's cache, registered while its manager leads.
type source struct {
	reader client.Reader
}

var state = newStateCollector()

func newStateCollector() *stateCollector {
	c := &stateCollector{descs: map[string]*prometheus.Desc{}, sources: map[*source]struct{}{}}
	for _, m := range Catalog {
		if m.State {
			c.descs[m.Name] = prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: it lists the objects of every
// source and exports each object once (two test managers may watch one
// namespace).
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := make([]*source, 0, len(c.sources))
	for s := range c.sources {
		sources = append(sources, s)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	seen := map[types.UID]bool{}
	first := func(o client.Object) bool {
		if seen[o.GetUID()] {
			return false
		}
		seen[o.GetUID()] = true
		return true
	}
	e := emitter{c: c, ch: ch}
	now := time.Now()
	for _, s := range sources {
		var kds kaov1.KarmadaDeploymentList
		if c.list(ctx, s, &kds) {
			for i := range kds.Items {
				if first(&kds.Items[i]) {
					e.deployment(&kds.Items[i])
				}
			}
		}
		var ebs kaov1.EtcdBackupList
		if c.list(ctx, s, &ebs) {
			for i := range ebs.Items {
				if first(&ebs.Items[i]) {
					e.backup(&ebs.Items[i], now)
				}
			}
		}
		var ers kaov1.EtcdRestoreList
		if c.list(ctx, s, &ers) {
			for i := range ers.Items {
				if first(&ers.Items[i]) {
					e.restore(&ers.Items[i])
				}
			}
		}
	}
}

// list reads one kind from a source's cache without copying the objects
// (the collector only reads them). An error is logged: the kind's series
// are missing from this scrape, and the log says why.
func (c *stateCollector) list(ctx context.Context, s *source, l client.ObjectList) bool {
	if err := s.reader.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.Log.WithName("metrics").Error(err, "Listing objects for the state metrics; their series are missing from this scrape",
			"kind", fmt.Sprintf("%T", l))
		return false
	}
	return true
}

// emitter writes one scrape's state series.
type emitter struct {
	c  *stateCollector
	ch chan<- prometheus.Metric
}

// gauge sends one series. A series the catalog does not describe (a
// programming error) fails the scrape with its error; it never panics the
// manager.
func (e emitter) gauge(name string, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(e.c.descs[name], prometheus.GaugeValue, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(e.c.descs[name], err)
	}
	e.ch <- m
}

// timestamp sends a time as seconds since the epoch; nothing for no time.
func (e emitter) timestamp(name string, t *metav1.Time, labels ...string) {
	if t != nil && !t.IsZero() {
		e.gauge(name, float64(t.UnixNano())/1e9, labels...)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var conditionStatuses = []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

func (e emitter) deployment(kd *kaov1.KarmadaDeployment) {
	ns, name := kd.Namespace, kd.Name
	st := &kd.Status
	e.gauge(DeploymentInfo, 1, ns, name, string(kd.Spec.Mode), st.Version)
	for _, c := range st.Conditions {
		for _, s := range conditionStatuses {
			e.gauge(DeploymentCond, boolValue(c.Status == s), ns, name, c.Type, string(s))
		}
	}
	failures := 0.0
	if st.Retry != nil && st.Retry.Generation == kd.Generation {
		failures = float64(st.Retry.Failures)
		e.timestamp(DeploymentRetryAt, st.Retry.NextRetryTime, ns, name)
	}
	e.gauge(DeploymentFails, failures, ns, name)
	e.timestamp(DeploymentSuccess, st.LastSuccessfulRunTime, ns, name)
	if st.Progress != nil {
		e.gauge(DeploymentRunning, 1, ns, name, PlaybookLabel(st.Progress.Playbook, st.Progress.Check, st.Progress.Plan))
	}
	for _, c := range st.Components {
		e.gauge(ComponentReady, boolValue(c.Ready), ns, name, c.Name)
		e.gauge(ComponentInfo, 1, ns, name, c.Name, c.Version, c.TargetVersion)
	}
	if st.Etcd != nil && len(st.Etcd.Members) > 0 {
		healthy, voters := 0, 0
		for _, m := range st.Etcd.Members {
			if m.Healthy {
				healthy++
			}
			if !m.Learner {
				voters++
			}
			e.gauge(EtcdMemberHealthy, boolValue(m.Healthy), ns, name, m.Name)
			if m.DBSizeBytes != nil {
				e.gauge(EtcdDBSize, float64(*m.DBSizeBytes), ns, name, m.Name)
			}
		}
		e.gauge(EtcdMembers, float64(len(st.Etcd.Members)), ns, name)
		e.gauge(EtcdVoters, float64(voters), ns, name)
		e.gauge(EtcdHealthy, float64(healthy), ns, name)
		e.gauge(EtcdLeader, boolValue(st.Etcd.Leader != ""), ns, name)
	}
	for i := range st.Certificates {
		e.timestamp(CertExpiry, &st.Certificates[i].NotAfter, ns, name, st.Certificates[i].Name)
	}
	if st.CertificateRenewal != nil {
		e.timestamp(CertRenewal, st.CertificateRenewal.NextRenewalTime, ns, name)
	}
	// Members that left the spec stay in status until Karmada lets them go:
	// they are counted as what the spec asks for no longer.
	inSpec := map[string]bool{}
	for _, m := range kd.Spec.Members {
		inSpec[m.Name] = true
	}
	joined, ready := 0, 0
	for _, m := range st.Members {
		if !inSpec[m.Name] {
			continue
		}
		if m.Joined {
			joined++
		}
		if m.Ready {
			ready++
		}
		e.gauge(MemberReady, boolValue(m.Ready), ns, name, m.Name, string(m.SyncMode))
		e.timestamp(AgentCertExpiry, m.AgentCertificateNotAfter, ns, name, m.Name)
	}
	e.gauge(Members, float64(len(kd.Spec.Members)), ns, name)
	e.gauge(MembersJoined, float64(joined), ns, name)
	e.gauge(MembersReady, float64(ready), ns, name)
}

func (e emitter) backup(eb *kaov1.EtcdBackup, now time.Time) {
	l := []string{eb.Namespace, eb.Name, eb.Spec.DeploymentName}
	e.timestamp(BackupCreated, &eb.CreationTimestamp, l...)
	if s := eb.Status.LastSnapshot; s != nil {
		e.timestamp(BackupLastSuccess, &s.Time, l...)
		e.gauge(BackupLastSize, float64(s.Size.Value()), l...)
	}
	e.gauge(BackupRetained, float64(len(eb.Status.Snapshots)), l...)
	if !eb.Spec.Suspend {
		if d := ScheduleInterval(eb.Spec.Schedule, now); d > 0 {
			e.gauge(BackupInterval, d.Seconds(), l...)
		}
	}
}

func (e emitter) restore(er *kaov1.EtcdRestore) {
	phase := er.Status.Phase
	if phase == "" {
		phase = kaov1.RestorePending
	}
	e.gauge(RestorePhase, 1, er.Namespace, er.Spec.DeploymentName, er.Name, string(phase))
}

// ScheduleInterval is the longest gap between the next times of an
// EtcdBackup's schedule: what a backup alert compares the age of the last
// snapshot with. Zero for no schedule or one the controller refuses.
func ScheduleInterval(schedule string, now time.Time) time.Duration {
	s, err := cronschedule.Parse(schedule)
	if err != nil {
		return 0
	}
	return cronschedule.LongestGap(s, now)
}

// leaderSource registers a manager's cache with the state collector while
// the manager leads: a replica that does not lead exports no state, so
// two replicas never report one object twice.
type leaderSource struct {
	src *source
}

// Start implements manager.Runnable; the manager starts it once elected.
func (l leaderSource) Start(ctx context.Context) error {
	state.mu.Lock()
	state.sources[l.src] = struct{}{}
	state.mu.Unlock()
	log.FromContext(ctx).V(1).Info("Exporting the state of kao's objects as metrics")
	<-ctx.Done()
	state.mu.Lock()
	delete(state.sources, l.src)
	state.mu.Unlock()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (leaderSource) NeedLeaderElection() bool { return true }

// Setup registers kao's metrics with controller-runtime's registry (the
// manager's metrics endpoint) and the manager's cache as a state source
// while it leads.
func Setup(mgr ctrl.Manager) error {
	register()
	return mgr.Add(leaderSource{src: &source{reader: mgr.GetCache()}})
}
