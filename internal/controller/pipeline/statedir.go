package pipeline

const (
	// RestoresDir is where snapshots fetched from backup hosts wait for the
	// run, under the operator's state directory, one directory per restore.
	RestoresDir = "restores"
)
