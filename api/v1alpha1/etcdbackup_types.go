package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackupDestinationType is where etcd snapshots are stored.
// +kubebuilder:validation:Enum=Local;SSH
type BackupDestinationType string

const (
	// LocalDestination stores snapshots on the operator's state volume.
	LocalDestination BackupDestinationType = "Local"
	// SSHDestination copies snapshots to a backup host over SSH.
	SSHDestination BackupDestinationType = "SSH"
)

// EtcdBackupSpec is a one-shot or scheduled etcd snapshot of a KarmadaDeployment.
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || has(self.schedule)",message="spec.retention needs spec.schedule: a one-shot backup keeps its single snapshot"
type EtcdBackupSpec struct {
	// deploymentName names the KarmadaDeployment, in this namespace, whose etcd is backed up.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DeploymentName string `json:"deploymentName"`

	// schedule is a cron expression (five fields, UTC) for recurring snapshots.
	// Without it the backup runs once.
	// +optional
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.matches('^(@(hourly|daily|weekly|monthly|yearly)|[-0-9*/,A-Za-z]+ [-0-9*/,A-Za-z]+ [-0-9*/,A-Za-z]+ [-0-9*/,A-Za-z]+ [-0-9*/,A-Za-z]+)$')",message="spec.schedule must be a five-field cron expression such as '0 */6 * * *' or one of @hourly, @daily, @weekly, @monthly, @yearly"
	Schedule string `json:"schedule,omitempty"`

	// retention is how many snapshots a scheduled backup keeps; older ones are deleted. Defaults to 7.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	Retention *int32 `json:"retention,omitempty"`

	// destination is where snapshots are stored.
	// +required
	Destination BackupDestination `json:"destination"`

	// suspend stops a scheduled backup from taking new snapshots.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// BackupDestination is where etcd snapshots are stored.
// +kubebuilder:validation:XValidation:rule="self.type != 'SSH' || has(self.ssh)",message="spec.destination.ssh is required when spec.destination.type is SSH"
// +kubebuilder:validation:XValidation:rule="self.type == 'SSH' || !has(self.ssh)",message="spec.destination.ssh is only used when spec.destination.type is SSH"
type BackupDestination struct {
	// type is Local (the operator's state volume) or SSH (a backup host).
	// +required
	Type BackupDestinationType `json:"type"`

	// ssh is the backup host for type SSH.
	// +optional
	SSH *SSHBackupDestination `json:"ssh,omitempty"`
}

// SSHBackupDestination is a backup host reached over SSH with a pinned host key.
type SSHBackupDestination struct {
	// address is the backup host's IP address or DNS name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="address must be an IP address or a lower-case DNS name"
	Address string `json:"address"`

	// port is the SSH port. Defaults to 22.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// user is the SSH user. Defaults to root.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z_][a-z0-9_-]*$`
	User string `json:"user,omitempty"`

	// directory is the absolute directory snapshots are written to, without "." or ".." segments.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[-_./a-zA-Z0-9]*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('//|/[.][.]?(/|$)')",message="spec.destination.ssh.directory must be a plain absolute path: no '.' or '..' segments and no '//'"
	Directory string `json:"directory"`

	// privateKeySecretRef points at an unencrypted OpenSSH private key.
	// +required
	PrivateKeySecretRef SecretKeyReference `json:"privateKeySecretRef"`

	// knownHostsSecretRef points at a known_hosts file with the backup host's key.
	// +required
	KnownHostsSecretRef SecretKeyReference `json:"knownHostsSecretRef"`
}

// Snapshot is one stored etcd snapshot.
type Snapshot struct {
	// name is the snapshot file name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// location is where the file is stored: a path on the operator's state volume or host:path.
	// +required
	// +kubebuilder:validation:MaxLength=1300
	Location string `json:"location"`
	// size is the file size.
	// +required
	Size resource.Quantity `json:"size"`
	// sha256 is the file's SHA-256 in hex.
	// +required
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
	// revision is the etcd revision the snapshot holds.
	// +required
	Revision int64 `json:"revision"`
	// keys is how many keys the snapshot holds (every revision of every
	// key), as etcdutl counts them: with revision, what retention compares
	// to keep the last snapshot taken before etcd lost most of its data.
	// +optional
	Keys int64 `json:"keys,omitempty"`
	// member is the etcd member the snapshot was taken from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Member string `json:"member,omitempty"`
	// time is when the snapshot was taken.
	// +required
	Time metav1.Time `json:"time"`
}

// EtcdBackupStatus is what kao observed and did for an EtcdBackup.
type EtcdBackupStatus struct {
	// observedGeneration is the spec generation the last successful reconcile acted on.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are BackupSucceeded and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// lastSnapshot is the newest successful snapshot.
	// +optional
	LastSnapshot *Snapshot `json:"lastSnapshot,omitempty"`

	// snapshots are the snapshots kept by retention, newest first.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Snapshots []Snapshot `json:"snapshots,omitempty"`

	// lastScheduleTime is when the last scheduled snapshot started.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`

	// nextScheduleTime is when the next scheduled snapshot starts.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`

	// snapshotJob is the snapshot being taken in a Job, while it runs: with
	// the operator's Job executor, a snapshot stored on a backup host is
	// taken by a Job in the backup's namespace, which outlives the operator.
	// +optional
	SnapshotJob *SnapshotJob `json:"snapshotJob,omitempty"`
}

// SnapshotJob is a snapshot being taken in a Job.
type SnapshotJob struct {
	// name is the Job's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// id is the task's ID, which the Job's labels carry.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	ID string `json:"id"`

	// snapshot is the file name the snapshot gets.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Snapshot string `json:"snapshot"`

	// startTime is when the Job was created.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// scheduleTime is the schedule time the snapshot stands for; absent for
	// a one-shot backup.
	// +optional
	ScheduleTime *metav1.Time `json:"scheduleTime,omitempty"`
}

// EtcdBackup takes one-shot or scheduled snapshots of a KarmadaDeployment's etcd.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=eb,categories=kao
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Last Snapshot",type=date,JSONPath=`.status.lastSnapshot.time`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EtcdBackup struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired backup.
	// +required
	Spec EtcdBackupSpec `json:"spec"`

	// status is what kao observed and did.
	// +optional
	Status EtcdBackupStatus `json:"status,omitempty,omitzero"`
}

// EtcdBackupList is a list of EtcdBackups.
//
// +kubebuilder:object:root=true
type EtcdBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EtcdBackup `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EtcdBackup{}, &EtcdBackupList{})
}
