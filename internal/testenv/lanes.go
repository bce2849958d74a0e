package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/procfs"
)

// The machine's lanes: the heavy tests (those that boot test hosts or a real
// node and install control planes on them, or build images) of every test
// binary share a few lanes, and run one to a lane. On the 2-core machine CI
// uses, three at once with the unit packages beside them kept the CPU busy
// all the time, and control planes missed their deadlines (etcd heartbeats,
// leader leases, kubectl's minute); go test's -p and -parallel bound each
// binary, not the machine.
//
// A waiting test takes a free lane only when no test that is expected to
// take longer is waiting: the longest start first, and the short ones fill
// the lanes at the end. go test starts every package's binary at once
// (make test's -p), so the order spans packages.

// LaneCount is how many heavy tests run at once: $KAO_TEST_LANES, or 2.
func LaneCount() int {
	if n, err := strconv.Atoi(os.Getenv("KAO_TEST_LANES")); err == nil && n > 0 {
		return n
	}
	return 2
}

// laneDir holds the lanes' lock files and the waiters' files:
// $KAO_TEST_LANES_DIR, or kao-test-lanes in the temporary directory.
func laneDir() string {
	if d := os.Getenv("KAO_TEST_LANES_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "kao-test-lanes")
}

// expectedSeconds ranks the heavy tests by their rough time in a lane, two
// at once on the 2-core machine (local runs of 2026-11-27 and 28); only the
// order counts. A test not listed comes after every listed one.
var expectedSeconds = map[string]int{
	"TestBinaryInstall":                      1300,
	"TestContainerizedOnRealPods":            1150,
	"TestOperatorInCluster":                  1100,
	"TestEtcdScale":                          950, // 722 s alone (2026-11-28), with two members moved in one run
	"TestControlPlaneRoles":                  900, // 785 s beside one other lane, without the runs moved to e2e
	"TestReplaceADeadHost":                   850,
	"TestRebuildRotatedFromABackupHost":      550, // 292 s beside TestReplaceADeadHost's 440 s, on a fast day (2026-12-02)
	"TestBinaryUpgrade":                      720,
	"TestInstallFaults":                      600,
	"TestJobExecutor":                        600,
	"TestEtcd":                               300, // with TestEtcdRestore's steps: 302 s beside one other lane
	"TestImage":                              330,
	"TestContainerizedEtcdChoicesOnRealPods": 250,
	"TestChurn":                              210,
	"TestContainerizedInstall":               150,
	"TestComponentImages":                    130,
	"TestExternalEtcd":                       120,
}

// LongTierEnv names the environment variable that runs the long tier too:
// `make check-all` sets it to 1. Without it, the heavy tests of longTier
// skip, saying so.
const LongTierEnv = "KAO_LONG_TESTS"

// longTier is the heavy tests, and the steps of a kept one, that `make
// check` (CI, the README's test command) leaves to `make check-all`. On the
// 2-core machine CI uses, every heavy test together took 80 to 100 minutes
// of lanes beside the unit packages and lint, over CI's limit, so nothing
// landed; on 2026-12-02 CI ran out of its 90 minutes again with the
// upgrade, Containerized and image tests still in `make check`, its tests
// taking two to four times their rank. `make check` keeps one real-parts
// test of each way kao is run:
//   - TestOperatorInCluster: the image, installed with helm into a real
//     node, installs Binary on an SSH host from its pod, survives its pod's
//     deletion, joins a Push and a Pull member, backs up, and installs a
//     Containerized control plane on real pods;
//   - TestBinaryInstall: an HA control plane on three SSH hosts, a host
//     powered off, members joined, backup and restore, a changed host key
//     refused, no secret leaked, deletion;
//   - TestChurn: deployments created and deleted under churn;
//   - TestComponentImages and TestExternalEtcd, the short ones.
//
// The long tier holds the scenarios that repeat an install to prove one
// more path: the upgrade with its plans and drift check, Containerized on a
// real node with its upgrades and addons, etcd scaling and quorum loss, a
// dead host and a lost site (both ways of rebuilding), faults mid-run, the Job executor, the roles one by
// one, the image's reproducibility, and TestBinaryInstall's addon and
// certificate steps (each a run of the full install). A step is named as
// t.Name() gives it (spaces as underscores) and skips by LongStep.
var longTier = map[string]bool{
	"TestBinaryUpgrade":                      true,
	"TestContainerizedOnRealPods":            true,
	"TestImage":                              true,
	"TestEtcdScale":                          true,
	"TestControlPlaneRoles":                  true,
	"TestReplaceADeadHost":                   true,
	"TestRebuildRotatedFromABackupHost":      true,
	"TestInstallFaults":                      true,
	"TestJobExecutor":                        true,
	"TestEtcd":                               true,
	"TestContainerizedEtcdChoicesOnRealPods": true,
	"TestContainerizedInstall":               true,

	"TestBinaryInstall/Addons":                              true,
	"TestBinaryInstall/Certificate_rotation_and_user_roles": true,
}

// LongTier reports whether this run includes the long tier.
func LongTier() bool { return os.Getenv(LongTierEnv) == "1" }

// LongStep skips a step (a subtest) of a kept heavy test when the step is
// in the long tier and the run does not include that tier.
func LongStep(t *testing.T) {
	t.Helper()
	skipOutsideItsTier(t, "this step")
}

// skipOutsideItsTier skips t, called what in the message, when t is in the
// long tier and the run does not include that tier.
func skipOutsideItsTier(t *testing.T, what string) {
	t.Helper()
	if longTier[t.Name()] && !LongTier() {
		t.Skipf("%s is in the long tier: it runs under `make check-all` (%s=1), not `make check`", what, LongTierEnv)
	}
}

// laneSettle is how long a waiter waits before it may take a lane: tests
// that go test releases together (a package's parallel tests) have all
// said they wait by then, so the longest of them goes first.
// $KAO_TEST_LANES_SETTLE (a Go duration) sets it: make test-heavy gives 45
// s, so that every package's heavy tests have arrived (e2e's TestMain
// starts an API server first) before the first lane is taken. Tests arrive
// at once, so only the first lanes wait for it.
func laneSettle() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KAO_TEST_LANES_SETTLE")); err == nil && d >= 0 {
		return d
	}
	return time.Second
}

