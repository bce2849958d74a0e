package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeploymentMode says where a Karmada control plane runs.
// +kubebuilder:validation:Enum=Binary;Containerized
type DeploymentMode string

const (
	// BinaryMode installs every component as a systemd service on SSH-reachable hosts.
	BinaryMode DeploymentMode = "Binary"
	// ContainerizedMode installs every component as a workload on a host Kubernetes cluster.
	ContainerizedMode DeploymentMode = "Containerized"
)

// HostRole is a job a host does in a Binary control plane.
// +kubebuilder:validation:Enum=etcd;apiServer;controlPlane
type HostRole string

const (
	// EtcdRole hosts a member of the managed etcd cluster.
	EtcdRole HostRole = "etcd"
	// APIServerRole hosts karmada-apiserver and karmada-aggregated-apiserver.
	APIServerRole HostRole = "apiServer"
	// ControlPlaneRole hosts kube-controller-manager, karmada-controller-manager,
	// karmada-scheduler, karmada-webhook and the enabled addons.
	ControlPlaneRole HostRole = "controlPlane"
)

// SyncMode is how a member cluster is kept in sync with Karmada.
// +kubebuilder:validation:Enum=Push;Pull
type SyncMode string

const (
	// PushSyncMode means Karmada's controllers reach into the member with a service account token.
	PushSyncMode SyncMode = "Push"
	// PullSyncMode means karmada-agent runs in the member and pulls its work from Karmada.
	PullSyncMode SyncMode = "Pull"
)

// ServiceType is how karmada-apiserver is exposed on a host cluster.
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
type ServiceType string

const (
	// ClusterIPService exposes karmada-apiserver inside the host cluster only.
	ClusterIPService ServiceType = "ClusterIP"
	// NodePortService exposes karmada-apiserver on a port of every host cluster node.
	NodePortService ServiceType = "NodePort"
	// LoadBalancerService exposes karmada-apiserver through the host cluster's load balancer.
	LoadBalancerService ServiceType = "LoadBalancer"
)

// EtcdStorageType is where a containerized etcd member keeps its data.
// +kubebuilder:validation:Enum=PersistentVolumeClaim;HostPath;EmptyDir
type EtcdStorageType string

const (
	// PVCStorage keeps etcd data in a PersistentVolumeClaim per member.
	PVCStorage EtcdStorageType = "PersistentVolumeClaim"
	// HostPathStorage keeps etcd data in a directory of the node.
	HostPathStorage EtcdStorageType = "HostPath"
	// EmptyDirStorage keeps etcd data in an emptyDir: lost with the pod, for tests only.
	EmptyDirStorage EtcdStorageType = "EmptyDir"
)

// BecomeMethod is how Ansible gains root on a host when the SSH user is not root.
// +kubebuilder:validation:Enum=None;Sudo
type BecomeMethod string

const (
	// BecomeNone runs tasks as the SSH user; use it when that user is root.
	BecomeNone BecomeMethod = "None"
	// BecomeSudo runs tasks through password-less sudo.
	BecomeSudo BecomeMethod = "Sudo"
)

// InventoryGroup names a group of kao's generated Ansible inventory.
// +kubebuilder:validation:Enum=all;etcd;karmada_apiserver;karmada_control_plane;host_cluster;members;members_join;members_unjoin
type InventoryGroup string

// UserRoleStage is when a user role runs relative to kao's own install.
// +kubebuilder:validation:Enum=BeforeInstall;AfterInstall
type UserRoleStage string

const (
	// BeforeInstallStage runs the role before kao installs or changes anything.
	BeforeInstallStage UserRoleStage = "BeforeInstall"
	// AfterInstallStage runs the role after a successful install or upgrade.
	AfterInstallStage UserRoleStage = "AfterInstall"
)

