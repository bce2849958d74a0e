// Package roles tests kao's Ansible roles on real test hosts
// (test/hosts): the real ansible-playbook over SSH with pinned host keys, the
// inventory that internal/inventory builds from a KarmadaDeployment, and the
// offline bundle that `make artifacts` assembles.
//
// Idempotency (a second run reports changed=0 on every host) is asserted once
// for the whole install, every role of playbooks/install.yml included, by
// test/e2e's re-run after a restore; the tests here assert it only where e2e cannot (the
// etcd role's variants, member joins and unjoins, the addons), to keep CI under an hour.
// For the same reason the roles that make a control plane (etcd, the API
// servers, the controllers, members, addons) are tested in order on one
// plane, TestControlPlaneRoles, not each on a plane of its own; a check that
// needs a run test/e2e's TestBinaryInstall makes anyway on the same layout
// (a certificate rotation, the addons on with karmada-scheduler calling the
// estimators, then off) is made there, not after a run of its own here; and
// etcd-restore.yml runs on TestEtcd's cluster, not on hosts of its own.
//
// The tests need root, Debian's ansible, openssl and the test hosts' tools.
// They skip under -short; otherwise a missing prerequisite fails them, so a
// machine that could not run them never reports a pass.
package roles
