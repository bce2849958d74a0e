package etcdrestore

import (
	"time"
)

const (
	// restoreWaitRequeueAfter is how often a restore waiting for something
	// kao does not watch (a Secret, the bundle, a snapshot being written)
	// looks again. Changes of the deployment and the backup wake it sooner.
	restoreWaitRequeueAfter = time.Minute

	// restoreBusyRequeueAfter is how soon a restore waiting for the
	// deployment's run to end looks again; the run's end wakes it sooner.
	restoreBusyRequeueAfter = 15 * time.Second

	// restoreVerifyTimeout bounds fetching a snapshot from a backup host and
	// checking it: an 8 GiB database moves and hashes in minutes.
	restoreVerifyTimeout = 30 * time.Minute

	// previousDataSuffix is appended, with the restore's id, to the etcd data
	// directory to name where each member keeps its old data (the role's
	// etcd_restore_previous_data_dir says the same).
	previousDataSuffix = ".before-restore-"

	// defaultEtcdDataDir is spec.etcd.managed.dataDir's documented default.
	defaultEtcdDataDir = "/var/lib/karmada-etcd"

	// restoreIDNameBytes is how much of the restore's name goes into its id,
	// which names directories on the hosts.
	restoreIDNameBytes = 40

	// Event reasons of EtcdRestore:
	//
	// restoreStartedEvent says the restore's playbook run started.
	restoreStartedEvent = "RestoreStarted"

	// restoreSucceededEvent says every member was restored and the API servers are back.
	restoreSucceededEvent = "RestoreSucceeded"

	// restoreFailedEvent says the restore failed; the note says where.
	restoreFailedEvent = "RestoreFailed"

	// checksumMismatchEvent says the snapshot's sha256 is not the expected one; nothing was touched.
	checksumMismatchEvent = "ChecksumMismatch"

	// restoreResumedEvent says a restore interrupted by an operator restart runs its playbook again.
	restoreResumedEvent = "RestoreResumed"
)
