package metrics

// Type is a Prometheus metric type.
type Type string

// The metric types kao exports.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Metric describes one metric kao exports.
type Metric struct {
	// Name is the metric's name; a histogram's series add _bucket, _sum
	// and _count.
	Name string
	// Type is counter, gauge or histogram.
	Type Type
	// Help is the HELP text.
	Help string
	// Labels are the metric's label names, in order.
	Labels []string
	// State is true for series read from status at scrape time, false for
	// events counted as they happen.
	State bool
}

// Label names.
const (
	labelNamespace     = "namespace"
	labelDeployment    = "deployment"
	labelBackup        = "backup"
	labelRestore       = "restore"
	labelPlaybook      = "playbook"
	labelResult        = "result"
	labelRole          = "role"
	labelMode          = "mode"
	labelVersion       = "version"
	labelTargetVersion = "target_version"
	labelCondition     = "condition"
	labelStatus        = "status"
	labelComponent     = "component"
	labelMember        = "member"
	labelSyncMode      = "sync_mode"
	labelCertificate   = "certificate"
	labelPhase         = "phase"
)

var (
	deploymentLabels = []string{labelNamespace, labelDeployment}
	backupLabels     = []string{labelNamespace, labelBackup, labelDeployment}
)

// with is base followed by more, in a new slice.
func with(base []string, more ...string) []string {
	return append(append([]string{}, base...), more...)
}

// Metric names.
const (
	RunsStarted       = "kao_runs_started_total"
	RunsFinished      = "kao_runs_finished_total"
	RunDuration       = "kao_run_duration_seconds"
	RunFailedTasks    = "kao_run_failed_tasks_total"
	RunRetries        = "kao_run_retries_total"
	BackupSnapshots   = "kao_etcdbackup_snapshots_total"
	BackupDuration    = "kao_etcdbackup_duration_seconds"
	BackupPruned      = "kao_etcdbackup_snapshots_pruned_total"
	RestoresFinished  = "kao_etcdrestore_finished_total"
	DeploymentInfo    = "kao_deployment_info"
	DeploymentCond    = "kao_deployment_condition"
	DeploymentFails   = "kao_deployment_consecutive_failures"
	DeploymentRetryAt = "kao_deployment_next_retry_timestamp_seconds"
	DeploymentSuccess = "kao_deployment_last_success_timestamp_seconds"
	DeploymentRunning = "kao_deployment_run_in_progress"
	ComponentReady    = "kao_component_ready"
	ComponentInfo     = "kao_component_info"
	EtcdMembers       = "kao_etcd_members"
	EtcdVoters        = "kao_etcd_voting_members"
	EtcdHealthy       = "kao_etcd_members_healthy"
	EtcdLeader        = "kao_etcd_leader_present"
	EtcdMemberHealthy = "kao_etcd_member_healthy"
	EtcdDBSize        = "kao_etcd_db_size_bytes"
	CertExpiry        = "kao_certificate_expiration_timestamp_seconds"
	CertRenewal       = "kao_certificate_next_renewal_timestamp_seconds"
	Members           = "kao_members"
	MembersJoined     = "kao_members_joined"
	MembersReady      = "kao_members_ready"
	MemberReady       = "kao_member_ready"
	AgentCertExpiry   = "kao_member_agent_certificate_expiration_timestamp_seconds"
	BackupCreated     = "kao_etcdbackup_created_timestamp_seconds"
	BackupLastSuccess = "kao_etcdbackup_last_success_timestamp_seconds"
	BackupLastSize    = "kao_etcdbackup_last_size_bytes"
	BackupRetained    = "kao_etcdbackup_snapshots_retained"
	BackupInterval    = "kao_etcdbackup_schedule_interval_seconds"
	RestorePhase      = "kao_etcdrestore_phase"
)

