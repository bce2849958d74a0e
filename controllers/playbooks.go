package controllers

// kao's entry playbooks, relative to the playbook directory (--playbook-dir):
// every playbook the operator runs is named here.
const (
	// installPlaybook installs or converges a control plane, its members
	// and addons last (members.yml's plays).
	installPlaybook = "install.yml"
	// membersPlaybook joins and unjoins members when only spec.members
	// changed.
	membersPlaybook = "members.yml"
	// upgradePlaybook rolls new versions out on a running control plane:
	// one component at a time in Karmada's order, one host at a time
	// (Containerized: one Deployment's rollout at a time), each step
	// health-gated, then the install converges the rest.
	upgradePlaybook = "upgrade.yml"
	// uninstallPlaybook removes a control plane and revokes Karmada's access
	// in its members.
	uninstallPlaybook = "uninstall.yml"
	// etcdRestorePlaybook restores a managed etcd from one snapshot.
	etcdRestorePlaybook = "etcd-restore.yml"
)
