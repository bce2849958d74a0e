// Package roles tests kao's Ansible roles one at a time on real test hosts
// (test/hosts): the real ansible-playbook over SSH with pinned host keys, the
// inventory that inventory-plugin builds from a KarmadaDeployment, and the
// offline bundle that `make artifacts` assembles.
//
// The tests need root, Debian's ansible, openssl and the test hosts' tools.
// They skip under -short; otherwise a missing prerequisite fails them, so a
// machine that could not run them never reports a pass.
package roles
