package etcdbackup

import (
	"time"
)

const (
	// backupRetryBase is the wait after the first failed attempt of a
	// one-shot backup: long enough for a member restarting under systemd.
	// Every retry then waits as long as the backup has been failing, so the
	// waits double.
	backupRetryBase = 30 * time.Second

	// backupRetryCap bounds the wait between attempts of a failing one-shot
	// backup, so a fixed cause (a Secret created, a host back online) is
	// picked up within minutes.
	backupRetryCap = 15 * time.Minute

	// deploymentWaitRequeueAfter is how often a backup waiting for its
	// KarmadaDeployment looks again. Changes of the deployment wake it
	// sooner; this catches what kao does not watch (the PKI Secret).
	deploymentWaitRequeueAfter = 1 * time.Minute

	// minRequeueAfter is the wait before a schedule time that passed while a
	// long snapshot ran: it is taken right after, as a missed time is.
	minRequeueAfter = time.Second

	// snapshotJobPollInterval is how often the operator looks at a snapshot
	// Job while it runs: a snapshot takes seconds to minutes, and looking
	// costs two reads.
	snapshotJobPollInterval = 5 * time.Second

	// defaultBackupRetention is how many snapshots a scheduled backup keeps
	// when spec.retention is unset (the API's documented default).
	defaultBackupRetention = 7

	// maxScheduleSteps bounds the walk over missed schedule times after a
	// long pause of the operator; the walk starts near now, so only a
	// schedule firing thousands of times a day comes near it.
	maxScheduleSteps = 10000

	// Event reasons of EtcdBackup:
	//
	// backupSucceededEvent says a snapshot was taken, verified and stored.
	backupSucceededEvent = "BackupSucceeded"

	// backupFailedEvent says a snapshot attempt failed; the note says why.
	backupFailedEvent = "BackupFailed"

	// snapshotHeldEvent says retention kept the last good snapshot beyond
	// spec.retention, because every snapshot since looks like an emptied etcd.
	snapshotHeldEvent = "SnapshotHeld"

	// snapshotPrunedEvent says retention deleted old snapshots.
	snapshotPrunedEvent = "SnapshotsPruned"

	// snapshotJobStartedEvent says a snapshot is being taken in a Job.
	snapshotJobStartedEvent = "SnapshotJobStarted"

	// pruneFailedEvent says an old snapshot could not be deleted; kao tries again after the next snapshot.
	pruneFailedEvent = "PruneFailed"
)
