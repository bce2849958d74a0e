// Package controller registers kao's three controllers with a manager
// (SetupAll) and names the operator's settings (Options) and what its
// administrator allows tenants (Policy).
//
// One package per kind holds its controller, its decisions and its status:
//
//	karmadadeployment  installs, upgrades, changes and removes a control plane
//	etcdbackup         takes scheduled and one-shot etcd snapshots
//	etcdrestore        restores a deployment's etcd from one snapshot
//
// They share pipeline, which turns a CR and what it references into an
// Ansible run and records the run; reason, the one error type of a run that
// does not start; and status, the one status patch per reconcile.
package controller
