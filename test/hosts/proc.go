package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// processID identifies a process across pid reuse: its pid and its start time
// in clock ticks since boot (field 22 of /proc/PID/stat).
type processID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// procStat is the part of /proc/PID/stat the harness uses.
type procStat struct {
	state string
	ppid  int
	start uint64
}

// readProcStat parses /proc/PID/stat. The command name (field 2) may contain
// spaces and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procStat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("parsing ppid in /proc/%d/stat: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parsing start time in /proc/%d/stat: %w", pid, err)
	}
	return procStat{state: f[0], ppid: ppid, start: start}, nil
}

// identify returns the processID of a running process.
func identify(pid int) (processID, error) {
	st, err := readProcStat(pid)
	if err != nil {
		return processID{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	return processID{PID: pid, Start: st.start}, nil
}

// alive reports whether the process still exists, is the same process (same
// start time) and is not a zombie.
func (p processID) alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, err := readProcStat(p.PID)
	if err != nil {
		return false
	}
	return st.start == p.Start && st.state != "Z" && st.state != "X"
}

// allPIDs lists the numeric entries of /proc.
func allPIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing /proc: %w", err)
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// childrenOf returns the live children of p.
func childrenOf(p processID) ([]int, error) {
	pids, err := allPIDs()
	if err != nil {
		return nil, err
	}
	var children []int
	for _, pid := range pids {
		st, err := readProcStat(pid)
		if err != nil || st.ppid != p.PID || st.state == "Z" {
			continue
		}
		children = append(children, pid)
	}
	return children, nil
}

// nsID is the identity of a namespace file: device and inode.
type nsID struct {
	dev, ino uint64
}

func statNS(path string) (nsID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{dev: uint64(st.Dev), ino: st.Ino}, nil //nolint:unconvert // needed on linux/mips and linux/mipsle (Stat_t.Dev is uint32 there)
}

// pidsInNetns returns the processes whose network namespace is the one bound
// at nsPath. A missing nsPath yields no processes.
func pidsInNetns(nsPath string) ([]int, error) {
	want, err := statNS(nsPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", nsPath, err)
	}
	pids, err := allPIDs()
	if err != nil {
		return nil, err
	}
	var in []int
	for _, pid := range pids {
		got, err := statNS(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err == nil && got == want {
			in = append(in, pid)
		}
	}
	return in, nil
}

// pidsInCgroups returns the processes in the given cgroup directories and all
// their descendants. Missing directories are skipped.
func pidsInCgroups(dirs []string) ([]int, error) {
	seen := map[int]bool{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, err := os.ReadFile(path)
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing processes in cgroup %s: %w", dir, err)
		}
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids, nil
}

// killUntilGone sends SIGKILL to the processes that list returns, repeatedly,
// until list returns none or the timeout passes. It never signals the calling
// process. Zombies are left to their parents to reap and do not count.
func killUntilGone(ctx context.Context, timeout time.Duration, list func() ([]int, error)) error {
	deadline := time.Now().Add(timeout)
	self := os.Getpid()
	for {
		pids, err := list()
		if err != nil {
			return err
		}
		var live []int
		for _, pid := range pids {
			if pid == self {
				continue
			}
			if st, err := readProcStat(pid); err == nil && st.state != "Z" && st.state != "X" {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v survived SIGKILL for %s", live, timeout)
		}
		for _, pid := range live {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitExit waits until p is gone or the timeout passes; it reports whether p is
// gone.
func waitExit(ctx context.Context, p processID, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for p.alive() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return !p.alive()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}