// KarmadaDeploymentSpec is the desired Karmada control plane.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || (has(self.hosts) && size(self.hosts) > 0)",message="spec.hosts is required when spec.mode is Binary"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || has(self.ssh)",message="spec.ssh is required when spec.mode is Binary"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || has(self.hostCluster)",message="spec.hostCluster is required when spec.mode is Containerized"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || !has(self.hosts)",message="spec.hosts is only used when spec.mode is Binary"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || !has(self.ssh)",message="spec.ssh is only used when spec.mode is Binary"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hostCluster)",message="spec.hostCluster is only used when spec.mode is Containerized"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hosts) || self.hosts.exists(h, 'apiServer' in h.roles)",message="at least one host in spec.hosts needs the apiServer role"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hosts) || self.hosts.exists(h, 'controlPlane' in h.roles)",message="at least one host in spec.hosts needs the controlPlane role"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.hosts) || !has(oldSelf.etcd.managed) || oldSelf.hosts.all(o, !('etcd' in o.roles) || (has(self.hosts) && self.hosts.exists(h, h.name == o.name)) || (has(self.lostHosts) && o.name in self.lostHosts))",message="a host with the etcd role cannot leave spec.hosts in one step: first set its roles without etcd (kao removes its member from the cluster and wipes it in the next run), then remove the host; a host that is gone for good leaves in one step when spec.lostHosts names it"
// +kubebuilder:validation:XValidation:rule="!has(self.lostHosts) || !has(self.hosts) || self.lostHosts.all(n, !self.hosts.exists(h, h.name == n))",message="a host named in spec.lostHosts is gone for good and cannot also be in spec.hosts: a host that comes back joins under a new name, after it was wiped"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hosts) || !has(self.etcd.managed) || size(self.hosts.filter(h, 'etcd' in h.roles)) % 2 == 1",message="managed etcd needs an odd number of hosts with the etcd role (1, 3, 5 or 7) to keep quorum"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hosts) || !has(self.etcd.external) || !self.hosts.exists(h, 'etcd' in h.roles)",message="the etcd host role is only used with spec.etcd.managed; remove it or drop spec.etcd.external"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.etcd.managed) || !has(self.etcd.managed.replicas)",message="spec.etcd.managed.replicas is only used in Containerized mode; in Binary mode etcd runs on the hosts with the etcd role"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.hosts) || size(self.hosts.filter(h, 'apiServer' in h.roles)) < 2 || (has(self.apiServer) && has(self.apiServer.endpoint))",message="spec.apiServer.endpoint (a VIP or load balancer host:port) is required when more than one host has the apiServer role"
// +kubebuilder:validation:XValidation:rule="!has(self.hosts) || self.hosts.all(h, self.hosts.exists_one(o, o.address == h.address && (has(o.port) ? o.port : 22) == (has(h.port) ? h.port : 22)))",message="spec.hosts must not list the same address and port twice"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || (has(self.artifacts) && has(self.artifacts.imageRegistry))",message="spec.artifacts.imageRegistry is required when spec.mode is Containerized: kao pulls every image from that registry (an offline mirror), never from the internet"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || !has(self.hostCluster) || !has(self.hostCluster.kubeconfigSecretRef) || (has(self.apiServer) && (has(self.apiServer.endpoint) || (has(self.apiServer.serviceType) && self.apiServer.serviceType != 'ClusterIP')))",message="kao reaches a remote host cluster's karmada-apiserver from outside that cluster: with spec.hostCluster.kubeconfigSecretRef set spec.apiServer.serviceType to NodePort or LoadBalancer, or give spec.apiServer.endpoint"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Binary' || !has(self.etcd.managed) || (!has(self.etcd.managed.resources) && !has(self.etcd.managed.tolerations))",message="spec.etcd.managed.resources and spec.etcd.managed.tolerations are only used in Containerized mode"
// +kubebuilder:validation:XValidation:rule="!has(self.addons) || !has(self.addons.schedulerEstimator) || !self.addons.schedulerEstimator.enabled || !has(self.members) || self.members.all(m, size(m.name) <= 35)",message="with spec.addons.schedulerEstimator enabled, member names must be at most 35 characters: each member's estimator is reached through a Service named karmada-scheduler-estimator-<member>, and Service names are at most 63 characters"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Containerized' || !has(self.driftCheck)",message="spec.driftCheck covers Binary mode, whose hosts kao installs over SSH; a Containerized control plane's objects are kept by their host cluster's controllers"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.hostCluster) || !has(self.hostCluster) || has(self.hostCluster.namespace) == has(oldSelf.hostCluster.namespace)",message="spec.hostCluster.namespace cannot change: the control plane's workloads, Secrets and volumes stay in the namespace they were created in"
type KarmadaDeploymentSpec struct {
	// mode is where the control plane runs: Binary (systemd services on spec.hosts over SSH)
	// or Containerized (workloads on spec.hostCluster). It cannot be changed after creation.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.mode is immutable"
	Mode DeploymentMode `json:"mode"`

	// version is the Karmada version to run, for example v1.18.1. The artifacts
	// bundle must contain it. Changing it on a running control plane upgrades
	// it: kao takes an etcd snapshot, then moves the components in Karmada's
	// order, one host at a time, each host health-gated (status.upgrade).
	// kao refuses to move a component to a version older than the one it
	// runs: Karmada's newer CRDs and stored objects are not meant to be read
	// by older versions.
	// +required
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	Version string `json:"version"`

	// kubernetesVersion is the version of kube-apiserver (karmada-apiserver) and
	// kube-controller-manager, for example v1.35.4. The artifacts bundle's version is used when unset.
	// A change on a running control plane is rolled out like spec.version's.
	// +optional
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// artifacts says where binaries, the CRD tarball and images come from.
	// Installs are offline: nothing is downloaded from the internet.
	// +optional
	Artifacts ArtifactsSpec `json:"artifacts,omitempty,omitzero"`

	// hosts are the machines of a Binary control plane, reached over SSH.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Hosts []Host `json:"hosts,omitempty"`

	// lostHosts names hosts that are gone for good (dead, or their disks
	// lost) and left spec.hosts. kao never connects to a lost host: the
	// remaining etcd members remove its member while they keep the quorum,
	// and nothing on it is stopped or wiped. A host with the etcd role may
	// leave spec.hosts in one step only when it is named here, usually in the
	// edit that adds its replacement (docs/disaster-recovery.md).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	LostHosts []string `json:"lostHosts,omitempty"`

	// ssh is how kao connects to spec.hosts. Host keys are pinned: kao never
	// accepts an unknown host key.
	// +optional
	SSH *SSHSpec `json:"ssh,omitempty"`

	// hostCluster is the Kubernetes cluster a Containerized control plane runs on.
	// +optional
	HostCluster *HostClusterSpec `json:"hostCluster,omitempty"`

	// apiServer configures karmada-apiserver and how clients reach it.
	// +optional
	APIServer APIServerSpec `json:"apiServer,omitempty,omitzero"`

	// etcd is the etcd cluster that stores Karmada's objects: managed by kao or external.
	// +required
	Etcd EtcdSpec `json:"etcd"`

	// components tunes the other control-plane components.
	// +optional
	Components ComponentsSpec `json:"components,omitempty,omitzero"`

	// addons enables optional Karmada components and user roles.
	// +optional
	Addons AddonsSpec `json:"addons,omitempty,omitzero"`

	// certificates tunes the validity and renewal of the certificates kao issues.
	// +optional
	Certificates CertificatesSpec `json:"certificates,omitempty,omitzero"`

	// members are the clusters joined to this Karmada. Adding an entry joins the
	// cluster; removing it unjoins the cluster.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Members []MemberSpec `json:"members,omitempty"`

	// paused stops kao from starting runs for this deployment. A run in progress
	// finishes; nothing already installed is touched.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// driftCheck makes kao check the hosts for drift from the last
	// successful run: changes made by hand since, such as an edited unit, a
	// stopped service or a replaced certificate. Off when unset. Binary mode only.
	// +optional
	DriftCheck *DriftCheckSpec `json:"driftCheck,omitempty"`
}

// DriftCheckSpec configures periodic drift checks. A drift check runs the
// install playbook in Ansible's check mode with diffs: it changes nothing on
// any host and lists, in status.drift, what a run would change.
type DriftCheckSpec struct {
	// interval is the time between checks, counted from the last check or
	// the last successful run, whichever is later; at least 1m. A check
	// costs a pass over every host over SSH, about half a run.
	// +required
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')",message="spec.driftCheck.interval must be a duration of at least 1m, such as 30m"
	Interval metav1.Duration `json:"interval"`

	// autoRepair runs the install playbook when a check finds drift, which
	// puts back what was changed by hand. Without it kao reports the drift
	// (condition InSync False, an Event) and waits for a person.
	// +optional
	AutoRepair bool `json:"autoRepair,omitempty"`
}

// ArtifactsSpec says where installation artifacts come from.
// +kubebuilder:validation:XValidation:rule="!(has(self.localPath) && has(self.url))",message="set at most one of spec.artifacts.localPath and spec.artifacts.url"
// +kubebuilder:validation:XValidation:rule="!has(self.url) || !self.url.startsWith('http://') || has(self.sha256sums)",message="an http:// spec.artifacts.url needs spec.artifacts.sha256sums, the SHA-256 of the bundle's SHA256SUMS: over plain http nothing else vouches for the files (or serve the bundle over https)"
// +kubebuilder:validation:XValidation:rule="!has(self.sha256sums) || has(self.url)",message="spec.artifacts.sha256sums pins the bundle at spec.artifacts.url, which is not set"
type ArtifactsSpec struct {
	// localPath is a bundle directory on the operator's side (built by `make artifacts`),
	// under one of the directories the operator's administrator allows
	// (--allowed-artifact-paths; the operator's own --artifacts-dir always).
	// The operator's default bundle directory is used when neither localPath nor url is set.
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[-_./a-zA-Z0-9]*$`
	LocalPath string `json:"localPath,omitempty"`

	// url is an HTTP(S) address inside the data centre serving the same bundle layout.
	// It must start with one of the prefixes the operator's administrator
	// allows (--allowed-artifact-urls). An http:// url needs sha256sums, and
	// carries no credentials.
	// +optional
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="spec.artifacts.url must be an http:// or https:// URL"
	// +kubebuilder:validation:XValidation:rule="isURL(self)",message="spec.artifacts.url is not a valid URL"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^http://[^/]*@')",message="spec.artifacts.url sends credentials over plain http: serve the bundle over https"
	URL string `json:"url,omitempty"`

	// sha256sums pins the bundle at url: the lower-case hex SHA-256 of its
	// SHA256SUMS file, which lists every file of the bundle with its
	// checksum. kao mirrors nothing from a bundle whose SHA256SUMS differs.
	// Required with an http:// url.
	// +optional
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	SHA256Sums string `json:"sha256sums,omitempty"`

	// imageRegistry is the registry (an offline mirror) that Containerized mode and
	// Pull members' karmada-agent pull images from, for example
	// registry.dc1.example:5000; required in Containerized mode. Images keep the
	// upstream names under it: <imageRegistry>/karmada/<component>:<Karmada version>
	// (karmada-aggregated-apiserver, -controller-manager, -scheduler, -webhook, -agent),
	// <imageRegistry>/kube-apiserver:<Kubernetes version>,
	// <imageRegistry>/kube-controller-manager:<Kubernetes version> and
	// <imageRegistry>/etcd:<etcd version without the v>-0, as registry.k8s.io tags them.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([-a-z0-9._/]*[a-z0-9])?)?$`
	ImageRegistry string `json:"imageRegistry,omitempty"`

	// imagePullSecretName names a docker-registry Secret in the host cluster namespace used to pull images.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ImagePullSecretName string `json:"imagePullSecretName,omitempty"`
}

