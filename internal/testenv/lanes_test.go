package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func testGate(t *testing.T, lanes int) *laneGate {
	return &laneGate{dir: t.TempDir(), lanes: lanes, settle: 200 * time.Millisecond, poll: 5 * time.Millisecond}
}

// TestLanesGoToTheLongestFirst asks for two lanes in the wrong order and
// checks that they are handed out longest first, never more at once than
// there are lanes.
func TestLanesGoToTheLongestFirst(t *testing.T) {
	g := testGate(t, 2)
	var (
		mu            sync.Mutex
		order         []string
		running, most int
		wg            sync.WaitGroup
	)
	for _, w := range []struct {
		name     string
		expected int
	}{{"unranked", 0}, {"short", 10}, {"middle", 100}, {"long", 1000}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := g.acquire(w.name, w.expected)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, w.name)
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			release()
		}()
	}
	wg.Wait()
	if len(order) != 4 || !slices.Contains(order[:2], "long") || !slices.Contains(order[:2], "middle") ||
		order[2] != "short" || order[3] != "unranked" {
		t.Errorf("lanes went in the order %v, want long and middle, then short, then unranked", order)
	}
	if most != 2 {
		t.Errorf("%d held lanes at once, want 2", most)
	}
	if left, _ := os.ReadDir(filepath.Join(g.dir, "waiting")); len(left) != 0 {
		t.Errorf("waiters left behind: %v", left)
	}
}

// TestALaneHeldElsewhereIsNotTaken holds lane-0's lock through a file of its
// own, as another test binary does, and leaves waiter files of processes
// that are gone: the waiter gets lane-1 at once, and a second one waits
// until the lock on lane-0 is let go.
func TestALaneHeldElsewhereIsNotTaken(t *testing.T) {
	g := testGate(t, 2)
	if err := os.MkdirAll(filepath.Join(g.dir, "waiting"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Waiters ranked first whose binaries died: no process has the first
	// one's pid; the second one's is this test's, reused, with another
	// start time.
	gone := filepath.Join(g.dir, "waiting", "000000000-0-0-TestGone")
	if err := os.WriteFile(gone, []byte("2147483646 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	reused := filepath.Join(g.dir, "waiting", "000000000-0-1-TestReused")
	if err := os.WriteFile(reused, []byte(fmt.Sprintf("%d 1", os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(filepath.Join(g.dir, "lane-0"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	first, err := g.acquire("first", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{gone, reused} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("the dead waiter's file %s is still there: %v", filepath.Base(f), err)
		}
	}
	if id := processID(os.Getpid()); !waiterAlive(id) {
		t.Errorf("this test's own id %q does not count as alive", id)
	}
	got := make(chan func(), 1)
	go func() {
		second, err := g.acquire("second", 10)
		if err != nil {
			t.Error(err)
		}
		got <- second
	}()
	select {
	case <-got:
		t.Fatal("a third holder got one of two lanes")
	case <-time.After(500 * time.Millisecond):
	}
	_ = other.Close() // the other binary ends
	select {
	case second := <-got:
		second()
	case <-time.After(5 * time.Second):
		t.Fatal("the lane let go was not taken")
	}
	first()
}

// TestTheLongTierNamesRankedTests keeps the long tier's names true: each is
// a heavy test ranked for the lanes, or a step of one, so a misspelt or
// renamed one is caught here instead of quietly running under `make check`.
// The tests `make check` keeps as its only real-parts test of a way kao
// runs stay out of it, whole.
func TestTheLongTierNamesRankedTests(t *testing.T) {
	for name := range longTier {
		test, _, _ := strings.Cut(name, "/")
		if _, ok := expectedSeconds[test]; !ok {
			t.Errorf("long tier entry %s: %s has no rank in expectedSeconds: misspelt, or renamed without the tier?", name, test)
		}
	}
	for _, kept := range []string{"TestBinaryInstall", "TestOperatorInCluster", "TestChurn"} {
		if longTier[kept] {
			t.Errorf("%s is make check's only real-parts test of its mode and must not move to the long tier", kept)
		}
	}
}
