package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestorePhase is where an EtcdRestore is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type RestorePhase string

const (
	// RestorePending means the restore has not started.
	RestorePending RestorePhase = "Pending"
	// RestoreRunning means the API servers are stopped and members are being restored.
	RestoreRunning RestorePhase = "Running"
	// RestoreSucceeded means every member was restored and the cluster is healthy.
	RestoreSucceeded RestorePhase = "Succeeded"
	// RestoreFailed means the restore failed; conditions say where.
	RestoreFailed RestorePhase = "Failed"
)

// EtcdRestoreSpec restores a KarmadaDeployment's etcd from a snapshot. It cannot
// be changed once created: create a new EtcdRestore to restore again.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new EtcdRestore instead"
type EtcdRestoreSpec struct {
	// deploymentName names the KarmadaDeployment, in this namespace, to restore into.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DeploymentName string `json:"deploymentName"`

	// source is the snapshot to restore.
	// +required
	Source RestoreSource `json:"source"`
}

// RestoreSource is the snapshot to restore: from an EtcdBackup, or a file with its checksum.
// +kubebuilder:validation:XValidation:rule="has(self.backupName) != has(self.path)",message="set exactly one of spec.source.backupName and spec.source.path"
// +kubebuilder:validation:XValidation:rule="!has(self.path) || has(self.sha256)",message="spec.source.sha256 is required with spec.source.path: kao refuses snapshots it cannot verify"
// +kubebuilder:validation:XValidation:rule="!has(self.snapshotName) || has(self.backupName)",message="spec.source.snapshotName is only used with spec.source.backupName"
type RestoreSource struct {
	// backupName names an EtcdBackup in this namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	BackupName string `json:"backupName,omitempty"`

	// snapshotName picks one snapshot of the backup (a file name listed in
	// its status.snapshots); its newest when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][-_.a-zA-Z0-9]*$`
	SnapshotName string `json:"snapshotName,omitempty"`

	// path is a snapshot file on the operator's state volume: a plain
	// absolute path, without "." or ".." segments.
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[-_./a-zA-Z0-9]*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('//|/[.][.]?(/|$)') && !self.endsWith('/')",message="spec.source.path must be a plain absolute file path: no '.' or '..' segments, no '//', no trailing '/'"
	Path string `json:"path,omitempty"`

	// sha256 is the expected SHA-256 of the file at path, in hex.
	// +optional
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256,omitempty"`
}

// EtcdRestoreStatus is what kao observed and did for an EtcdRestore.
type EtcdRestoreStatus struct {
	// observedGeneration is the spec generation the last successful reconcile acted on.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is Pending, Running, Succeeded or Failed.
	// +optional
	Phase RestorePhase `json:"phase,omitempty"`

	// conditions are RestoreSucceeded and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// snapshot is the snapshot being restored, as kao verified it.
	// +optional
	Snapshot *Snapshot `json:"snapshot,omitempty"`

	// previousDataDir is where each etcd member keeps, on its host, the data it
	// had before the restore. kao never deletes it.
	// +optional
	// +kubebuilder:validation:MaxLength=400
	PreviousDataDir string `json:"previousDataDir,omitempty"`

	// progress is the restore's playbook run in progress.
	// +optional
	Progress *RunProgress `json:"progress,omitempty"`

	// lastRun is the outcome of the restore's last playbook run: per-host
	// counts and failed tasks.
	// +optional
	LastRun *RunStatus `json:"lastRun,omitempty"`

	// startTime is when the restore started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the restore finished.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// EtcdRestore restores a KarmadaDeployment's etcd from a snapshot.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=er,categories=kao
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.spec.source.backupName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress.percent`,priority=1
// +kubebuilder:printcolumn:name="Snapshot",type=string,JSONPath=`.status.snapshot.name`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdRestore struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the restore to perform.
	// +required
	Spec EtcdRestoreSpec `json:"spec"`

	// status is what kao observed and did.
	// +optional
	Status EtcdRestoreStatus `json:"status,omitempty,omitzero"`
}

// EtcdRestoreList is a list of EtcdRestores.
//
// +kubebuilder:object:root=true
type EtcdRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdRestore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EtcdRestore{}, &EtcdRestoreList{})
}