// Host is one machine of a Binary control plane.
type Host struct {
	// name identifies the host in the inventory and in status. It must be a DNS-1123 label,
	// and neither localhost (Ansible would run the operator's own tasks on this host)
	// nor the name of an inventory group (all, ungrouped, etcd, members).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['localhost', 'all', 'ungrouped', 'etcd', 'members'])",message="a host name must not be localhost or the name of an inventory group (all, ungrouped, etcd, members)"
	Name string `json:"name"`

	// address is the IP address or DNS name kao connects to and that the
	// components advertise to each other.
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

	// roles are the jobs this host does. An empty list keeps a host that is
	// leaving in the deployment for one more run, in which kao retires what
	// it ran there: an etcd member is removed from the cluster, stopped and
	// wiped. Remove the host from spec.hosts after that run.
	// +required
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Roles []HostRole `json:"roles"`
}

// SSHSpec is how kao connects to the hosts of a Binary control plane.
type SSHSpec struct {
	// privateKeySecretRef points at an unencrypted OpenSSH private key.
	// +required
	PrivateKeySecretRef SecretKeyReference `json:"privateKeySecretRef"`

	// knownHostsSecretRef points at a known_hosts file listing every host's key.
	// Host key checking is always on.
	// +required
	KnownHostsSecretRef SecretKeyReference `json:"knownHostsSecretRef"`

	// become is how tasks gain root when the SSH user is not root. Defaults to None.
	// +optional
	Become BecomeMethod `json:"become,omitempty"`

	// connectTimeoutSeconds bounds each SSH connection attempt. Defaults to 10.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=300
	ConnectTimeoutSeconds int32 `json:"connectTimeoutSeconds,omitempty"`
}

// HostClusterSpec is the Kubernetes cluster a Containerized control plane runs on.
// +kubebuilder:validation:XValidation:rule="has(self.kubeconfigSecretRef) != (has(self.inCluster) && self.inCluster)",message="set exactly one of spec.hostCluster.kubeconfigSecretRef and spec.hostCluster.inCluster: true"
type HostClusterSpec struct {
	// kubeconfigSecretRef points at a kubeconfig for the host cluster.
	// +optional
	KubeconfigSecretRef *SecretKeyReference `json:"kubeconfigSecretRef,omitempty"`

	// inCluster installs into the cluster the operator runs in.
	// +optional
	InCluster bool `json:"inCluster,omitempty"`

	// namespace is the host cluster namespace the control plane runs in. Defaults to
	// karmada-system. It holds one control plane: kao refuses to install into a namespace
	// whose Karmada workloads belong to another KarmadaDeployment. It cannot change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.hostCluster.namespace cannot change: the control plane's workloads, Secrets and volumes stay in the namespace they were created in"
	Namespace string `json:"namespace,omitempty"`

	// affinity constrains where every control-plane pod runs. kao adds a
	// preferred anti-affinity that spreads each component's replicas across nodes.
	// Weights are between 1 and 100, as for Pods.
	// +optional
	// +kubebuilder:validation:XValidation:rule="(!has(self.nodeAffinity) || !has(self.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution) || self.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(t, t.weight >= 1 && t.weight <= 100)) && (!has(self.podAffinity) || !has(self.podAffinity.preferredDuringSchedulingIgnoredDuringExecution) || self.podAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(t, t.weight >= 1 && t.weight <= 100)) && (!has(self.podAntiAffinity) || !has(self.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution) || self.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(t, t.weight >= 1 && t.weight <= 100))",message="every weight in spec.hostCluster.affinity must be between 1 and 100"
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// dnsDomain is the host cluster's DNS domain. Defaults to cluster.local.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	DNSDomain string `json:"dnsDomain,omitempty"`
}

// APIServerSpec configures karmada-apiserver.
type APIServerSpec struct {
	// endpoint is the host:port clients use to reach karmada-apiserver: a VIP or an
	// external load balancer in front of the apiServer hosts. It is written into the
	// exported kubeconfig and the serving certificate. Defaults to the first apiServer
	// host and spec.apiServer.securePort.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="self.matches('^(\\\\[[0-9a-fA-F:.]+\\\\]|[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?):[0-9]{1,5}$')",message="spec.apiServer.endpoint must be host:port, with an IPv6 host in brackets"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^.*:[0-9]{1,5}$') || (int(self.substring(self.lastIndexOf(':') + 1)) >= 1 && int(self.substring(self.lastIndexOf(':') + 1)) <= 65535)",message="spec.apiServer.endpoint port must be between 1 and 65535"
	Endpoint string `json:"endpoint,omitempty"`

	// securePort is the port karmada-apiserver listens on. Defaults to 5443.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	SecurePort int32 `json:"securePort,omitempty"`

	// certSANs are extra names and IP addresses for karmada-apiserver's serving certificate.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || self.matches('^(\\\\*\\\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="each certSAN must be an IP address or a lower-case DNS name"
	CertSANs []string `json:"certSANs,omitempty"`

	// serviceSubnet is the service IP range karmada-apiserver allocates from. Defaults to 10.96.0.0/12.
	// +optional
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="spec.apiServer.serviceSubnet must be a CIDR such as 10.96.0.0/12"
	ServiceSubnet string `json:"serviceSubnet,omitempty"`

	// serviceType exposes karmada-apiserver on the host cluster (Containerized). Defaults to
	// ClusterIP, reached at karmada-apiserver.<namespace>.svc.<dnsDomain>: only from inside
	// the host cluster, so only with spec.hostCluster.inCluster or an endpoint. NodePort
	// is reached at a node's address (its ExternalIP, else its InternalIP) and the node
	// port; LoadBalancer at the address the host cluster's load balancer assigns, which
	// kao waits for before it issues karmada-apiserver's certificate. spec.apiServer.endpoint,
	// when set, is what clients use instead.
	// +optional
	ServiceType ServiceType `json:"serviceType,omitempty"`

	// ComponentSpec holds the version, flags, feature gates and workload settings.
	ComponentSpec `json:",inline"`
}

