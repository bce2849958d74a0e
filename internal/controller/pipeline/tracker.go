package pipeline

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kao-io/kao/internal/runner"
)

// RunLimits bound the runs in progress at once; zero is no limit.
type RunLimits struct {
	// Total counts every run of the tracker.
	Total int
	// PerNamespace counts the runs of one namespace's objects.
	PerNamespace int
	// Recheck is how often an object whose run waits for a slot looks for
	// one again, should the end of another run not wake it; zero means
	// DefaultQueuedRecheck.
	Recheck time.Duration
}

// DefaultQueuedRecheck is RunLimits.Recheck when it is not set.
const DefaultQueuedRecheck = 30 * time.Second

// RecheckAfter is how soon a queued object looks for a slot again.
func (l RunLimits) RecheckAfter() time.Duration {
	return cmp.Or(l.Recheck, DefaultQueuedRecheck)
}

// ActiveRun is a playbook run in progress for one object (a deployment or
// an EtcdRestore).
type ActiveRun struct {
	ID         string
	Playbook   string
	Generation int64
	// key is the object's namespace and name, to cancel the run when the
	// object is gone.
	key types.NamespacedName
	// Attached marks a run an earlier process started and this one
	// follows: it is under way already, so no limit holds it back.
	Attached bool
	// Cancel stops the run because its object asks (it is being deleted).
	Cancel context.CancelFunc
	// stop cancels the run with a cause: runner.ErrStopping when the
	// operator stops.
	stop context.CancelCauseFunc
	done chan struct{}
}

// endedRun is the last run this process ended for one object.
type endedRun struct {
	key types.NamespacedName
	id  string
}

// Tracker holds the runs in progress, at most one per object, and owns
// their lifetime: it is a manager Runnable, so runs stop with the manager. A
// run started by a previous operator process is not here; the reconciler
// finds it as status.progress without an active run.
//
// Everything it remembers is keyed by the object's UID, never by its name:
// an object deleted and created again under the same name is a new object
// with no run and no history in this process.
type Tracker struct {
	mu   sync.Mutex
	ctx  context.Context
	runs map[types.UID]*ActiveRun
	// ended remembers the last run this process ended per object, to tell a
	// cache that has not seen the run's recorded end from a run another
	// process left unfinished. Forget drops it when the object goes.
	ended map[types.UID]endedRun
	wg    sync.WaitGroup
	// sweep runs before the tracker accepts runs; nil when there is none.
	sweep *Sweep
	// limits bound the runs in progress at once; queued are the objects
	// that waited for a slot, woken when a run ends.
	limits RunLimits
	queued map[types.UID]client.Object

	// Finished receives an object when its run ends, so it is reconciled
	// again at once.
	Finished chan event.GenericEvent
}

// NewTracker makes a tracker. StartRuns makes the one a reconciler uses and
// registers it with the manager; one that is not started accepts no runs.
func NewTracker() *Tracker {
	return &Tracker{
		runs:     map[types.UID]*ActiveRun{},
		ended:    map[types.UID]endedRun{},
		queued:   map[types.UID]client.Object{},
		Finished: make(chan event.GenericEvent, 1024),
	}
}

// Start implements manager.Runnable: it records the context runs derive from
// and, on shutdown, cancels every run with the cause runner.ErrStopping (an
// in-process run ends, a run in a Job is left to finish) and waits for them
// to record their end.
func (t *Tracker) Start(ctx context.Context) error {
	t.sweep.wait(ctx)
	t.mu.Lock()
	t.ctx = ctx
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	for _, r := range t.runs {
		r.stop(runner.ErrStopping)
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
func (t *Tracker) NeedLeaderElection() bool { return true }

// Get returns the run in progress for an object, or nil.
func (t *Tracker) Get(obj client.Object) *ActiveRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs[obj.GetUID()]
}

// LastEnded is the ID of the last run this process ended for an object, or "".
func (t *Tracker) LastEnded(obj client.Object) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended[obj.GetUID()].id
}

// Stopping tells whether the manager is shutting down: a run started now
// would be cancelled at once.
func (t *Tracker) Stopping() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctx != nil && t.ctx.Err() != nil
}

// Begin registers a new run for obj and calls fn in its own goroutine with
// the run's context. It refuses a second run for the same object.
func (t *Tracker) Begin(obj client.Object, run *ActiveRun, fn func(ctx context.Context)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx == nil {
		return errors.New("the run tracker has not started yet")
	}
	if t.ctx.Err() != nil {
		return errors.New("the operator is shutting down")
	}
	uid := obj.GetUID()
	if _, busy := t.runs[uid]; busy {
		return fmt.Errorf("a run is already in progress for %s", client.ObjectKeyFromObject(obj))
	}
	if why := t.full(obj); why != "" && !run.Attached {
		t.queued[uid] = obj
		return errors.New(why)
	}
	delete(t.queued, uid)
	// A run ends when the manager stops only through Start, which gives
	// the cause: a run elsewhere must tell the operator stopping from its
	// object's deletion.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(t.ctx))
	run.key = client.ObjectKeyFromObject(obj)
	run.Cancel = func() { cancel(context.Canceled) }
	run.stop = cancel
	run.done = make(chan struct{})
	t.runs[uid] = run
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(run.done)
		defer cancel(nil)
		fn(ctx)
	}()
	return nil
}

