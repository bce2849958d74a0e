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

	"github.com/kao-io/kao/internal/procfs"
)

// processID identifies a process across pid reuse: its pid and its start time
// in clock ticks since boot (field 22 of /proc/PID/stat).
type processID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// identify returns the processID of a running process.
func identify(pid int) (processID, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return processID{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	return processID{PID: pid, Start: st.Start}, nil
}

// alive reports whether the process still exists, is the same process (same
// start time) and is not a zombie.
func (p processID) alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, err := procfs.ReadStat(p.PID)
	if err != nil {
		return false
	}
	return st.Start == p.Start && st.Running()
}

// childrenOf returns the live children of p.
func childrenOf(p processID) ([]int, error) {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil, err
	}
	var children []int
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err != nil || st.PPID != p.PID || st.State == "Z" {
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
	pids, err := procfs.PIDs()
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