// Catalog is every metric kao exports.
var Catalog = []Metric{
	// Runs.
	{Name: RunsStarted, Type: Counter, Labels: with(deploymentLabels, labelPlaybook),
		Help: "Playbook runs started, by playbook (a drift check's is the playbook with :check)."},
	{Name: RunsFinished, Type: Counter, Labels: with(deploymentLabels, labelPlaybook, labelResult),
		Help: "Playbook runs finished, by playbook and result (Succeeded, Failed, Cancelled)."},
	{Name: RunDuration, Type: Histogram, Labels: with(deploymentLabels, labelPlaybook, labelResult),
		Help: "Duration of finished playbook runs in seconds, by playbook and result."},
	{Name: RunFailedTasks, Type: Counter, Labels: with(deploymentLabels, labelRole),
		Help: "Tasks that failed or found their host unreachable, by the role they belong to (\"playbook\" for a play's own tasks)."},
	{Name: RunRetries, Type: Counter, Labels: deploymentLabels,
		Help: "Retries scheduled after a failed run, or after a run that could not start (a missing Secret, a refused host)."},

	// Deployment state.
	{Name: DeploymentInfo, Type: Gauge, State: true, Labels: with(deploymentLabels, labelMode, labelVersion),
		Help: "Always 1: the deployment's mode and the Karmada version its control plane last reached."},
	{Name: DeploymentCond, Type: Gauge, State: true, Labels: with(deploymentLabels, labelCondition, labelStatus),
		Help: "1 for the status (True, False, Unknown) each condition has, 0 for the other two."},
	{Name: DeploymentFails, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "Consecutive failed runs of the current generation (status.retry.failures)."},
	{Name: DeploymentRetryAt, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "When kao runs again after a failure, in seconds since the epoch (status.retry.nextRetryTime)."},
	{Name: DeploymentSuccess, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "When the last successful run ended, in seconds since the epoch (status.lastSuccessfulRunTime)."},
	{Name: DeploymentRunning, Type: Gauge, State: true, Labels: with(deploymentLabels, labelPlaybook),
		Help: "1 while a playbook run is in progress (status.progress)."},
	{Name: ComponentReady, Type: Gauge, State: true, Labels: with(deploymentLabels, labelComponent),
		Help: "1 when every instance of the control-plane component passes its health check."},
	{Name: ComponentInfo, Type: Gauge, State: true, Labels: with(deploymentLabels, labelComponent, labelVersion, labelTargetVersion),
		Help: "Always 1: the version a component runs and, while it differs, the version the spec asks for."},

	// etcd.
	{Name: EtcdMembers, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "etcd members kao probed, learners included."},
	{Name: EtcdVoters, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "etcd members that vote (not learners): quorum is a majority of them."},
	{Name: EtcdHealthy, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "etcd members that answered a health check."},
	{Name: EtcdLeader, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "1 when the etcd cluster reports a leader."},
	{Name: EtcdMemberHealthy, Type: Gauge, State: true, Labels: with(deploymentLabels, labelMember),
		Help: "1 when the etcd member answered a health check."},
	{Name: EtcdDBSize, Type: Gauge, State: true, Labels: with(deploymentLabels, labelMember),
		Help: "Size of the etcd member's database file in bytes, as the member reported it."},

	// Certificates.
	{Name: CertExpiry, Type: Gauge, State: true, Labels: with(deploymentLabels, labelCertificate),
		Help: "When a certificate kao issued expires, in seconds since the epoch."},
	{Name: CertRenewal, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "When kao renews certificates next, in seconds since the epoch."},

	// Members.
	{Name: Members, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "Member clusters in spec.members."},
	{Name: MembersJoined, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "Member clusters whose Cluster object exists in Karmada."},
	{Name: MembersReady, Type: Gauge, State: true, Labels: deploymentLabels,
		Help: "Member clusters Karmada reports Ready."},
	{Name: MemberReady, Type: Gauge, State: true, Labels: with(deploymentLabels, labelMember, labelSyncMode),
		Help: "1 when Karmada reports the member cluster Ready."},
	{Name: AgentCertExpiry, Type: Gauge, State: true, Labels: with(deploymentLabels, labelMember),
		Help: "When the karmada-agent certificate kao delivered to a Pull member expires, in seconds since the epoch."},

	// Backups.
	{Name: BackupSnapshots, Type: Counter, Labels: with(backupLabels, labelResult),
		Help: "Snapshot attempts, by result (Succeeded, Failed)."},
	{Name: BackupDuration, Type: Histogram, Labels: backupLabels,
		Help: "Time to take, verify and store a successful snapshot, in seconds."},
	{Name: BackupPruned, Type: Counter, Labels: backupLabels,
		Help: "Snapshots deleted by retention."},
	{Name: BackupCreated, Type: Gauge, State: true, Labels: backupLabels,
		Help: "When the EtcdBackup was created, in seconds since the epoch: the reference for a backup that never succeeded."},
	{Name: BackupLastSuccess, Type: Gauge, State: true, Labels: backupLabels,
		Help: "When the newest successful snapshot was taken, in seconds since the epoch."},
	{Name: BackupLastSize, Type: Gauge, State: true, Labels: backupLabels,
		Help: "Size of the newest successful snapshot in bytes."},
	{Name: BackupRetained, Type: Gauge, State: true, Labels: backupLabels,
		Help: "Snapshots kept by retention."},
	{Name: BackupInterval, Type: Gauge, State: true, Labels: backupLabels,
		Help: "Seconds between two scheduled snapshots; absent for a one-shot or suspended backup."},

	// Restores.
	{Name: RestoresFinished, Type: Counter, Labels: with(deploymentLabels, labelResult),
		Help: "Restores ended, by result (Succeeded, Failed)."},
	{Name: RestorePhase, Type: Gauge, State: true, Labels: with(deploymentLabels, labelRestore, labelPhase),
		Help: "Always 1: the phase an EtcdRestore is in."},
}

// lookup returns the catalog entry of a metric; it panics on a name that
// is not in the catalog, which is a programming error caught by any test.
func lookup(name string) Metric {
	for _, m := range Catalog {
		if m.Name == name {
			return m
		}
	}
	panic("metrics: " + name + " is not in the catalog")
}

// SeriesNames are the names a scrape shows: a histogram's three series
// names in place of its own.
func SeriesNames() map[string]Metric {
	names := map[string]Metric{}
	for _, m := range Catalog {
		if m.Type == Histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[m.Name+s] = m
			}
			continue
		}
		names[m.Name] = m
	}
	return names
}
