package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
)

var t0 = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

func mt(t time.Time) metav1.Time { return metav1.NewTime(t) }

// TestStateFromStatus checks that each state series says what the status
// says, for a deployment, a scheduled backup and a restore, and that an
// object two sources both hold is exported once.
func TestStateFromStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dc1", Name: "karmada", UID: "u1", Generation: 3},
		Spec:       kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode, Members: []kaov1.MemberSpec{{Name: "m1"}, {Name: "m2"}}},
		Status: kaov1.KarmadaDeploymentStatus{
			Version: "v1.18.1",
			Conditions: []metav1.Condition{
				{Type: kaov1.ReadyCondition, Status: metav1.ConditionFalse, Reason: "x", LastTransitionTime: mt(t0)},
			},
			Retry:                 &kaov1.RetryStatus{Failures: 2, Generation: 3, NextRetryTime: ptr.To(mt(t0.Add(time.Minute)))},
			LastSuccessfulRunTime: ptr.To(mt(t0.Add(-time.Hour))),
			Progress:              &kaov1.RunProgress{Playbook: "install.yml"},
			Components: []kaov1.ComponentStatus{
				{Name: "karmada-apiserver", Version: "v1.35.4", Ready: true},
				{Name: "karmada-scheduler", Version: "v1.17.1", TargetVersion: "v1.18.1"},
			},
			Etcd: &kaov1.EtcdStatus{Leader: "node1", Members: []kaov1.EtcdMemberStatus{
				{Name: "node1", Healthy: true, Leader: true, DBSizeBytes: ptr.To(int64(2 << 20))},
				{Name: "node2"},
				// Added by a scale-up, catching up: no vote yet.
				{Name: "node3", Learner: true},
			}},
			Certificates: []kaov1.CertificateStatus{{Name: "karmada-apiserver", NotAfter: mt(t0.Add(24 * time.Hour))}},
			Members: []kaov1.MemberStatus{
				{Name: "m1", SyncMode: kaov1.PushSyncMode, Joined: true, Ready: true},
				{Name: "m2", SyncMode: kaov1.PullSyncMode, Joined: true, AgentCertificateNotAfter: ptr.To(mt(t0.Add(48 * time.Hour)))},
				// Removed from the spec, still in Karmada while kao unjoins it.
				{Name: "m3", SyncMode: kaov1.PushSyncMode, Joined: true},
			},
		},
	}
	eb := &kaov1.EtcdBackup{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dc1", Name: "nightly", UID: "u2", CreationTimestamp: mt(t0.Add(-48 * time.Hour))},
		Spec:       kaov1.EtcdBackupSpec{DeploymentName: "karmada", Schedule: "0 2 * * *"},
		Status: kaov1.EtcdBackupStatus{
			LastSnapshot: &kaov1.Snapshot{Name: "s2", Size: resource.MustParse("3Mi"), Time: mt(t0.Add(-6 * time.Hour))},
			Snapshots:    []kaov1.Snapshot{{Name: "s2"}, {Name: "s1"}},
		},
	}
	er := &kaov1.EtcdRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dc1", Name: "undo", UID: "u3"},
		Spec:       kaov1.EtcdRestoreSpec{DeploymentName: "karmada"},
		Status:     kaov1.EtcdRestoreStatus{Phase: kaov1.RestoreSucceeded},
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(kd, eb, er).Build()
	c := newStateCollector()
	c.sources[&source{reader: reader}] = struct{}{}
	c.sources[&source{reader: reader}] = struct{}{} // a second manager watching the same namespace

	want := `
# HELP kao_certificate_expiration_timestamp_seconds When a certificate kao issued expires, in seconds since the epoch.
# TYPE kao_certificate_expiration_timestamp_seconds gauge
kao_certificate_expiration_timestamp_seconds{certificate="karmada-apiserver",deployment="karmada",namespace="dc1"} 1795766400
# HELP kao_component_info Always 1: the version a component runs and, while it differs, the version the spec asks for.
# TYPE kao_component_info gauge
kao_component_info{component="karmada-apiserver",deployment="karmada",namespace="dc1",target_version="",version="v1.35.4"} 1
kao_component_info{component="karmada-scheduler",deployment="karmada",namespace="dc1",target_version="v1.18.1",version="v1.17.1"} 1
# HELP kao_component_ready 1 when every instance of the control-plane component passes its health check.
# TYPE kao_component_ready gauge
kao_component_ready{component="karmada-apiserver",deployment="karmada",namespace="dc1"} 1
kao_component_ready{component="karmada-scheduler",deployment="karmada",namespace="dc1"} 0
# HELP kao_deployment_condition 1 for the status (True, False, Unknown) each condition has, 0 for the other two.
# TYPE kao_deployment_condition gauge
kao_deployment_condition{condition="Ready",deployment="karmada",namespace="dc1",status="False"} 1
kao_deployment_condition{condition="Ready",deployment="karmada",namespace="dc1",status="True"} 0
kao_deployment_condition{condition="Ready",deployment="karmada",namespace="dc1",status="Unknown"} 0
# HELP kao_deployment_consecutive_failures Consecutive failed runs of the current generation (status.retry.failures).
# TYPE kao_deployment_consecutive_failures gauge
kao_deployment_consecutive_failures{deployment="karmada",namespace="dc1"} 2
# HELP kao_deployment_info Always 1: the deployment's mode and the Karmada version its control plane last reached.
# TYPE kao_deployment_info gauge
kao_deployment_info{deployment="karmada",mode="Binary",namespace="dc1",version="v1.18.1"} 1
# HELP kao_deployment_last_success_timestamp_seconds When the last successful run ended, in seconds since the epoch (status.lastSuccessfulRunTime).
# TYPE kao_deployment_last_success_timestamp_seconds gauge
kao_deployment_last_success_timestamp_seconds{deployment="karmada",namespace="dc1"} 1795676400
# HELP kao_deployment_next_retry_timestamp_seconds When kao runs again after a failure, in seconds since the epoch (status.retry.nextRetryTime).
# TYPE kao_deployment_next_retry_timestamp_seconds gauge
kao_deployment_next_retry_timestamp_seconds{deployment="karmada",namespace="dc1"} 1795680060
# HELP kao_deployment_run_in_progress 1 while a playbook run is in progress (status.progress).
# TYPE kao_deployment_run_in_progress gauge
kao_deployment_run_in_progress{deployment="karmada",namespace="dc1",playbook="install.yml"} 1
# HELP kao_etcd_db_size_bytes Size of the etcd member's database file in bytes, as the member reported it.
# TYPE kao_etcd_db_size_bytes gauge
kao_etcd_db_size_bytes{deployment="karmada",member="node1",namespace="dc1"} 2.097152e+06
# HELP kao_etcd_leader_present 1 when the etcd cluster reports a leader.
# TYPE kao_etcd_leader_present gauge
kao_etcd_leader_present{deployment="karmada",namespace="dc1"} 1
# HELP kao_etcd_member_healthy 1 when the etcd member answered a health check.
# TYPE kao_etcd_member_healthy gauge
kao_etcd_member_healthy{deployment="karmada",member="node1",namespace="dc1"} 1
kao_etcd_member_healthy{deployment="karmada",member="node2",namespace="dc1"} 0
kao_etcd_member_healthy{deployment="karmada",member="node3",namespace="dc1"} 0
# HELP kao_etcd_members etcd members kao probed, learners included.
# TYPE kao_etcd_members gauge
kao_etcd_members{deployment="karmada",namespace="dc1"} 3
# HELP kao_etcd_members_healthy etcd members that answered a health check.
# TYPE kao_etcd_members_healthy gauge
kao_etcd_members_healthy{deployment="karmada",namespace="dc1"} 1
# HELP kao_etcd_voting_members etcd members that vote (not learners): quorum is a majority of them.
# TYPE kao_etcd_voting_members gauge
kao_etcd_voting_members{deployment="karmada",namespace="dc1"} 2
# HELP kao_etcdbackup_created_timestamp_seconds When the EtcdBackup was created, in seconds since the epoch: the reference for a backup that never succeeded.
# TYPE kao_etcdbackup_created_timestamp_seconds gauge
kao_etcdbackup_created_timestamp_seconds{backup="nightly",deployment="karmada",namespace="dc1"} 1795507200
# HELP kao_etcdbackup_last_size_bytes Size of the newest successful snapshot in bytes.
# TYPE kao_etcdbackup_last_size_bytes gauge
kao_etcdbackup_last_size_bytes{backup="nightly",deployment="karmada",namespace="dc1"} 3.145728e+06
# HELP kao_etcdbackup_last_success_timestamp_seconds When the newest successful snapshot was taken, in seconds since the epoch.
# TYPE kao_etcdbackup_last_success_timestamp_seconds gauge
kao_etcdbackup_last_success_timestamp_seconds{backup="nightly",deployment="karmada",namespace="dc1"} 1795658400
# HELP kao_etcdbackup_schedule_interval_seconds Seconds between two scheduled snapshots; absent for a one-shot or suspended backup.
# TYPE kao_etcdbackup_schedule_interval_seconds gauge
kao_etcdbackup_schedule_interval_seconds{backup="nightly",deployment="karmada",namespace="dc1"} 86400
# HELP kao_etcdbackup_snapshots_retained Snapshots kept by retention.
# TYPE kao_etcdbackup_snapshots_retained gauge
kao_etcdbackup_snapshots_retained{backup="nightly",deployment="karmada",namespace="dc1"} 2
# HELP kao_etcdrestore_phase Always 1: the phase an EtcdRestore is in.
# TYPE kao_etcdrestore_phase gauge
kao_etcdrestore_phase{deployment="karmada",namespace="dc1",phase="Succeeded",restore="undo"} 1
# HELP kao_member_agent_certificate_expiration_timestamp_seconds When the karmada-agent certificate kao delivered to a Pull member expires, in seconds since the epoch.
# TYPE kao_member_agent_certificate_expiration_timestamp_seconds gauge
kao_member_agent_certificate_expiration_timestamp_seconds{deployment="karmada",member="m2",namespace="dc1"} 1795852800
# HELP kao_member_ready 1 when Karmada reports the member cluster Ready.
# TYPE kao_member_ready gauge
kao_member_ready{deployment="karmada",member="m1",namespace="dc1",sync_mode="Push"} 1
kao_member_ready{deployment="karmada",member="m2",namespace="dc1",sync_mode="Pull"} 0
# HELP kao_members Member clusters in spec.members.
# TYPE kao_members gauge
kao_members{deployment="karmada",namespace="dc1"} 2
# HELP kao_members_joined Member clusters whose Cluster object exists in Karmada.
# TYPE kao_members_joined gauge
kao_members_joined{deployment="karmada",namespace="dc1"} 2
# HELP kao_members_ready Member clusters Karmada reports Ready.
# TYPE kao_members_ready gauge
kao_members_ready{deployment="karmada",namespace="dc1"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestADriftCheckRunsApart: a drift check in progress is the playbook with
// :check in kao_deployment_run_in_progress, apart from runs that change hosts.
func TestADriftCheckRunsApart(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := kaov1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kd := &kaov1.KarmadaDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dc1", Name: "checked", UID: "u1", Generation: 1},
		Spec:       kaov1.KarmadaDeploymentSpec{Mode: kaov1.BinaryMode},
		Status:     kaov1.KarmadaDeploymentStatus{Progress: &kaov1.RunProgress{Playbook: "install.yml", Check: true}},
	}
	c := newStateCollector()
	c.sources[&source{reader: fake.NewClientBuilder().WithScheme(scheme).WithObjects(kd).Build()}] = struct{}{}
	want := `
