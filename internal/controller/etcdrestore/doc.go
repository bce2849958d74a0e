// Package etcdrestore is the EtcdRestore controller: it verifies the snapshot
// an EtcdRestore names (source.go), holds the deployment so no other run
// starts, runs the restore playbook through the pipeline (run.go) and
// releases the deployment when the run ends. A restore runs once.
package etcdrestore
