package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kao-io/kao/internal/jobexec"
	"github.com/kao-io/kao/internal/runner"
)

// runCommand is `kao-manager run`, what a run's Job pod does: it runs the
// playbook its Secret describes with kao's runner and relays the run's
// events on stdout, which the operator follows as the pod's log. SIGTERM
// (the Job deleted) stops ansible-playbook's whole process group. The exit
// code is 0 for a successful run, 1 for a failed one, 2 for a cancelled one
// and 3 when the run could not be prepared.
func runCommand(args []string, stdout io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stdout)
	requestPath := fs.String("request", jobexec.RequestPath, "The run's request: the file the run's Secret is mounted as.")
	if err := fs.Parse(args); err != nil {
		return 3
	}
	spec, err := jobexec.ReadRequest(*requestPath)
	if err != nil {
		_, _ = fmt.Fprintf(stdout, "kao run: %v\n", err)
		return 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	spec.Relay = stdout
	res, err := runner.Run(ctx, spec)
	if err != nil {
		_, _ = fmt.Fprintf(stdout, "kao run: %s\n", runner.NewRedactor(append(spec.Redact, spec.SSHPrivateKey)...).Clean(err.Error(), 500))
		return 3
	}
	switch res.Outcome {
	case runner.Succeeded:
		return 0
	case runner.Cancelled:
		return 2
	default:
		return 1
	}
}