# HELP kao_deployment_run_in_progress 1 while a playbook run is in progress (status.progress).
# TYPE kao_deployment_run_in_progress gauge
kao_deployment_run_in_progress{deployment="checked",namespace="dc1",playbook="install.yml:check"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "kao_deployment_run_in_progress"); err != nil {
		t.Error(err)
	}
}

// TestStateNeedsALeader checks that a collector without a source (no
// manager leads in this process) exports no state at all.
func TestStateNeedsALeader(t *testing.T) {
	if n := testutil.CollectAndCount(newStateCollector()); n != 0 {
		t.Errorf("a collector without sources exported %d series", n)
	}
}

func TestScheduleInterval(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		// schedule is spec.schedule.
		schedule string
		// want is the longest gap between its next times.
		want time.Duration
	}{
		{"", 0},
		{"@hourly", time.Hour},
		{"0 */6 * * *", 6 * time.Hour},
		{"30 2 * * *", 24 * time.Hour},
		// Twice a month: the gaps differ, the longest one counts.
		{"0 0 1,15 * *", 17 * 24 * time.Hour},
		{"not a schedule", 0},
		// Refused by the backup controller, so no interval either.
		{"@every 1h", 0},
		{"TZ=Europe/Paris 0 2 * * *", 0},
	} {
		if got := ScheduleInterval(tc.schedule, now); got != tc.want {
			t.Errorf("ScheduleInterval(%q) = %s, want %s", tc.schedule, got, tc.want)
		}
	}
}