var laneSeq atomic.Int64

// Lane runs t in parallel with the package's other tests, in one of the
// machine's lanes: it returns when t has a lane, which it keeps until t and
// its cleanups are done. A test's lane is its first cleanup, so it is freed
// last, when the test's hosts, node or images are gone.
//
// A test of the long tier skips instead unless the run includes that tier
// (LongTier).
func Lane(t *testing.T) {
	skipOutsideItsTier(t, t.Name())
	t.Parallel()
	g := &laneGate{dir: laneDir(), lanes: LaneCount(), settle: laneSettle(), poll: 250 * time.Millisecond}
	start := time.Now()
	release, err := g.acquire(t.Name(), expectedSeconds[t.Name()])
	if err != nil {
		t.Fatalf("taking one of the machine's test lanes in %s: %v", g.dir, err)
	}
	t.Cleanup(release)
	if waited := time.Since(start); waited > 5*time.Second {
		t.Logf("waited %s for one of the machine's %d test lanes", waited.Round(time.Second), g.lanes)
	}
}

// laneGate is the machine's lanes as seen from one test: lane-N files that a
// holder keeps an exclusive flock on (the kernel frees them when a test
// binary dies), and a waiting/ directory with a file per waiter, whose name
// sorts the longest expected test first.
type laneGate struct {
	dir          string
	lanes        int
	settle, poll time.Duration
}

func (g *laneGate) acquire(name string, expected int) (release func(), err error) {
	waiting := filepath.Join(g.dir, "waiting")
	if err := os.MkdirAll(waiting, 0o755); err != nil {
		return nil, err
	}
	// Longest first: the name sorts by the complement of the expected time,
	// then by arrival.
	me := fmt.Sprintf("%09d-%019d-%d-%s", 999999999-min(expected, 999999999), time.Now().UnixNano(), laneSeq.Add(1), sanitize(name))
	mine := filepath.Join(waiting, me)
	if err := os.WriteFile(mine, []byte(processID(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(mine) }()
	arrived := time.Now()
	for {
		if time.Since(arrived) >= g.settle && g.first(waiting) == me {
			if f, err := g.tryLanes(); err != nil || f != nil {
				if err != nil {
					return nil, err
				}
				return func() { _ = f.Close() }, nil
			}
		}
		time.Sleep(g.poll)
	}
}

// first returns the best-placed waiter, forgetting those whose test binary
// is gone.
func (g *laneGate) first(waiting string) string {
	entries, err := os.ReadDir(waiting)
	if err != nil {
		return ""
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(waiting, e.Name()))
		if err != nil {
			continue
		}
		if !waiterAlive(string(data)) {
			_ = os.Remove(filepath.Join(waiting, e.Name()))
			continue
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// tryLanes takes a free lane, or returns nil when every lane is held.
func (g *laneGate) tryLanes() (*os.File, error) {
	for i := range g.lanes {
		f, err := os.OpenFile(filepath.Join(g.dir, fmt.Sprintf("lane-%d", i)), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, err
		}
	}
	return nil, nil
}

// processID names process pid as a waiter's file holds it: its pid and its
// start time, so that a waiter whose binary died is not taken for a process
// that got the same pid later.
func processID(pid int) string {
	return fmt.Sprintf("%d %s", pid, startTime(pid))
}

// startTime is the process's start time, or "" when it is gone.
func startTime(pid int) string {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return ""
	}
	return strconv.FormatUint(st.Start, 10)
}

// waiterAlive tells whether the process a waiter's file names still runs.
// A file that does not name one (being written) counts as alive.
func waiterAlive(id string) bool {
	f := strings.Fields(id)
	if len(f) != 2 {
		return true
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil {
		return true
	}
	return startTime(pid) == f[1]
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name)
}
