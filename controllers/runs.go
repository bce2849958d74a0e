package controllers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kao-io/kao/internal/runner"
)

// activeRun is a playbook run in progress for one deployment.
type activeRun struct {
	id         string
	playbook   string
	generation int64
	cancel     context.CancelFunc
	done       chan struct{}
}

// runTracker holds the runs in progress, at most one per deployment, and
// owns their lifetime: it is a manager Runnable, so runs stop with the
// manager. A run started by a previous operator process is not here; the
// reconciler finds it as status.progress without an active run.
type runTracker struct {
	mu   sync.Mutex
	ctx  context.Context
	runs map[types.NamespacedName]*activeRun
	wg   sync.WaitGroup

	// finished receives a deployment's key when its run ends, so it is
	// reconciled again at once.
	finished chan event.GenericEvent
}

func newRunTracker() *runTracker {
	return &runTracker{
		runs:     map[types.NamespacedName]*activeRun{},
		finished: make(chan event.GenericEvent, 1024),
	}
}

// Start implements manager.Runnable: it records the context runs derive from
// and, on shutdown, cancels every run and waits for them to record their end.
func (t *runTracker) Start(ctx context.Context) error {
	t.mu.Lock()
	t.ctx = ctx
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	for _, r := range t.runs {
		r.cancel()
	}
	t.mu.Unlock()
	done := make(chan struct{})
	go func() { t.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader runs playbooks.
func (t *runTracker) NeedLeaderElection() bool { return true }

// get returns the run in progress for a deployment, or nil.
func (t *runTracker) get(key types.NamespacedName) *activeRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[key]
}

// stopping tells whether the manager is shutting down: a run started now
// would be cancelled at once.
func (t *runTracker) stopping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctx != nil && t.ctx.Err() != nil
}

// start registers a new run and calls fn in its own goroutine with the run's
// context. It refuses a second run for the same deployment.
func (t *runTracker) start(key types.NamespacedName, run *activeRun, fn func(ctx context.Context)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		return errors.New("the run tracker has not started yet")
	}
	if t.ctx.Err() != nil {
		return errors.New("the operator is shutting down")
	}
	if _, busy := t.runs[key]; busy {
		return fmt.Errorf("a run is already in progress for %s", key)
	}
	ctx, cancel := context.WithCancel(t.ctx)
	run.cancel = cancel
	run.done = make(chan struct{})
	t.runs[key] = run
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(run.done)
		defer cancel()
		fn(ctx)
	}()
	return nil
}

// end forgets a finished run and asks for its object (a deployment, or an
// EtcdRestore) to be reconciled.
func (t *runTracker) end(key types.NamespacedName, obj client.Object) {
	t.mu.Lock()
	delete(t.runs, key)
	t.mu.Unlock()
	select {
	case t.finished <- event.GenericEvent{Object: obj}:
	default: // a reconcile is queued already
	}
}

// startRuns fills the run settings that a reconciler running playbooks
// leaves unset (the runner, the clock, the run timeout) and registers a new
// run tracker with the manager.
func startRuns(mgr ctrl.Manager, run *PlaybookRunner, clk *clock.PassiveClock, timeout *time.Duration) (*runTracker, error) {
	if *run == nil {
		*run = runner.Run
	}
	if *clk == nil {
		*clk = clock.RealClock{}
	}
	if *timeout == 0 {
		*timeout = defaultRunTimeout
	}
	t := newRunTracker()
	return t, mgr.Add(t)
}

// newRunID names a run: sortable by time, unique by a random suffix.
func newRunID(now time.Time) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// runsDir is where a deployment's run directories live. It uses the UID's
// first block, not the name: SSH control sockets inside must stay short.
func runsDir(stateDir string, uid types.UID) string {
	short := string(uid)
	if i := strings.IndexByte(short, '-'); i > 0 {
		short = short[:i]
	}
	return filepath.Join(stateDir, "runs", short)
}

// pruneRunDirs keeps the newest keep run directories of a deployment.
func pruneRunDirs(dir string, keep int) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	names := []string{}
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names) // run IDs sort by start time
	var errs []error
	for i := 0; i < len(names)-keep; i++ {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, names[i])))
	}
	return errors.Join(errs...)
}
