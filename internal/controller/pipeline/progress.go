package pipeline

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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/metrics"
	"github.com/kao-io/kao/internal/runner"
)

// PlaybookRunner runs one playbook. runner.Run is the real one; narrow unit
// tests may fake it.
type PlaybookRunner func(ctx context.Context, spec runner.Spec) (*runner.Result, error)

// SpecOrLifecycleChanged ignores kao's own status writes, which would
// otherwise wake the reconciler with every progress update.
func SpecOrLifecycleChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return !equality.Semantic.DeepEqual(e.ObjectOld.GetDeletionTimestamp(), e.ObjectNew.GetDeletionTimestamp()) ||
				!equality.Semantic.DeepEqual(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
		}},
	)
}

// StaleCacheRequeueAfter is how soon to look again when the cache has not yet
// seen the status a finished run wrote: the watch catches up within moments.
const StaleCacheRequeueAfter = time.Second

// RunWithProgress runs spec with run and hands report the latest progress at
// most every progressInterval (a burst of task results costs one status
// write). A run that could not start becomes a failed result, its message
// redacted, so the caller always has a result to record. The run is counted
// in kao's metrics under who.
func RunWithProgress(ctx context.Context, run PlaybookRunner, clk clock.PassiveClock, spec runner.Spec, start time.Time,
	who metrics.Run, report func(runner.Progress)) *runner.Result {
	metrics.RunStarted(who)
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
	roles := make([]string, len(res.FailedTasks))
	for i, f := range res.FailedTasks {
		roles[i] = f.Role
	}
	metrics.RunFinished(who, string(res.Outcome), max(0, res.EndTime.Sub(res.StartTime)), roles)
	return res
}

// StatusWriter writes the status of one kind that shows playbook runs (a
// KarmadaDeployment, an EtcdRestore): the KarmadaDeployment and EtcdRestore
// reconcilers record their runs through it.
type StatusWriter[T client.Object] struct {
	Client client.Client
	Reader client.Reader
	// NewObject returns an empty object to read the latest version into.
	NewObject func() T
	// Progress reaches the object's status.progress.
	Progress func(T) **kaov1.RunProgress
}

// Update applies mutate to the latest version of obj, read without the
// cache, and writes its status. It retries on conflicts with other writers
// and writes nothing when mutate changed nothing. An object that is gone is
// not an error, and neither is a new object that took its name (another
// UID): that one is not written.
func (w StatusWriter[T]) Update(ctx context.Context, obj client.Object, mutate func(T)) error {
	key := client.ObjectKeyFromObject(obj)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		cur := w.NewObject()
		if err := w.Reader.Get(ctx, key, cur); err != nil {
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
		return w.Client.Status().Update(ctx, cur)
	})
}

// ReportProgress is RunWithProgress's report for the run spec of obj: it
// writes status.progress while the status still shows that run.
func (w StatusWriter[T]) ReportProgress(ctx context.Context, obj client.Object, spec runner.Spec, start time.Time,
	clk clock.PassiveClock, log logr.Logger) func(runner.Progress) {
	playbook := filepath.Base(spec.Playbook)
	return func(p runner.Progress) {
		err := w.Update(ctx, obj, func(cur T) {
			if progress := w.Progress(cur); *progress != nil && (*progress).RunID == spec.ID {
				next := ProgressStatus(spec.ID, playbook, start, p, clk.Now())
				// What the run is (a drift check, a plan) was set when it started.
				next.Check, next.Plan = (*progress).Check, (*progress).Plan
				*progress = next
			}
		})
		if err != nil && ctx.Err() == nil {
			log.Error(err, "Updating progress")
		}
	}
}
