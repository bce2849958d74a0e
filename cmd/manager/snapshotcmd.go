package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kao-io/kao/internal/controller/etcdbackup"
	"github.com/kao-io/kao/internal/jobexec"
)

// snapshotCommand is `kao-manager snapshot`, what a backup's snapshot Job
// pod does: it takes the snapshot its Secret describes, checks it and copies
// it to the backup host, then writes what it stored (or why it stored
// nothing) as JSON to the result file, the container's termination
// message, where the operator reads it. A line on stdout says the same for
// people. The exit code is 0 when the snapshot is stored, 1 when it is not,
// and 3 when the request cannot be read or the result not written.
func snapshotCommand(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet(etcdbackup.SnapshotCommand, flag.ContinueOnError)
	fs.SetOutput(stdout)
	requestPath := fs.String("request", jobexec.RequestPath, "The snapshot's request: the file the Job's Secret is mounted as.")
	resultPath := fs.String("result", jobexec.TerminationMessagePath, "Where the result goes: the container's termination message.")
	tmp := fs.String("tmp", os.TempDir(), "A private directory for the snapshot while it is checked and copied.")
	if err := fs.Parse(args); err != nil {
		return 3
	}
	data, err := os.ReadFile(*requestPath)
	if err != nil {
		_, _ = fmt.Fprintf(stdout, "kao snapshot: reading the request: %v\n", err)
		return 3
	}
	dir, err := os.MkdirTemp(*tmp, "kao-snapshot-")
	if err != nil {
		_, _ = fmt.Fprintf(stdout, "kao snapshot: %v\n", err)
		return 3
	}
	defer func() { _ = os.RemoveAll(dir) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	out := etcdbackup.TakeRequestedSnapshot(ctx, data, dir)
	result, err := json.Marshal(out)
	if err == nil && len(result) > jobexec.TerminationMessageLimit {
		out = etcdbackup.SnapshotOutcome{Error: "the snapshot's result is too long for a termination message", Cause: out.Cause}
		result, err = json.Marshal(out)
	}
	if err == nil {
		err = os.WriteFile(*resultPath, result, 0o600)
	}
	if err != nil {
		_, _ = fmt.Fprintf(stdout, "kao snapshot: writing the result: %v\n", err)
		return 3
	}
	if out.Snapshot == nil {
		_, _ = fmt.Fprintf(stdout, "kao snapshot: no snapshot stored: %s\n", out.Error)
		return 1
	}
	s := out.Snapshot
	_, _ = fmt.Fprintf(stdout, "kao snapshot: stored %s at %s: member %s, revision %d, %d keys, sha256 %s\n",
		s.Name, s.Location, s.Member, s.Revision, s.Keys, s.SHA256)
	return 0
}
