package pipeline

// kao's entry playbooks, relative to the playbook directory (--playbook-dir):
// every playbook the operator runs is named here.
const (
	// InstallPlaybook installs or converges a control plane, its members
	// and addons last (members.yml's plays).
	InstallPlaybook = "install.yml"

	// MembersPlaybook joins and unjoins members when only spec.members
	// changed.
	MembersPlaybook = "members.yml"

	// UpgradePlaybook rolls new versions out on a running control plane:
	// one component at a time in Karmada's order, one host at a time
	// (Containerized: one Deployment's rollout at a time), each step
	// health-gated, then the install converges the rest.
	UpgradePlaybook = "upgrade.yml"

	// UninstallPlaybook removes a control plane and revokes Karmada's access
	// in its members.
	UninstallPlaybook = "uninstall.yml"

	// EtcdRestorePlaybook restores a managed etcd from one snapshot.
	EtcdRestorePlaybook = "etcd-restore.yml"
)

// HostsTag tags install.yml's plays that install and run the control
// plane's parts (etcd, the API servers, the controllers): on its hosts, or
// as workloads of its host cluster. A drift check and a plan run only
// these: what was changed by hand is there; Karmada's objects, members and
// addons are applied again by every run.
const HostsTag = "hosts"

// UpgradeHostsTag tags upgrade.yml's preflight and its steps, one
// component on one host (or one Deployment of the host cluster) at a
// time. A plan of an upgrade runs only these, not the converge
// (install.yml) that ends the playbook: in check mode nothing moved, so
// the converge would list every move again.
const UpgradeHostsTag = "upgrade_hosts"
