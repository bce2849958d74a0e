package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/procfs"
)

// peakMemory is the most memory an operator process and its runs held,
// in bytes.
type peakMemory struct {
	// operator is the manager's own peak resident set (VmHWM).
	operator int64
	// run is the most the manager's descendants (ansible-playbook, its
	// forks, the modules they run, ssh) held at once: the sum of their
	// proportional set sizes, so that pages forks share count once.
	run int64
	// ansible is the same sum over the ansible-playbook processes alone.
	ansible int64
	// largest is the largest peak resident set of one descendant.
	largest int64
}

// memorySampleInterval is how often samplePeakMemory looks: a run's
// processes live for seconds, the modules' for less, so a short module's
// peak between two samples is missed (the manager's own is not: the
// kernel keeps it).
const memorySampleInterval = 100 * time.Millisecond

// samplePeakMemory samples the memory of the process pid and its
// descendants from now until the function it returns is called, which
// returns the peaks.
func samplePeakMemory(t testing.TB, pid int) func() peakMemory {
	t.Helper()
	var (
		mu   sync.Mutex
		peak peakMemory
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(memorySampleInterval)
		defer tick.Stop()
		for {
			var run, ansible, largest int64
			for _, p := range descendants(pid) {
				pss := procField(filepath.Join("/proc", strconv.Itoa(p), "smaps_rollup"), "Pss:")
				run += pss
				if comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "comm")); err == nil &&
					strings.HasPrefix(string(comm), "ansible-playboo") {
					ansible += pss
				}
				largest = max(largest, procField(filepath.Join("/proc", strconv.Itoa(p), "status"), "VmHWM:"))
			}
			mu.Lock()
			peak.run, peak.ansible, peak.largest = max(peak.run, run), max(peak.ansible, ansible), max(peak.largest, largest)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	finish := func() {
		once.Do(func() {
			close(stop)
			<-stopped
		})
	}
	t.Cleanup(finish)
	return func() peakMemory {
		finish()
		mu.Lock()
		defer mu.Unlock()
		out := peak
		out.operator = procField(filepath.Join("/proc", strconv.Itoa(pid), "status"), "VmHWM:")
		if out.operator == 0 {
			t.Errorf("no peak memory for process %d: it is gone", pid)
		}
		return out
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	pids, _ := procfs.PIDs()
	children := map[int][]int{}
	for _, p := range pids {
		st, err := procfs.ReadStat(p)
		if err != nil {
			continue // it ended meanwhile
		}
		children[st.PPID] = append(children[st.PPID], p)
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// procField reads a "Name:   1234 kB" line of a /proc file in bytes, or 0.
func procField(path, name string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == name {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// cpuTimes are the machine's CPU times from /proc/stat, in clock ticks.
type cpuTimes struct{ busy, total int64 }

// readCPUTimes reads the machine's CPU times: everything but idle and
// iowait is busy.
func readCPUTimes(t testing.TB) cpuTimes {
	t.Helper()
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		t.Fatalf("/proc/stat starts with %q, not the cpu line", line)
	}
	var out cpuTimes
	for i, f := range fields[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		out.total += n
		if i != 3 && i != 4 { // idle, iowait
			out.busy += n
		}
	}
	return out
}

// busySince is the share of the CPU time since before that was busy.
func (c cpuTimes) busySince(before cpuTimes) float64 {
	if c.total == before.total {
		return 0
	}
	return float64(c.busy-before.busy) / float64(c.total-before.total)
}

// mib prints bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// TestDescendantsAndProcField checks the sampler's two readers on this
// process: its child is found, its memory read.
func TestDescendantsAndProcField(t *testing.T) {
	if procField("/proc/self/status", "VmHWM:") <= 0 {
		t.Fatal("no VmHWM for this process")
	}
	if procField("/proc/self/status", "NoSuchField:") != 0 {
		t.Fatal("a missing field read as non-zero")
	}
	sampled := samplePeakMemory(t, os.Getpid())
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	cmd := sleep.Process.Pid
	time.Sleep(3 * memorySampleInterval)
	found := false
	for _, p := range descendants(os.Getpid()) {
		found = found || p == cmd
	}
	if !found {
		t.Errorf("the child %d is not among this process's descendants", cmd)
	}
	if peak := sampled(); peak.run <= 0 || peak.largest <= 0 || peak.operator <= 0 {
		t.Errorf("peaks %+v: the child's memory was not sampled", peak)
	}
}

// TestBusySince checks the CPU share on made-up times and on this machine
// kept busy.
func TestBusySince(t *testing.T) {
	if got := (cpuTimes{busy: 150, total: 400}).busySince(cpuTimes{busy: 50, total: 200}); got != 0.5 {
		t.Errorf("100 busy ticks of 200: %v, want 0.5", got)
	}
	before := readCPUTimes(t)
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
	}
	if got := readCPUTimes(t).busySince(before); got <= 0 || got > 1 {
		t.Errorf("a busy loop of 200 ms: %v busy, want in (0, 1]", got)
	}
}
