// Package karmadadeployment is the KarmadaDeployment controller.
//
// Reconcile (controller.go) adds the finalizer, then either deletes
// (delete.go: cancel a run, uninstall, release) or decides (decide.go):
// whether a run is due (spec change, failed run past its backoff,
// certificates to renew, user roles changed) and which playbook
// (upgrade.go plans upgrades). prepareRun gathers through the pipeline, in
// a fixed order: the Secrets, then for Containerized mode the host cluster
// (an install or upgrade also makes sure of karmada-apiserver's Service,
// records status.endpoint and checks etcd's volume claims), the user roles,
// the certificates, and last the run spec. startRun hands the run to the
// tracker; executeRun records the result. Between runs, observe.go probes the control plane, its members and
// addons into status; status.go holds the condition setters.
package karmadadeployment