// TestEventSeries checks the event counters through the registry the
// manager serves, and that forgetting an object drops its series and only
// its series.
func TestEventSeries(t *testing.T) {
	a := Run{Namespace: "ns-events", Deployment: "a", Playbook: "/play/install.yml"}
	b := Run{Namespace: "ns-events", Deployment: "b", Playbook: "members.yml"}
	RunStarted(a)
	RunFinished(a, "Failed", 90*time.Second, []string{"kao_etcd", "", "kao_etcd"})
	RunStarted(b)
	RunFinished(b, "Succeeded", 10*time.Second, nil)
	RetryScheduled("ns-events", "a")
	bk := Backup{Namespace: "ns-events", Name: "nightly", Deployment: "a"}
	SnapshotTaken(bk, 3*time.Second)
	SnapshotFailed(bk)
	SnapshotsPruned(bk, 2)
	RestoreFinished("ns-events", "a", "Succeeded")

	for _, tc := range []struct {
		// metric is the series' name.
		metric string
		// labels are its label values, in the catalog's order.
		labels []string
		// want is its value.
		want float64
	}{
		{RunsStarted, []string{"ns-events", "a", "install.yml"}, 1},
		{RunsFinished, []string{"ns-events", "a", "install.yml", "Failed"}, 1},
		{RunsFinished, []string{"ns-events", "b", "members.yml", "Succeeded"}, 1},
		{RunFailedTasks, []string{"ns-events", "a", "kao_etcd"}, 2},
		{RunFailedTasks, []string{"ns-events", "a", "playbook"}, 1},
		{RunRetries, []string{"ns-events", "a"}, 1},
		{BackupSnapshots, []string{"ns-events", "nightly", "a", "Succeeded"}, 1},
		{BackupSnapshots, []string{"ns-events", "nightly", "a", "Failed"}, 1},
		{BackupPruned, []string{"ns-events", "nightly", "a"}, 2},
		{RestoresFinished, []string{"ns-events", "a", "Succeeded"}, 1},
	} {
		if got := gathered(t, tc.metric, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
		}
	}
	if got := gathered(t, RunDuration+"_sum", []string{"ns-events", "a", "install.yml", "Failed"}); got != 90 {
		t.Errorf("run duration sum = %v, want 90", got)
	}

	ForgetDeployment("ns-events", "a")
	ForgetBackup("ns-events", "nightly")
	if got := gathered(t, RunsFinished, []string{"ns-events", "a", "install.yml", "Failed"}); got != -1 {
		t.Errorf("deployment a's runs survived ForgetDeployment: %v", got)
	}
	if got := gathered(t, BackupSnapshots, []string{"ns-events", "nightly", "a", "Succeeded"}); got != -1 {
		t.Errorf("the backup's snapshots survived ForgetBackup: %v", got)
	}
	if got := gathered(t, RunsFinished, []string{"ns-events", "b", "members.yml", "Succeeded"}); got != 1 {
		t.Errorf("deployment b's runs = %v after forgetting a, want 1", got)
	}
}

