package e2e

import (
	"flag"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// longestFirst ranks the package's long tests by their time in CI on the
// 2-core machine, longest first. Started in this order, the short ones fill
// the lanes at the end; in source order the last long test ran alone for
// some ten minutes while the other lane stood idle. go test's time of a
// test includes its wait here for a lane: the times below are from a lane's
// start to its end, in the local CI run of 2026-11-27 at 6ed7810 (53m44s).
var longestFirst = []string{
	"TestBinaryInstall",                      // 1304 s
	"TestContainerizedOnRealPods",            // 1028 s
	"TestEtcdScale",                          // 860 s, with the quorum loss
	"TestBinaryUpgrade",                      // 717 s
	"TestInstallFaults",                      // 580 s
	"TestReplaceADeadHost",                   // 370 s
	"TestContainerizedEtcdChoicesOnRealPods", // 224 s
	"TestChurn",                              // 210 s
	"TestContainerizedInstall",               // 146 s
}

// lanes admits the long tests, -parallel at a time, in the order of
// longestFirst. go test's own -parallel limit is raised in TestMain so that
// every parallel test reaches the gate, which then decides the order: go
// test would start them in an order its scheduler picks.
var lanes *laneGate

// laneSettle is how long the gate waits, after the first long test asks for
// a lane, for the others to ask too: go test releases them all at once, when
// the package's sequential tests are done.
const laneSettle = time.Second

// takeLanesFromGoTest makes the gate the only limit on parallel tests: it
// takes -parallel's value (GOMAXPROCS unless set) for itself and raises go
// test's own limit above the number of tests.
func takeLanesFromGoTest() {
	f := flag.Lookup("test.parallel")
	n, err := strconv.Atoi(f.Value.String())
	if err != nil || n < 1 {
		n = 1
	}
	lanes = newLaneGate(n, longestFirst)
	_ = f.Value.Set("1000")
}

// longTest marks t as one of the package's long tests: it runs in parallel
// with the others, in a lane of its own, in longestFirst's order.
func longTest(t *testing.T) {
	t.Parallel()
	lanes.enter(t.Name())
	// The first cleanup registered runs last: the lane is free only when the
	// test's hosts, node or host cluster are gone.
	t.Cleanup(lanes.leave)
}

type laneGate struct {
	rank    []string
	settle  time.Duration
	mu      sync.Mutex
	free    int
	started bool // the first test asked: the settle timer runs or ran
	settled bool
	waiting map[string]chan struct{}
}

func newLaneGate(n int, rank []string) *laneGate {
	return &laneGate{rank: rank, settle: laneSettle, free: n, waiting: map[string]chan struct{}{}}
}

// enter blocks until the test called name has a lane.
func (g *laneGate) enter(name string) {
	admitted := make(chan struct{})
	g.mu.Lock()
	g.waiting[name] = admitted
	if !g.started {
		g.started = true
		time.AfterFunc(g.settle, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.settled = true
			g.admit()
		})
	}
	if g.settled {
		g.admit()
	}
	g.mu.Unlock()
	<-admitted
}

// leave frees a lane for the next test in rank.
func (g *laneGate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free++
	g.admit()
}

// admit starts waiting tests, best ranked first, while lanes are free.
// Tests the rank does not name come after those it does, by name. Called
// with mu held.
func (g *laneGate) admit() {
	for g.free > 0 && len(g.waiting) > 0 {
		names := make([]string, 0, len(g.waiting))
		for name := range g.waiting {
			names = append(names, name)
		}
		slices.SortFunc(names, func(a, b string) int {
			if ra, rb := g.rankOf(a), g.rankOf(b); ra != rb {
				return ra - rb
			}
			if a < b {
				return -1
			}
			return 1
		})
		close(g.waiting[names[0]])
		delete(g.waiting, names[0])
		g.free--
	}
}

func (g *laneGate) rankOf(name string) int {
	if i := slices.Index(g.rank, name); i >= 0 {
		return i
	}
	return len(g.rank)
}

// TestLaneGateStartsTheLongestFirst asks for lanes in the wrong order and
// checks that the gate hands them out by rank, never more at once than it
// has.
func TestLaneGateStartsTheLongestFirst(t *testing.T) {
	g := newLaneGate(2, []string{"long", "middle", "short"})
	g.settle = 200 * time.Millisecond
	var (
		mu      sync.Mutex
		order   []string
		running int
		most    int
		wg      sync.WaitGroup
	)
	for _, name := range []string{"unranked", "short", "middle", "long"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.enter(name)
			mu.Lock()
			order = append(order, name)
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			g.leave()
		}()
	}
	wg.Wait()
	// The first two start together, in either order; then one by one.
	if len(order) != 4 || !slices.Contains(order[:2], "long") || !slices.Contains(order[:2], "middle") ||
		order[2] != "short" || order[3] != "unranked" {
		t.Errorf("lanes were handed out in the order %v, want long and middle, then short, then unranked", order)
	}
	if most != 2 {
		t.Errorf("%d tests ran at once, want 2", most)
	}
}
