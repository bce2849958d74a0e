package controllers

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
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

// statusWriter writes the status of one kind that shows playbook runs (a
// KarmadaDeployment, an EtcdRestore): the KarmadaDeployment and EtcdRestore
// reconcilers record their runs through it.
type statusWriter[T client.Object] struct {
	client client.Client
	reader client.Reader
	// newObject returns an empty object to read the latest version into.
	newObject func() T
	// progress reaches the object's status.progress.
	progress func(T) **kaov1.RunProgress
}

// update applies mutate to the latest version of obj, read without the
// cache, and writes its status. It retries on conflicts with other writers
// and writes nothing when mutate changed nothing. An object that is gone is
// not an error, and neither is a new object that took its name (another
// UID): that one is not written.
func (w statusWriter[T]) update(ctx context.Context, obj client.Object, mutate func(T)) error {
	key := client.ObjectKeyFromObject(obj)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := w.newObject()
		if err := w.reader.Get(ctx, key, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		if cur.GetUID() != obj.GetUID() {
			return nil
		}
		before := cur.DeepCopyObject()
		mutate(cur)
		if equality.Semantic.DeepEqual(before, cur) {
			return nil
		}
		return w.client.Status().Update(ctx, cur)
	})
}

// reportProgress is runWithProgress's report for the run spec of obj: it
// writes status.progress while the status still shows that run.
func (w statusWriter[T]) reportProgress(ctx context.Context, obj client.Object, spec runner.Spec, start time.Time,
	clk clock.PassiveClock, log logr.Logger) func(runner.Progress) {
	playbook := filepath.Base(spec.Playbook)
	return func(p runner.Progress) {
		err := w.update(ctx, obj, func(cur T) {
			if progress := w.progress(cur); *progress != nil && (*progress).RunID == spec.ID {
				*progress = progressStatus(spec.ID, playbook, start, p, clk.Now())
			}
		})
		if err != nil && ctx.Err() == nil {
			log.Error(err, "Updating progress")
		}
	}
}