// gathered reads one series from controller-runtime's registry: labels
// are the values in the catalog's label order; -1 when there is no such
// series. name may be a histogram's _sum or _count series.
func gathered(t *testing.T, name string, labels []string) float64 {
	t.Helper()
	m := SeriesNames()[name]
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	family := strings.TrimSuffix(strings.TrimSuffix(name, "_sum"), "_count")
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range s.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i, l := range m.Labels {
				if got[l] != labels[i] {
					continue series
				}
			}
			switch {
			case strings.HasSuffix(name, "_sum"):
				return s.GetHistogram().GetSampleSum()
			case strings.HasSuffix(name, "_count"):
				return float64(s.GetHistogram().GetSampleCount())
			case s.GetCounter() != nil:
				return s.GetCounter().GetValue()
			default:
				return s.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestCatalog checks the catalog against Prometheus' naming rules: a
// prefix, units as suffixes, _total only on counters, and no label that
// could hold a secret.
func TestCatalog(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range Catalog {
		if seen[m.Name] {
			t.Errorf("%s is in the catalog twice", m.Name)
		}
		seen[m.Name] = true
		if !strings.HasPrefix(m.Name, "kao_") {
			t.Errorf("%s lacks the kao_ prefix", m.Name)
		}
		if (m.Type == Counter) != strings.HasSuffix(m.Name, "_total") {
			t.Errorf("%s: a counter's name, and only a counter's, ends in _total", m.Name)
		}
		if strings.Contains(m.Name, "timestamp") && !strings.HasSuffix(m.Name, "_timestamp_seconds") {
			t.Errorf("%s: timestamps are in seconds and named _timestamp_seconds", m.Name)
		}
		if m.Help == "" || m.Labels[0] != labelNamespace {
			t.Errorf("%s: every metric has help and is labelled by namespace first", m.Name)
		}
		if m.State && m.Type != Gauge {
			t.Errorf("%s: state series are gauges", m.Name)
		}
		for _, l := range m.Labels {
			if strings.Contains(l, "secret") || strings.Contains(l, "key") || strings.Contains(l, "token") {
				t.Errorf("%s: label %s could carry a secret", m.Name, l)
			}
		}
	}
}
