package v1alpha1

// Condition types and reasons shared by kao's kinds. Every condition kao owns is
// set on the first visit of an object, as Unknown when nothing is known yet.

// ReadyCondition says the object does what it was asked for: for a
// KarmadaDeployment, the control plane answers its probes.
const (
	ReadyCondition = "Ready"

	// NotImplementedReason is used while a controller does not act on this kind yet.
	NotImplementedReason = "NotImplemented"
	// WaitingForRunReason means nothing has been installed yet, a run is pending or running.
	WaitingForRunReason = "WaitingForRun"
	// ProbeSucceededReason means every probe answered healthy.
	ProbeSucceededReason = "ProbeSucceeded"
	// ProbeFailedReason means at least one probe failed; the message names it.
	ProbeFailedReason = "ProbeFailed"
	// InvalidSpecReason means the spec passed API validation but cannot be acted on; the message says why.
	InvalidSpecReason = "InvalidSpec"
	// DeletingReason means the object is being deleted.
	DeletingReason = "Deleting"
)

// ControlPlaneReadyCondition says every control-plane component passes its health check.
const (
	ControlPlaneReadyCondition = "ControlPlaneReady"

	// ComponentsHealthyReason means every component passed its health check.
	ComponentsHealthyReason = "ComponentsHealthy"
	// ComponentsUnhealthyReason means at least one component failed its health check.
	ComponentsUnhealthyReason = "ComponentsUnhealthy"
	// ComponentsUnavailableReason means no instance of at least one component
	// answers on any host (its only host is down, or every one of them): the
	// message says what stops until a host runs it again. Binary mode only:
	// a Containerized plane's host cluster reschedules what is missing.
	ComponentsUnavailableReason = "ComponentsUnavailable"
)

// EtcdHealthyCondition says the etcd cluster has quorum and every member answers.
const (
	EtcdHealthyCondition = "EtcdHealthy"

	// EtcdMembersHealthyReason means every member answered a health check.
	EtcdMembersHealthyReason = "MembersHealthy"
	// EtcdMembersUnhealthyReason means some members did not answer but quorum holds.
	EtcdMembersUnhealthyReason = "MembersUnhealthy"
	// EtcdQuorumLostReason means too few members answered to keep quorum.
	EtcdQuorumLostReason = "QuorumLost"
	// EtcdAllMembersStoppedReason means etcd runs on none of the members'
	// hosts: each host is up and refuses the connection to its member, so
	// starting etcd there, as a run does, brings the cluster back.
	EtcdAllMembersStoppedReason = "AllMembersStopped"
)

// MembersReadyCondition says every member cluster in spec is joined and Ready.
const (
	MembersReadyCondition = "MembersReady"

	// AllMembersReadyReason means every member is joined and Ready.
	AllMembersReadyReason = "AllMembersReady"
	// MembersNotReadyReason means some members are not joined or not Ready; status.members says which.
	MembersNotReadyReason = "MembersNotReady"
	// NoMembersReason means spec.members is empty.
	NoMembersReason = "NoMembers"
)

