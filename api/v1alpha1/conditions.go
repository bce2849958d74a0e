package v1alpha1

// Condition types and reasons shared by kao's kinds. Every condition kao owns is
// set on the first visit of an object, as Unknown when nothing is known yet.

// ReadyCondition says the object does what it was asked for: for a
// KarmadaDeployment, the control plane answers its probes.
const (
	ReadyCondition = "Ready"

	// NotImplementedReason is used while a controller does not act on this kind yet.
	NotImplementedReason = "NotImplemented"
	// WaitingForRunReason: nothing has been installed yet, a run is pending or running.
	WaitingForRunReason = "WaitingForRun"
	// ProbeSucceededReason: every probe answered healthy.
	ProbeSucceededReason = "ProbeSucceeded"
	// ProbeFailedReason: at least one probe failed; the message names it.
	ProbeFailedReason = "ProbeFailed"
	// InvalidSpecReason: the spec passed API validation but cannot be acted on; the message says why.
	InvalidSpecReason = "InvalidSpec"
	// DeletingReason: the object is being deleted.
	DeletingReason = "Deleting"
)

// ControlPlaneReadyCondition says every control-plane component passes its health check.
const (
	ControlPlaneReadyCondition = "ControlPlaneReady"

	// ComponentsHealthyReason: every component passed its health check.
	ComponentsHealthyReason = "ComponentsHealthy"
	// ComponentsUnhealthyReason: at least one component failed its health check.
	ComponentsUnhealthyReason = "ComponentsUnhealthy"
)

// EtcdHealthyCondition says the etcd cluster has quorum and every member answers.
const (
	EtcdHealthyCondition = "EtcdHealthy"

	// EtcdMembersHealthyReason: every member answered a health check.
	EtcdMembersHealthyReason = "MembersHealthy"
	// EtcdMembersUnhealthyReason: some members did not answer but quorum holds.
	EtcdMembersUnhealthyReason = "MembersUnhealthy"
	// EtcdQuorumLostReason: too few members answered to keep quorum.
	EtcdQuorumLostReason = "QuorumLost"
)

// MembersReadyCondition says every member cluster in spec is joined and Ready.
const (
	MembersReadyCondition = "MembersReady"

	// AllMembersReadyReason: every member is joined and Ready.
	AllMembersReadyReason = "AllMembersReady"
	// MembersNotReadyReason: some members are not joined or not Ready; status.members says which.
	MembersNotReadyReason = "MembersNotReady"
	// NoMembersReason: spec.members is empty.
	NoMembersReason = "NoMembers"
)

// PlaybookSucceededCondition records whether the last playbook run succeeded.
// It says nothing about health: see Ready.
const (
	PlaybookSucceededCondition = "PlaybookSucceeded"

	// RunSucceededReason: the last run finished without failures.
	RunSucceededReason = "RunSucceeded"
	// RunFailedReason: the last run had failed tasks; status.lastRun says which.
	RunFailedReason = "RunFailed"
	// HostUnreachableReason: the last run could not reach a host.
	HostUnreachableReason = "HostUnreachable"
	// RunningReason: a run is in progress.
	RunningReason = "Running"
	// RunInterruptedReason: a run was cut off (operator restart, cancel) and will be repeated.
	RunInterruptedReason = "RunInterrupted"
	// PrerequisitesMissingReason: a referenced Secret, key or artifact is missing or malformed.
	PrerequisitesMissingReason = "PrerequisitesMissing"
)

// CertificatesValidCondition says every issued certificate is valid and outside its renewal window.
const (
	CertificatesValidCondition = "CertificatesValid"

	// CertificatesCurrentReason: every certificate is valid.
	CertificatesCurrentReason = "CertificatesCurrent"
	// CertificatesExpiringReason: a certificate is inside its renewal window.
	CertificatesExpiringReason = "CertificatesExpiring"
	// CertificatesExpiredReason: a certificate has expired.
	CertificatesExpiredReason = "CertificatesExpired"
)

// PausedCondition says spec.paused stops kao from starting runs.
const (
	PausedCondition = "Paused"

	// PausedReason: spec.paused is true.
	PausedReason = "Paused"
	// NotPausedReason: spec.paused is false.
	NotPausedReason = "NotPaused"
)

// BackupSucceededCondition records whether the last etcd snapshot succeeded.
const (
	BackupSucceededCondition = "BackupSucceeded"

	// SnapshotSavedReason: the snapshot was taken, verified and stored.
	SnapshotSavedReason = "SnapshotSaved"
	// SnapshotFailedReason: the snapshot could not be taken, verified or stored.
	SnapshotFailedReason = "SnapshotFailed"
)

// RestoreSucceededCondition records whether an etcd restore finished.
const (
	RestoreSucceededCondition = "RestoreSucceeded"

	// RestoredReason: every member was restored and the cluster is healthy.
	RestoredReason = "Restored"
	// RestoreFailedReason: the restore failed; the message says where.
	RestoreFailedReason = "RestoreFailed"
	// ChecksumMismatchReason: the snapshot does not match its recorded sha256.
	ChecksumMismatchReason = "ChecksumMismatch"
)
