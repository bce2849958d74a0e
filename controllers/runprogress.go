package controllers

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/kao-io/kao/internal/runner"
)

// runWithProgress runs spec with run and hands report the latest progress at
// most every progressInterval (a burst of task results costs one status
// write). A run that could not start becomes a failed result, its message
// redacted, so the caller always has a result to record.
func runWithProgress(ctx context.Context, run PlaybookRunner, clk clock.PassiveClock, spec runner.Spec, start time.Time, report func(runner.Progress)) *runner.Result {
	var mu sync.Mutex
	var latest *runner.Progress
	spec.OnProgress = func(p runner.Progress) {
		mu.Lock()
		latest = &p
		mu.Unlock()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(progressInterval)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
			mu.Lock()
			p := latest
			latest = nil
			mu.Unlock()
			if p != nil {
				report(*p)
			}
		}
	}()

	res, err := run(ctx, spec)
	close(stop)
	<-done
	if err != nil {
		res = &runner.Result{
			ID: spec.ID, Playbook: filepath.Base(spec.Playbook), Outcome: runner.Failed, StartTime: start, EndTime: clk.Now(),
			Message: "preparing the run failed: " + runner.NewRedactor(spec.Redact...).Clean(err.Error(), 300),
		}
	}
	return res
}