// PlaybookSucceededCondition records whether the last playbook run succeeded.
// It says nothing about health: see Ready.
const (
	PlaybookSucceededCondition = "PlaybookSucceeded"

	// RunSucceededReason means the last run finished without failures.
	RunSucceededReason = "RunSucceeded"
	// RunFailedReason means the last run had failed tasks; status.lastRun says which.
	RunFailedReason = "RunFailed"
	// HostUnreachableReason means the last run could not reach a host.
	HostUnreachableReason = "HostUnreachable"
	// RunningReason means a run is in progress.
	RunningReason = "Running"
	// RunInterruptedReason means a run was cut off (operator restart, cancel) and will be repeated.
	RunInterruptedReason = "RunInterrupted"
	// RunQueuedReason means a run is due but waits for a free slot: the
	// operator's limit of runs at once (in total or in the namespace) is reached.
	RunQueuedReason = "RunQueued"
	// PlanningReason means kao plans the generation instead of applying it
	// (annotation kao.io/plan): a check-mode run is under way.
	PlanningReason = "Planning"
	// PlannedReason means the generation is planned and not applied:
	// status.plan says what its run would do; removing the annotation
	// kao.io/plan applies it.
	PlannedReason = "Planned"
	// PlanFailedReason means the plan of the generation could not finish;
	// status.plan says why. The generation is not applied.
	PlanFailedReason = "PlanFailed"
	// RunHeldQuorumLostReason means a run is due but held: the managed
	// etcd has lost its quorum, so a run would fail at etcd and could make
	// things worse. The run starts once a quorum answers again, after the
	// members are back or a snapshot was restored (EtcdRestore).
	RunHeldQuorumLostReason = "RunHeldQuorumLost"
	// PrerequisitesMissingReason means a referenced Secret, key or artifact is missing or malformed.
	PrerequisitesMissingReason = "PrerequisitesMissing"
	// UserRoleInvalidReason means a role of spec.addons.userRoles cannot be
	// used: its ConfigMap is missing or holds a key that is not a safe path,
	// its path is outside the operator's --user-roles-dir, or the operator
	// does not run roles from that source. Nothing runs until it is fixed.
	UserRoleInvalidReason = "UserRoleInvalid"
	// DowngradeRefusedReason means the spec asks for a version older than one
	// that runs; kao does not downgrade, and started nothing.
	DowngradeRefusedReason = "DowngradeRefused"
	// UpgradeBackupFailedReason means the etcd snapshot an upgrade takes first
	// failed; the upgrade did not start.
	UpgradeBackupFailedReason = "UpgradeBackupFailed"
	// UpgradeBackupSkippedReason (an Event) means an upgrade started without
	// the etcd snapshot, as annotation kao.io/upgrade-without-backup asked.
	UpgradeBackupSkippedReason = "UpgradeBackupSkipped"
	// HostClusterUnreachableReason means kao could not use the host cluster of a
	// Containerized deployment before a run (kubeconfig, permissions, connection).
	HostClusterUnreachableReason = "HostClusterUnreachable"
	// ExposurePendingReason means kao waits for the host cluster to give
	// karmada-apiserver's Service an address (a load balancer's, or a node's)
	// before it issues the certificate naming it and starts the run.
	ExposurePendingReason = "ExposurePending"
)

// CertificatesValidCondition says every issued certificate is valid and outside its renewal window.
const (
	CertificatesValidCondition = "CertificatesValid"

	// CertificatesCurrentReason means every certificate is valid.
	CertificatesCurrentReason = "CertificatesCurrent"
	// CertificatesExpiringReason means a certificate is inside its renewal window.
	CertificatesExpiringReason = "CertificatesExpiring"
	// TrustRootUnusableReason means a CA or the service account key is lost or
	// broken while certificates it signed are still in use: a person must
	// restore it, or remove its dependents from the PKI Secret.
	TrustRootUnusableReason = "TrustRootUnusable"
	// CertificatesExpiredReason means a certificate has expired.
	CertificatesExpiredReason = "CertificatesExpired"
)

// InSyncCondition says whether the hosts match the last successful run, as
// the last drift check (spec.driftCheck) found.
const (
	InSyncCondition = "InSync"

	// NoDriftReason means the last drift check found nothing a run would change.
	NoDriftReason = "NoDrift"
	// DriftDetectedReason means the last drift check found changes made
	// outside kao; status.drift lists them.
	DriftDetectedReason = "DriftDetected"
	// DriftCheckFailedReason means the last drift check could not finish.
	DriftCheckFailedReason = "DriftCheckFailed"
	// ConvergedReason means a successful run since the last drift check put
	// every host in the state the spec asks for.
	ConvergedReason = "Converged"
)

// PausedCondition says spec.paused stops kao from starting runs.
const (
	PausedCondition = "Paused"

	// PausedReason means spec.paused is true.
	PausedReason = "Paused"
	// NotPausedReason means spec.paused is false.
	NotPausedReason = "NotPaused"
)

// BackupSucceededCondition records whether the last etcd snapshot succeeded.
const (
	BackupSucceededCondition = "BackupSucceeded"

	// SnapshotSavedReason means the snapshot was taken, verified and stored.
	SnapshotSavedReason = "SnapshotSaved"
	// SnapshotFailedReason means the snapshot could not be taken, verified or stored.
	SnapshotFailedReason = "SnapshotFailed"
)

// RestoreSucceededCondition records whether an etcd restore finished.
const (
	RestoreSucceededCondition = "RestoreSucceeded"

	// RestoredReason means every member was restored and the cluster is healthy.
	RestoredReason = "Restored"
	// RestoreFailedReason means the restore failed; the message says where.
	RestoreFailedReason = "RestoreFailed"
	// ChecksumMismatchReason means the snapshot does not match its recorded sha256.
	ChecksumMismatchReason = "ChecksumMismatch"
)
