// Package procfs reads what kao needs of Linux's /proc: a process's state,
// parent, process group and start time, and the list of processes. The
// runner uses it to wait for ansible-playbook's whole process group to end;
// the test harnesses to find and stop what they started.
package procfs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stat is the part of /proc/PID/stat kao uses.
type Stat struct {
	// State is the one-letter state: R, S, D, Z (zombie), X (dead)...
	State string
	// PPID is the parent's pid.
	PPID int
	// PGRP is the process group.
	PGRP int
	// Start is the start time in clock ticks since boot: with the pid, it
	// tells a process from a later one that reuses its pid.
	Start uint64
}

// Running says whether the process still runs: a zombie has exited and
// only waits for its parent to collect its status.
func (s Stat) Running() bool { return s.State != "Z" && s.State != "X" }

// ReadStat reads /proc/PID/stat. The command name (field 2) may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func ReadStat(pid int) (Stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	return parseStat(pid, string(data))
}

func parseStat(pid int, s string) (Stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[2] field 5 (pgrp),
	// f[19] field 22 (starttime).
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("malformed /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, fmt.Errorf("parsing ppid in /proc/%d/stat: %w", pid, err)
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return Stat{}, fmt.Errorf("parsing pgrp in /proc/%d/stat: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("parsing start time in /proc/%d/stat: %w", pid, err)
	}
	return Stat{State: f[0], PPID: ppid, PGRP: pgrp, Start: start}, nil
}

// PIDs lists the processes: the numeric entries of /proc.
func PIDs() ([]int, error) {
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

// KillUntilGone sends SIGKILL to the processes list returns, again and
// again, until none of them runs or timeout passes. It never signals the
// calling process. Zombies do not count: their parents reap them.
func KillUntilGone(ctx context.Context, timeout time.Duration, list func() ([]int, error)) error {
	deadline := time.Now().Add(timeout)
	self := os.Getpid()
	for {
		pids, err := list()
		if err != nil {
			return err
		}
		var live []int
		for _, pid := range pids {
			if st, err := ReadStat(pid); err == nil && pid != self && st.Running() {
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
