package v1alpha1

// The names kao gives to what it puts on objects: finalizers, annotations a
// user sets to ask for something, and the labels and keys of the objects
// kao creates. Scripts and tools may rely on them.

// FinalizerName guards deletion of objects kao must clean up after.
const FinalizerName = "kao.io/finalizer"

// RotateCertificatesAnnotation asks kao to re-issue every leaf certificate of
// a deployment (not the CAs) and roll them out, once per distinct value: set
// it to a new value, such as the date, to rotate again. kao records the value
// it handled in status.certificateRenewal.rotationRequest.
const RotateCertificatesAnnotation = "kao.io/rotate-certificates"

// PlanAnnotation set on a KarmadaDeployment (to any value, such as "true")
// makes kao plan each generation of its spec instead of applying it: the
// plays of the run that generation asks for run on the hosts (or, for a
// Containerized plane, as server-side dry runs of its host cluster's
// objects) in Ansible's check mode, and status.plan says what the run would
// change, restart, join, unjoin and issue; nothing changes anywhere. Remove the annotation to
// apply the planned generation; give it a new value to plan it again.
// Certificate renewals, rotations, drift checks and their repairs still run
// once the current generation was applied.
const PlanAnnotation = "kao.io/plan"

// SkipUninstallAnnotation set to "true" on a KarmadaDeployment being deleted
// removes the finalizer without running the uninstall playbook: the way out
// when the hosts are gone for good and the uninstall can never succeed.
const SkipUninstallAnnotation = "kao.io/skip-uninstall"

// RestoreInProgressAnnotation on a KarmadaDeployment names the EtcdRestore
// that is restoring its etcd. While it is set, the KarmadaDeployment
// reconciler starts no playbook run (it keeps probing), so a restore and an
// install never run at the same time. The EtcdRestore reconciler sets it only
// when the deployment has no run in progress (status.progress is empty),
// with an optimistic lock on the deployment, and removes it when the restore
// ends, succeeded or failed, or its EtcdRestore is deleted. If an operator
// was removed in the middle of a restore for good, delete the annotation by
// hand to let the deployment run again.
const RestoreInProgressAnnotation = "kao.io/restore-in-progress"

// RestoredAtAnnotation on a KarmadaDeployment is when an EtcdRestore last
// restored its etcd successfully (RFC 3339, UTC), set by the EtcdRestore
// reconciler as it lets the deployment go. A restored etcd holds Karmada's
// objects as the snapshot had them: kao's own (CRDs, webhook and APIService
// CA bundles and endpoints, RBAC, the members' Clusters and Secrets) may be
// from before an upgrade, a certificate rotation or a member's join, or from
// another deployment's plane. So once, when this time is later than the
// start of the deployment's last run, kao runs the install again, which
// applies them as the spec and the deployment's certificates say. A value
// that is not a time, or a time later than the operator's clock, asks for
// nothing.
const RestoredAtAnnotation = "kao.io/restored-at"

// UpgradeWithoutBackupAnnotation lets an upgrade start without the etcd
// snapshot kao takes first, where kao cannot take one: its etcd has no
// quorum, the operator has no state volume, or its credentials for a remote
// host cluster may not create pods/portforward. Its value must be the spec.version
// the upgrade moves to, so the annotation covers that upgrade (and
// single-component upgrades at that version) and not a later one by
// accident. Whoever sets it has taken a snapshot their own way.
const UpgradeWithoutBackupAnnotation = "kao.io/upgrade-without-backup"

// DeploymentNamespaceAnnotation records, on what kao claims in a host
// cluster, the namespace of the deployment that owns it: only a deployment
// of the same namespace may take it over.
const DeploymentNamespaceAnnotation = "kao.io/deployment-namespace"

// Labels and keys of the objects kao creates.
const (
	// DeploymentUIDLabel marks objects that belong to one KarmadaDeployment.
	// It holds the UID: names can be longer than a label value may be.
	DeploymentUIDLabel = "kao.io/deployment-uid"
	// RunIDLabel marks a run's log ConfigMap.
	RunIDLabel = "kao.io/run-id"
	// LogKey is the binaryData key of a run's gzip-compressed log tail.
	LogKey = "ansible.log.gz"
)