// SetLimits sets the bounds on runs at once.
func (t *Tracker) SetLimits(l RunLimits) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limits = l
}

// Queue tells whether a run for obj must wait for a slot, and why; a waiting
// object is reconciled again when a run ends.
func (t *Tracker) Queue(obj client.Object) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	why := t.full(obj)
	if why != "" {
		t.queued[obj.GetUID()] = obj
	}
	return why
}

// full says which limit a new run for obj would pass, or "". Called with
// mu held.
func (t *Tracker) full(obj client.Object) string {
	if t.limits.Total > 0 && len(t.runs) >= t.limits.Total {
		return fmt.Sprintf("%d runs are in progress, the operator's limit (--max-concurrent-runs)", len(t.runs))
	}
	if t.limits.PerNamespace > 0 {
		n := 0
		for _, r := range t.runs {
			if r.key.Namespace == obj.GetNamespace() {
				n++
			}
		}
		if n >= t.limits.PerNamespace {
			return fmt.Sprintf("%d runs are in progress in namespace %s, the operator's limit per namespace (--max-concurrent-runs-per-namespace)", n, obj.GetNamespace())
		}
	}
	return ""
}

// End forgets a finished run, remembers its ID as the object's last ended
// run, and asks for the object, and those waiting for a slot, to be
// reconciled.
func (t *Tracker) End(obj client.Object) {
	t.mu.Lock()
	uid := obj.GetUID()
	if run, ok := t.runs[uid]; ok {
		t.ended[uid] = endedRun{key: run.key, id: run.ID}
		delete(t.runs, uid)
	}
	wake := []client.Object{obj}
	for quid, q := range t.queued {
		wake = append(wake, q)
		delete(t.queued, quid)
	}
	t.mu.Unlock()
	for _, o := range wake {
		select {
		case t.Finished <- event.GenericEvent{Object: o}:
		default: // the channel is full: reconciles are queued already
		}
	}
}

// Forget drops what the tracker remembers of an object that is leaving.
func (t *Tracker) Forget(obj client.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ended, obj.GetUID())
	delete(t.queued, obj.GetUID())
}

// ObjectGone cancels the runs of the object that had this namespace and
// name, which no longer exists (nobody will read their result), and drops
// what the tracker remembers of it.
func (t *Tracker) ObjectGone(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.runs {
		if r.key == key {
			r.Cancel()
		}
	}
	for uid, e := range t.ended {
		if e.key == key {
			delete(t.ended, uid)
		}
	}
}

// StartRuns fills the run settings that a reconciler running playbooks
// leaves unset (the runner, the clock, the run timeout) and registers a new
// run tracker with the manager, which accepts runs once sweep (if any) has
// cleaned the state directory.
func StartRuns(mgr ctrl.Manager, run *PlaybookRunner, clk *clock.PassiveClock, timeout *time.Duration, sweep *Sweep) (*Tracker, error) {
	if *run == nil {
		*run = runner.Run
	}
	if *clk == nil {
		*clk = clock.RealClock{}
	}
	if *timeout == 0 {
		*timeout = DefaultRunTimeout
	}
	t := NewTracker()
	t.sweep = sweep
	return t, mgr.Add(t)
}

// NewRunID names a run: sortable by time to the millisecond, unique by a
// random suffix. Two runs of one deployment can start within one second (an
// interrupted run recorded and run again at once); with the time only to
// the second, their random suffixes decided which one sorted as the newer.
func NewRunID(now time.Time) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	now = now.UTC()
	return fmt.Sprintf("%s-%03d-%s", now.Format("20060102-150405"), now.Nanosecond()/int(time.Millisecond), hex.EncodeToString(b))
}

// RunsDir is where a deployment's run directories live: one directory per
// object UID, so a deployment created again under a deleted one's name
// never meets the old one's runs.
func RunsDir(stateDir string, uid types.UID) string {
	return filepath.Join(stateDir, runsDirName, string(uid))
}

// FactsDir is where a deployment's Ansible fact cache lives, per UID.
func FactsDir(stateDir string, uid types.UID) string {
	return filepath.Join(stateDir, factsDirName, string(uid))
}

// State directory entries that belong to one deployment, named by its UID.
const (
	runsDirName = "runs"

	factsDirName = "facts"
)

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
