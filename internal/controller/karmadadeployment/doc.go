// Package karmadadeployment is the KarmadaDeployment controller.
//
// Reconcile (controller.go) adds the finalizer, then either deletes
// (delete.go: cancel a run, uninstall, release) or decides (decide.go):
// whether a run is due (spec change, failed run past its backoff,
// certificates to renew, user roles changed) and which playbook
// (upgrade.go plans upgrades). prepareRun gathers the inputs through the
// pipeline in a fixed order (host cluster, user roles, certificates, then the
// run spec) and startRun hands the run to the tracker; executeRun records the
// result. Between runs, observe.go probes the control plane, its members and
// addons into status; status.go holds the condition setters.
package karmadadeployment