// EtcdSpec is the etcd cluster that stores Karmada's objects.
// +kubebuilder:validation:XValidation:rule="has(self.managed) != has(self.external)",message="set exactly one of spec.etcd.managed and spec.etcd.external"
// +kubebuilder:validation:XValidation:rule="has(self.managed) == has(oldSelf.managed)",message="spec.etcd cannot switch between managed and external: Karmada's objects stay in the etcd they were written to"
type EtcdSpec struct {
	// managed is an etcd cluster that kao installs and operates.
	// +optional
	Managed *ManagedEtcd `json:"managed,omitempty"`

	// external is an etcd cluster that someone else operates.
	// +optional
	External *ExternalEtcd `json:"external,omitempty"`
}

// ManagedEtcd is an etcd cluster kao installs and operates.
// +kubebuilder:validation:XValidation:rule="(has(self.dataDir) ? self.dataDir : '/var/lib/karmada-etcd') == (has(oldSelf.dataDir) ? oldSelf.dataDir : '/var/lib/karmada-etcd')",message="spec.etcd.managed.dataDir cannot change: the members would start empty in the new directory"
// +kubebuilder:validation:XValidation:rule="(has(self.replicas) ? self.replicas : 1) == (has(oldSelf.replicas) ? oldSelf.replicas : 1)",message="spec.etcd.managed.replicas cannot change: kao does not resize a containerized etcd cluster (its members start from a fixed initial cluster)"
// +kubebuilder:validation:XValidation:rule="has(self.storage) == has(oldSelf.storage) && (!has(self.storage) || self.storage == oldSelf.storage)",message="spec.etcd.managed.storage cannot change: a StatefulSet's volumes are fixed when it is created"
type ManagedEtcd struct {
	// version is the etcd version, for example v3.6.6. The bundle's version is used when unset.
	// +optional
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	Version string `json:"version,omitempty"`

	// replicas is the member count in Containerized mode; it must be odd. Defaults to 1.
	// In Binary mode the members are the hosts with the etcd role.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=7
	// +kubebuilder:validation:XValidation:rule="self % 2 == 1",message="spec.etcd.managed.replicas must be odd (1, 3, 5 or 7) to keep quorum"
	Replicas *int32 `json:"replicas,omitempty"`

	// dataDir is where members keep their data on the hosts (Binary). Defaults to
	// /var/lib/karmada-etcd. In Containerized mode with storage type HostPath, each
	// member keeps its data in <dataDir>/<host cluster namespace>/<pod name> on its node.
	// It must be a plain absolute path (no "." or ".." segments)
	// and not a system directory: purgeDataOnDelete removes it. It cannot change.
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^/[-_./a-zA-Z0-9]*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('//|/[.][.]?(/|$)') && !self.endsWith('/')",message="spec.etcd.managed.dataDir must be a plain absolute path: no '.' or '..' segments, no '//', no trailing '/'"
	// +kubebuilder:validation:XValidation:rule="!(self in ['/bin', '/etc', '/home', '/lib', '/lib64', '/media', '/mnt', '/opt', '/root', '/sbin', '/srv', '/tmp', '/usr', '/usr/local', '/var', '/var/lib', '/var/log', '/var/tmp']) && !self.matches('^/(proc|sys|dev|run|boot)(/|$)')",message="spec.etcd.managed.dataDir must not be a system directory: kao may delete it (purgeDataOnDelete)"
	DataDir string `json:"dataDir,omitempty"`

	// storage is where members keep their data (Containerized).
	// +optional
	Storage EtcdStorage `json:"storage,omitempty,omitzero"`

	// purgeDataOnDelete removes etcd data from the hosts or volumes when the
	// KarmadaDeployment is deleted. By default data stays: on the hosts (Binary), or in
	// the PersistentVolumeClaims (Containerized), which a deployment re-created in the
	// same host cluster namespace takes over. HostPath and EmptyDir data of a
	// Containerized etcd is not removed by kao.
	// +optional
	PurgeDataOnDelete bool `json:"purgeDataOnDelete,omitempty"`

	// extraArgs are extra etcd flags.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ExtraArgs []Arg `json:"extraArgs,omitempty"`

	// resources are the etcd container's requests and limits (Containerized).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// tolerations let the etcd pods run on tainted nodes (Containerized).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// EtcdStorage is the storage of a containerized etcd member.
// +kubebuilder:validation:XValidation:rule="!has(self.size) || self.type == 'PersistentVolumeClaim'",message="spec.etcd.managed.storage.size is only used with type PersistentVolumeClaim"
// +kubebuilder:validation:XValidation:rule="!has(self.storageClassName) || self.type == 'PersistentVolumeClaim'",message="spec.etcd.managed.storage.storageClassName is only used with type PersistentVolumeClaim"
type EtcdStorage struct {
	// type is PersistentVolumeClaim, HostPath or EmptyDir. Defaults to PersistentVolumeClaim.
	// +optional
	Type EtcdStorageType `json:"type,omitempty"`

	// size is the requested volume size for PersistentVolumeClaim storage. Defaults to 5Gi.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName is the StorageClass of the claims; the cluster default when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	StorageClassName string `json:"storageClassName,omitempty"`
}

// ExternalEtcd is an etcd cluster that someone else operates.
type ExternalEtcd struct {
	// endpoints are the client URLs of the etcd members, for example https://10.0.0.5:2379.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +kubebuilder:validation:items:MaxLength=263
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^https://(\\\\[[0-9a-fA-F:.]+\\\\]|[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?):[0-9]{1,5}$')",message="each etcd endpoint must be https://host:port"
	Endpoints []string `json:"endpoints"`

	// caSecretRef points at the CA bundle that signed the etcd servers' certificates.
	// +required
	CASecretRef SecretKeyReference `json:"caSecretRef"`

	// clientCertSecretName names a kubernetes.io/tls Secret (tls.crt, tls.key) with the
	// client certificate the Karmada API servers use.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ClientCertSecretName string `json:"clientCertSecretName"`

	// keyPrefix is the etcd key prefix Karmada stores its objects under. Defaults to /registry.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^/[-_/a-zA-Z0-9]*$`
	KeyPrefix string `json:"keyPrefix,omitempty"`
}

// ComponentSpec tunes one control-plane component.
type ComponentSpec struct {
	// version overrides spec.version (Karmada components) or spec.kubernetesVersion
	// (kube-apiserver, kube-controller-manager) for this component alone. A
	// change on a running control plane upgrades only this component.
	// +optional
	// +kubebuilder:validation:MinLength=6
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	Version string `json:"version,omitempty"`

	// extraArgs are extra flags. They replace kao's value for a flag of the same name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	ExtraArgs []Arg `json:"extraArgs,omitempty"`

	// featureGates are the component's feature gates.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	FeatureGates []FeatureGate `json:"featureGates,omitempty"`

	// replicas is the Deployment's replica count (Containerized). Defaults to 1.
	// In Binary mode the component runs on every host with its role.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	Replicas *int32 `json:"replicas,omitempty"`

	// resources are the container's requests and limits (Containerized).
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// tolerations let the pods run on tainted nodes (Containerized).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// ComponentsSpec tunes the control-plane components other than karmada-apiserver and etcd.
type ComponentsSpec struct {
	// aggregatedAPIServer is karmada-aggregated-apiserver, which serves the Cluster API.
	// +optional
	AggregatedAPIServer ComponentSpec `json:"aggregatedAPIServer,omitempty,omitzero"`

	// kubeControllerManager is kube-controller-manager.
	// +optional
	KubeControllerManager ComponentSpec `json:"kubeControllerManager,omitempty,omitzero"`

	// controllerManager is karmada-controller-manager.
	// +optional
	ControllerManager ComponentSpec `json:"controllerManager,omitempty,omitzero"`

	// scheduler is karmada-scheduler.
	// +optional
	Scheduler ComponentSpec `json:"scheduler,omitempty,omitzero"`

	// webhook is karmada-webhook.
	// +optional
	Webhook ComponentSpec `json:"webhook,omitempty,omitzero"`
}

// AddonSpec switches an optional Karmada component on and tunes it.
type AddonSpec struct {
	// enabled installs the addon (true) or removes it (false).
	// +required
	Enabled bool `json:"enabled"`

	// ComponentSpec holds the version, flags, feature gates and workload settings.
	ComponentSpec `json:",inline"`
}

// AddonsSpec enables optional Karmada components and user roles.
type AddonsSpec struct {
	// search is karmada-search (search.karmada.io).
	// +optional
	Search *AddonSpec `json:"search,omitempty"`

	// descheduler is karmada-descheduler.
	// +optional
	Descheduler *AddonSpec `json:"descheduler,omitempty"`

	// metricsAdapter is karmada-metrics-adapter (metrics.k8s.io and custom.metrics.k8s.io, for FederatedHPA).
	// +optional
	MetricsAdapter *AddonSpec `json:"metricsAdapter,omitempty"`

	// schedulerEstimator runs one karmada-scheduler-estimator per member cluster.
	// +optional
	SchedulerEstimator *AddonSpec `json:"schedulerEstimator,omitempty"`

	// userRoles are Ansible roles of the ops team run against kao's inventory.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	UserRoles []UserRole `json:"userRoles,omitempty"`
}

// UserRole is an ops team's own Ansible role, run with kao's inventory by the
// install run: BeforeInstall roles before kao's own plays (a failure stops the
// run before anything is installed), AfterInstall roles after them, only when
// every host got through the install. The role runs with the operator's
// rights: on the hosts over SSH, and on the operator itself for the groups
// with a local connection (members, host_cluster) or with delegate_to.
// +kubebuilder:validation:XValidation:rule="has(self.configMapName) != has(self.path)",message="set exactly one of configMapName and path for a user role"
// +kubebuilder:validation:XValidation:rule="!has(self.path) || self.path.endsWith('/' + self.name)",message="a user role's path must end with its name: the role directory is named after the role"
type UserRole struct {
	// name is the role's name; it must match the role directory's name and
	// must not be the name of one of kao's own roles.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]*$`
	Name string `json:"name"`

	// stage is when the role runs: BeforeInstall or AfterInstall.
	// +required
	Stage UserRoleStage `json:"stage"`

	// groups are the inventory groups the role runs against.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	Groups []InventoryGroup `json:"groups"`

	// configMapName names a ConfigMap in this namespace holding the role as files
	// (keys are paths inside the role with "/" written as "__", for example tasks__main.yml;
	// the first part is one of defaults, files, handlers, meta, tasks, templates and vars,
	// and tasks__main.yml is required). The operator runs ConfigMap roles only when
	// started with --configmap-user-roles.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ConfigMapName string `json:"configMapName,omitempty"`

	// path is a role directory inside the operator's image or volumes, under the
	// directory the operator was started with as --user-roles-dir. Its last
	// element is the role's name; it must hold no symbolic links.
	// +optional
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[-_./a-zA-Z0-9]*$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('//|/[.][.]?(/|$)') && !self.endsWith('/')",message="a user role's path must be a plain absolute path: no '.' or '..' segments, no '//', no trailing '/'"
	Path string `json:"path,omitempty"`
}

// CertificatesSpec tunes the certificates kao issues. Durations are written
// like 8760h or 90m; a string kao cannot read as a duration would stop the
// operator from reading any KarmadaDeployment of the namespace, so the API
// server refuses it.
// +kubebuilder:validation:XValidation:rule="[has(self.validity) ? self.validity : '8760h', has(self.renewBefore) ? self.renewBefore : '720h'].all(d, d.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$')) ? duration(has(self.renewBefore) ? self.renewBefore : '720h') < duration(has(self.validity) ? self.validity : '8760h') : true",message="spec.certificates.renewBefore (default 720h) must be shorter than spec.certificates.validity (default 8760h)"
type CertificatesSpec struct {
	// validity is how long leaf certificates are valid, at least 1m. Defaults to 8760h (one year).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')",message="spec.certificates.validity must be a duration of at least 1m, such as 8760h"
	Validity *metav1.Duration `json:"validity,omitempty"`

	// caValidity is how long the CAs are valid, at least 1m. Defaults to 87600h (ten years).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) >= duration('1m')",message="spec.certificates.caValidity must be a duration of at least 1m, such as 87600h"
	CAValidity *metav1.Duration `json:"caValidity,omitempty"`

	// renewBefore is how long before expiry kao renews a leaf certificate. Defaults to 720h (30 days).
	// +optional
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="spec.certificates.renewBefore must be a positive duration, such as 720h"
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// MemberSpec is a cluster joined to this Karmada.
type MemberSpec struct {
	// name is the Karmada Cluster name. It must be a DNS-1123 label of at most
	// 48 characters (Karmada derives namespace names from it).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=48
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// syncMode is Push or Pull.
	// +required
	SyncMode SyncMode `json:"syncMode"`

	// kubeconfigSecretRef points at a kubeconfig for the member cluster.
	// +required
	KubeconfigSecretRef SecretKeyReference `json:"kubeconfigSecretRef"`

	// context is the kubeconfig context to use; the current context when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')",message="spec.members[].context must not contain control characters such as newlines"
	Context string `json:"context,omitempty"`

	// provider is the member's cloud provider, recorded on the Cluster object.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9._]*[a-zA-Z0-9])?$`
	Provider string `json:"provider,omitempty"`

	// region is the member's region, recorded on the Cluster object.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9._]*[a-zA-Z0-9])?$`
	Region string `json:"region,omitempty"`

	// zones are the member's zones, recorded on the Cluster object.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9._]*[a-zA-Z0-9])?$`
	Zones []string `json:"zones,omitempty"`
}

// Phase is a one-word summary of a KarmadaDeployment for people; decisions use conditions.
// +kubebuilder:validation:Enum=Pending;Installing;Upgrading;Running;Degraded;Failed;Deleting;Paused
type Phase string

const (
	// PendingPhase means nothing has run yet.
	PendingPhase Phase = "Pending"
	// InstallingPhase means an install run is in progress.
	InstallingPhase Phase = "Installing"
	// UpgradingPhase means an upgrade run is in progress.
	UpgradingPhase Phase = "Upgrading"
	// RunningPhase means the last run succeeded and the control plane answers probes.
	RunningPhase Phase = "Running"
	// DegradedPhase means the last run succeeded but a probe fails.
	DegradedPhase Phase = "Degraded"
	// FailedPhase means the last run failed; kao retries with backoff.
	FailedPhase Phase = "Failed"
	// DeletingPhase means the control plane is being removed.
	DeletingPhase Phase = "Deleting"
	// PausedPhase means spec.paused is set.
	PausedPhase Phase = "Paused"
)

// RunResult is the outcome of a playbook run.
// +kubebuilder:validation:Enum=Succeeded;Failed;Cancelled
type RunResult string

const (
	// RunSucceeded means every host finished without failed or unreachable tasks.
	RunSucceeded RunResult = "Succeeded"
	// RunFailed means a task failed, a host was unreachable or ansible-playbook could not run.
	RunFailed RunResult = "Failed"
	// RunCancelled means the run was stopped (spec change, deletion, operator shutdown).
	RunCancelled RunResult = "Cancelled"
)

// KarmadaDeploymentStatus is what kao observed and did.
type KarmadaDeploymentStatus struct {
	// observedGeneration is the spec generation the last successful reconcile acted on.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase is a one-word summary for people.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// conditions are Ready, ControlPlaneReady, EtcdHealthy, MembersReady,
	// PlaybookSucceeded, CertificatesValid and Paused.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// version is the Karmada version the control plane last reached.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Version string `json:"version,omitempty"`

	// progress is the run in progress, if any.
	// +optional
	Progress *RunProgress `json:"progress,omitempty"`

	// lastRun is the last finished run.
	// +optional
	LastRun *RunStatus `json:"lastRun,omitempty"`

	// lastSuccessfulRunTime is when the last successful run of any playbook
	// ended: with lastRun, it tells how long a failing deployment has gone
	// without one.
	// +optional
	LastSuccessfulRunTime *metav1.Time `json:"lastSuccessfulRunTime,omitempty"`

	// retry records failed attempts and when kao tries again.
	// +optional
	Retry *RetryStatus `json:"retry,omitempty"`

	// components are the installed control-plane components.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Components []ComponentStatus `json:"components,omitempty"`

	// etcd is the observed state of the etcd cluster.
	// +optional
	Etcd *EtcdStatus `json:"etcd,omitempty"`

	// members are the member clusters kao joined or is joining.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Members []MemberStatus `json:"members,omitempty"`

	// readyMembers summarises members as ready/total, for example 3/3.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	ReadyMembers string `json:"readyMembers,omitempty"`

	// endpoint is the address clients use to reach karmada-apiserver.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`

	// kubeconfigSecretRef points at the exported admin kubeconfig.
	// +optional
	KubeconfigSecretRef *SecretKeyReference `json:"kubeconfigSecretRef,omitempty"`

	// certificates are the certificates kao issued and when they expire.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Certificates []CertificateStatus `json:"certificates,omitempty"`

	// applied records, as digests, the spec that the last successful runs
	// applied, so that a change of spec.members alone runs only the members
	// playbook instead of converging the whole control plane again.
	// +optional
	Applied *AppliedSpec `json:"applied,omitempty"`

	// certificateRenewal says when kao renews certificates next and which
	// rotation request (annotation kao.io/rotate-certificates) it handled last.
	// +optional
	CertificateRenewal *CertificateRenewalStatus `json:"certificateRenewal,omitempty"`

	// userRolesDigest is the sha256 of the files of spec.addons.userRoles that
	// the last successful install run ran. When the roles' files change (a
	// ConfigMap edited, a role directory replaced) kao runs again.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	UserRolesDigest string `json:"userRolesDigest,omitempty"`

	// upgrade is the last upgrade kao started: the components it moves and the
	// etcd snapshot taken before anything moved.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// drift is what the last drift check (spec.driftCheck) found.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`

	// plan is what the last plan (annotation kao.io/plan) found that a run
	// of its generation would do.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`
}

// PlanResult is the outcome of a plan.
// +kubebuilder:validation:Enum=Planned;Failed
type PlanResult string

// Plan outcomes.
const (
	// PlanPlanned means the plan finished: status.plan says what a run of
	// its generation would do (perhaps nothing).
	PlanPlanned PlanResult = "Planned"
	// PlanFailed means the plan could not finish (a host unreachable, a
	// task failing): what a run would do is unknown, and the run would
	// most likely fail the same way.
	PlanFailed PlanResult = "Failed"
)

// PlanStatus is what a run of a generation not applied yet would do, found
// by running its playbook's plays on the hosts in Ansible's check mode with
// the certificates it would issue kept in memory: nothing changed on any
// host, in Karmada or in kao's Secrets.
type PlanStatus struct {
	// runID identifies the plan, as a run's ID does.
	// +required
	// +kubebuilder:validation:MaxLength=64
	RunID string `json:"runID"`

	// generation is the spec generation planned.
	// +required
	Generation int64 `json:"generation"`

	// request is the value of the annotation kao.io/plan that asked for
	// the plan; a new value plans the same generation again.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Request string `json:"request,omitempty"`

	// playbook is the playbook the run would run: upgrade.yml when a
	// version changes, members.yml when only spec.members does, else
	// install.yml.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Playbook string `json:"playbook"`

	// planTime is when the plan ended.
	// +required
	PlanTime metav1.Time `json:"planTime"`

	// result is Planned or Failed.
	// +required
	Result PlanResult `json:"result"`

	// message sums the plan up.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// items are what the run would change on the hosts, in the order it
	// would change them (an upgrade's rollout order): units, files,
	// certificates and binaries it would write, services it would start or
	// enable, and the restarts that follow (kind Restart).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Items []DriftItem `json:"items,omitempty"`

	// itemsDropped counts the items beyond the ones listed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ItemsDropped int32 `json:"itemsDropped,omitempty"`

	// membersToJoin are the members the run would join (or hand a renewed
	// agent certificate, for a Pull member).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=253
	MembersToJoin []string `json:"membersToJoin,omitempty"`

	// membersToUnjoin are the members the run would unjoin.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MaxLength=253
	MembersToUnjoin []string `json:"membersToUnjoin,omitempty"`

	// certificates are the certificates and keys the run would issue
	// (their names in the PKI Secret, without extension).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	Certificates []string `json:"certificates,omitempty"`

	// upgrade lists the components an upgrade would move, with their hosts
	// in rollout order, when the run would be upgrade.yml.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Upgrade []ComponentUpgrade `json:"upgrade,omitempty"`

	// notPlanned names, in words, what the run would also do that check
	// mode cannot show and the plan therefore leaves out rather than
	// guessing at: Karmada's objects, which every run applies again, the
	// addons and the user roles, and for an upgrade the install that ends
	// it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=512
	NotPlanned []string `json:"notPlanned,omitempty"`

	// logConfigMapName is the ConfigMap holding the plan's log, kept like
	// a run's.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LogConfigMapName string `json:"logConfigMapName,omitempty"`
}

// DriftResult is the outcome of a drift check.
// +kubebuilder:validation:Enum=InSync;Drifted;Failed
type DriftResult string

// Drift check outcomes.
const (
	// DriftInSync means a run would change nothing on any host.
	DriftInSync DriftResult = "InSync"
	// DriftDrifted means a run would change what status.drift.items lists.
	DriftDrifted DriftResult = "Drifted"
	// DriftCheckFailed means the check could not finish (a host unreachable,
	// a task failing); it says nothing of drift.
	DriftCheckFailed DriftResult = "Failed"
)

// DriftKind classifies what a run would change: a drifted item, or an
// item of a plan.
// +kubebuilder:validation:Enum=Unit;File;Certificate;Binary;Service;Restart;Object;Other
type DriftKind string

// Kinds of drift.
const (
	// DriftUnit is a systemd unit file whose content or mode differs.
	DriftUnit DriftKind = "Unit"
	// DriftFile is another file kao manages (a configuration, a kubeconfig)
	// whose content or mode differs.
	DriftFile DriftKind = "File"
	// DriftCertificate is a certificate or key file that differs from the
	// one kao issued. Its content is never shown.
	DriftCertificate DriftKind = "Certificate"
	// DriftBinary is a program that differs from the bundle's.
	DriftBinary DriftKind = "Binary"
	// DriftService is a service that is stopped or not enabled.
	DriftService DriftKind = "Service"
	// DriftObject is an object in a Kubernetes API (a Containerized
	// plane's workloads in its host cluster) that an apply would change,
	// create or delete: its item is "Kind namespace/name", its diff the
	// fields that differ (never a Secret's data).
	DriftObject DriftKind = "Object"
	// DriftOther is any other change a run would make.
	DriftOther DriftKind = "Other"
	// DriftRestart is a service a run would restart because of another
	// change. Plans list them; drift checks leave them out, as they follow
	// from the items they list.
	DriftRestart DriftKind = "Restart"
)

// DriftStatus is the result of the last drift check.
type DriftStatus struct {
	// runID identifies the check, as a run's ID does.
	// +required
	// +kubebuilder:validation:MaxLength=64
	RunID string `json:"runID"`

	// generation is the spec generation the check compared the hosts with.
	// +required
	Generation int64 `json:"generation"`

	// checkTime is when the check ended.
	// +required
	CheckTime metav1.Time `json:"checkTime"`

	// result is InSync, Drifted or Failed. A check fails, naming the task
	// and host, when a run would fail too: an etcd member missing from the
	// cluster, a unit file deleted.
	// +required
	Result DriftResult `json:"result"`

	// message sums the result up.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// items are what a run would change, host by host, in the order the
	// run would change them.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Items []DriftItem `json:"items,omitempty"`

	// itemsDropped counts the items beyond the ones listed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ItemsDropped int32 `json:"itemsDropped,omitempty"`

	// logConfigMapName is the ConfigMap holding the check's log, kept like
	// a run's when the check found drift or failed; a check that found
	// nothing keeps no log, so that checks never push runs' logs out.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LogConfigMapName string `json:"logConfigMapName,omitempty"`

	// repairRunID is the run autoRepair started for this drift, once started.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RepairRunID string `json:"repairRunID,omitempty"`
}

// DriftItem is one thing a run would change on a host.
type DriftItem struct {
	// host is the spec.hosts name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`

	// kind classifies the item.
	// +required
	Kind DriftKind `json:"kind"`

	// task is the playbook task that would change it.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Task string `json:"task"`

	// item names what would change: a path, a service, a member.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Item string `json:"item,omitempty"`

	// diff is a short diff of a file's content or attributes. Certificates,
	// keys and other secret content are never shown.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Diff string `json:"diff,omitempty"`
}

// AppliedSpec holds digests of what successful runs applied.
type AppliedSpec struct {
	// controlPlane is the SHA-256 of the spec without spec.members, as the
	// last successful install applied it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ControlPlane string `json:"controlPlane,omitempty"`

	// members is the SHA-256 of spec.members, as the last successful install
	// or members run applied it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Members string `json:"members,omitempty"`
}

// CertificateRenewalStatus is when kao renews certificates and what it renewed last.
type CertificateRenewalStatus struct {
	// nextRenewalTime is when the first leaf certificate enters its renewal
	// window (spec.certificates.renewBefore before it expires) or a CA expires.
	// kao starts an install run then, which re-issues what is due and rolls it
	// out with rolling restarts. Unset while nothing is due at a known time.
	// +optional
	NextRenewalTime *metav1.Time `json:"nextRenewalTime,omitempty"`

	// lastRenewalTime is when kao last re-issued leaf certificates of a
	// deployment that had them already.
	// +optional
	LastRenewalTime *metav1.Time `json:"lastRenewalTime,omitempty"`

	// rotationRequest is the last value of the kao.io/rotate-certificates
	// annotation kao acted on by re-issuing every leaf certificate. A value of
	// more than 63 characters, or with characters other than printable ASCII,
	// is recorded as sha256: and its digest.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	RotationRequest string `json:"rotationRequest,omitempty"`
}

// UpgradeStatus is an upgrade of a running control plane.
type UpgradeStatus struct {
	// runID is the run that rolls the upgrade out; status.lastRun says how it
	// ended, and where it stopped when it failed.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	RunID string `json:"runID,omitempty"`

	// generation is the spec generation the upgrade moves to.
	// +required
	Generation int64 `json:"generation"`

	// startTime is when kao decided the upgrade.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// completionTime is when every component reached its target version.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// components are the components the upgrade moves, in the order it moves them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Components []ComponentUpgrade `json:"components,omitempty"`

	// backup is the etcd snapshot kao took before the upgrade moved anything,
	// kept in the operator's state directory. Restore it with an EtcdRestore
	// (spec.source.path and spec.source.sha256).
	// +optional
	Backup *Snapshot `json:"backup,omitempty"`
}

// ComponentUpgrade is one component an upgrade moves.
type ComponentUpgrade struct {
	// name is the component, for example karmada-scheduler.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`

	// from are the versions its hosts ran when the upgrade started.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=32
	From []string `json:"from,omitempty"`

	// to is the version it moves to.
	// +required
	// +kubebuilder:validation:MaxLength=32
	To string `json:"to"`

	// hosts are the hosts it moves on, one at a time, in this order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	Hosts []string `json:"hosts,omitempty"`
}

// RunProgress is a playbook run in progress.
type RunProgress struct {
	// runID identifies the run; its log and lastRun carry the same ID.
	// +required
	// +kubebuilder:validation:MaxLength=64
	RunID string `json:"runID"`

	// playbook is the entry playbook, for example install.yml.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Playbook string `json:"playbook"`

	// tasksDone counts finished task results so far.
	// +required
	// +kubebuilder:validation:Minimum=0
	TasksDone int32 `json:"tasksDone"`

	// tasksTotal is the number of task results the run is expected to produce,
	// known before the run starts.
	// +required
	// +kubebuilder:validation:Minimum=0
	TasksTotal int32 `json:"tasksTotal"`

	// percent is tasksDone out of tasksTotal, 0 to 100.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Percent int32 `json:"percent"`

	// currentTask is the name of the task running now.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	CurrentTask string `json:"currentTask,omitempty"`

	// currentHost is the host the last result came from.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CurrentHost string `json:"currentHost,omitempty"`

	// startTime is when the run started.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// check is set for a drift check: the playbook runs in check mode and
	// changes nothing.
	// +optional
	Check bool `json:"check,omitempty"`

	// plan is set for a plan (annotation kao.io/plan): the playbook runs
	// in check mode and changes nothing.
	// +optional
	Plan bool `json:"plan,omitempty"`

	// updateTime is when this progress was last written.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
}

// RunStatus is the outcome of a finished playbook run.
type RunStatus struct {
	// id identifies the run.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`

	// playbook is the entry playbook.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Playbook string `json:"playbook"`

	// generation is the spec generation the run applied.
	// +required
	Generation int64 `json:"generation"`

	// result is Succeeded, Failed or Cancelled.
	// +required
	Result RunResult `json:"result"`

	// message says in a sentence why a run did not succeed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// startTime is when the run started.
	// +required
	StartTime metav1.Time `json:"startTime"`

	// endTime is when the run ended.
	// +required
	EndTime metav1.Time `json:"endTime"`

	// hosts are per-host task counts from Ansible's final stats.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1100
	Hosts []HostRunStats `json:"hosts,omitempty"`

	// failedTasks are the tasks that failed or found their host unreachable.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	FailedTasks []FailedTask `json:"failedTasks,omitempty"`

	// logConfigMapName names the ConfigMap holding this run's compressed log tail.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LogConfigMapName string `json:"logConfigMapName,omitempty"`
}

// HostRunStats are Ansible's final counts for one host.
type HostRunStats struct {
	// name is the inventory host name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// ok counts tasks that succeeded without change.
	// +optional
	OK int32 `json:"ok"`
	// changed counts tasks that changed something.
	// +optional
	Changed int32 `json:"changed"`
	// failed counts tasks that failed.
	// +optional
	Failed int32 `json:"failed"`
	// unreachable counts tasks that could not reach the host.
	// +optional
	Unreachable int32 `json:"unreachable"`
	// skipped counts tasks skipped by a condition.
	// +optional
	Skipped int32 `json:"skipped"`
	// rescued counts failures handled by a rescue block.
	// +optional
	Rescued int32 `json:"rescued"`
	// ignored counts failures ignored by ignore_errors.
	// +optional
	Ignored int32 `json:"ignored"`
}

// FailedTask is one task that failed on one host.
type FailedTask struct {
	// host is the inventory host name.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// task is the task name.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Task string `json:"task"`
	// unreachable is true when the host could not be reached.
	// +optional
	Unreachable bool `json:"unreachable,omitempty"`
	// message is Ansible's message, shortened and with secrets removed.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// RetryStatus records failed attempts so backoff survives operator restarts.
type RetryStatus struct {
	// failures counts consecutive failed runs of the current generation.
	// +required
	// +kubebuilder:validation:Minimum=0
	Failures int32 `json:"failures"`
	// generation is the spec generation the failures belong to.
	// +required
	Generation int64 `json:"generation"`
	// lastFailureTime is when the last run failed.
	// +optional
	LastFailureTime *metav1.Time `json:"lastFailureTime,omitempty"`
	// nextRetryTime is when kao runs again.
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`
}

// ComponentStatus is one installed component.
type ComponentStatus struct {
	// name is the component name, for example karmada-scheduler.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`
	// version is the version the component runs: the one every instance
	// reports, or while instances differ (an upgrade in progress or stopped)
	// the oldest of them.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Version string `json:"version,omitempty"`
	// targetVersion is the version the spec asks for, when it differs from version.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	TargetVersion string `json:"targetVersion,omitempty"`
	// instances are the component's hosts with the version each runs: what
	// the process reported at the end of kao's last run on the host, and for
	// karmada-apiserver what its /version answers.
	// +optional
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=64
	Instances []ComponentInstance `json:"instances,omitempty"`
	// hosts are the hosts (Binary) the component runs on.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Hosts []string `json:"hosts,omitempty"`
	// ready is true when every instance passes its health check.
	// +optional
	Ready bool `json:"ready"`
	// message says what is wrong when not ready.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// ComponentInstance is a component on one host.
type ComponentInstance struct {
	// host is the host's name in spec.hosts.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// version is the version the host's process runs; empty when it does not run.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Version string `json:"version,omitempty"`
}

// EtcdStatus is the observed etcd cluster.
type EtcdStatus struct {
	// members are the etcd members.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Members []EtcdMemberStatus `json:"members,omitempty"`
	// healthy summarises healthy/total, for example 3/3.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Healthy string `json:"healthy,omitempty"`
	// leader is the name of the leader member.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Leader string `json:"leader,omitempty"`
}

// EtcdMemberStatus is one etcd member.
type EtcdMemberStatus struct {
	// name is the member name (the host name in Binary mode).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// id is the member ID in hex.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	ID string `json:"id,omitempty"`
	// clientURL is the member's client URL.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ClientURL string `json:"clientURL,omitempty"`
	// healthy is true when the member answered a health check.
	// +optional
	Healthy bool `json:"healthy"`
	// leader is true for the leader.
	// +optional
	Leader bool `json:"leader,omitempty"`
	// learner is true for a member that does not vote yet: it catches up
	// with the leader after it was added, and counts neither as healthy nor
	// towards quorum.
	// +optional
	Learner bool `json:"learner,omitempty"`
	// dbSizeBytes is the size of the member's database file, as the member
	// reported it to the last health check.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DBSizeBytes *int64 `json:"dbSizeBytes,omitempty"`
	// message says what is wrong when unhealthy.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
}

// MemberStatus is one member cluster.
type MemberStatus struct {
	// name is the Karmada Cluster name.
	// +required
	// +kubebuilder:validation:MaxLength=48
	Name string `json:"name"`
	// syncMode is the mode the member was joined with.
	// +optional
	SyncMode SyncMode `json:"syncMode,omitempty"`
	// kubeconfigSecretRef is the member kubeconfig the member was joined with;
	// kao keeps it so it can clean up the member after it leaves spec.members.
	// +optional
	KubeconfigSecretRef *SecretKeyReference `json:"kubeconfigSecretRef,omitempty"`
	// joined is true once the Cluster object exists in Karmada.
	// +optional
	Joined bool `json:"joined"`
	// ready mirrors the Cluster object's Ready condition.
	// +optional
	Ready bool `json:"ready"`
	// message says what is wrong, or what is happening.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`
	// lastTransitionTime is when joined or ready last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// agentCertificateNotAfter is when the karmada-agent certificate that kao
	// last delivered to this Pull member expires. kao delivers a renewed one
	// (the member's karmada-kubeconfig Secret, and a new Pod template so the
	// agent restarts with it) in the next install run.
	// +optional
	AgentCertificateNotAfter *metav1.Time `json:"agentCertificateNotAfter,omitempty"`
}

// CertificateStatus is one certificate kao issued.
type CertificateStatus struct {
	// name is the certificate's name, for example karmada-apiserver.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// secretName is the Secret that holds it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName,omitempty"`
	// notBefore is when it became valid.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// notAfter is when it expires.
	// +required
	NotAfter metav1.Time `json:"notAfter"`
}

// KarmadaDeployment is a Karmada control plane that kao installs and operates
// with Ansible, on SSH hosts (Binary) or on a host cluster (Containerized).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kd,categories=kao
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress.percent`,description="Percent of the running playbook done"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Members",type=string,JSONPath=`.status.readyMembers`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type KarmadaDeployment struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired control plane.
	// +required
	Spec KarmadaDeploymentSpec `json:"spec"`

	// status is what kao observed and did.
	// +optional
	Status KarmadaDeploymentStatus `json:"status,omitempty,omitzero"`
}

// KarmadaDeploymentList is a list of KarmadaDeployments.
//
// +kubebuilder:object:root=true
type KarmadaDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KarmadaDeployment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KarmadaDeployment{}, &KarmadaDeploymentList{})
}
