package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kao-io/kao/internal/machine"
	"github.com/kao-io/kao/internal/procfs"
)

// processID identifies a process across pid reuse: its pid and its start
// time in clock ticks since boot (field 22 of /proc/PID/stat).
type processID struct {
	Name  string `json:"name"`
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// alive reports whether the process still runs and is the one recorded.
func (p processID) alive() bool {
	if p.PID <= 0 {
		return false
	}
	st, err := procfs.ReadStat(p.PID)
	return err == nil && st.Start == p.Start && st.Running()
}

func identify(name string, pid int) (processID, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return processID{}, fmt.Errorf("reading process %d (%s): %w", pid, name, err)
	}
	return processID{Name: name, PID: pid, Start: st.Start}, nil
}

// allPIDs lists the processes; none when /proc cannot be read.
func allPIDs() []int {
	pids, _ := procfs.PIDs()
	return pids
}

// shimsOf returns the containerd shims started by the containerd listening
// on socket: their command line names it (-address SOCKET). Shims outlive
// containerd, so teardown finds them this way, not as its children.
func shimsOf(socket string) []int {
	var out []int
	for _, pid := range allPIDs() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(string(args[0])), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if string(args[i]) == "-address" && string(args[i+1]) == socket {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// descendants returns roots and every process below them.
func descendants(roots []int) []int {
	children := map[int][]int{}
	for _, pid := range allPIDs() {
		if st, err := procfs.ReadStat(pid); err == nil {
			children[st.PPID] = append(children[st.PPID], pid)
		}
	}
	seen := map[int]bool{}
	var walk func(int)
	walk = func(pid int) {
		if seen[pid] {
			return
		}
		seen[pid] = true
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// stopProcess sends SIGTERM, waits up to grace, then SIGKILLs.
func stopProcess(ctx context.Context, p processID, grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for p.alive() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return procfs.KillUntilGone(ctx, 10*time.Second, func() ([]int, error) {
		if p.alive() {
			return []int{p.PID}, nil
		}
		return nil, nil
	})
}

// startInNetns starts a program in the network namespace netns (through
// nsenter, which execs it: the pid is the program's), its output appended
// to logPath. The process gets its own process group, so a terminal's ^C
// reaches the test, whose cleanup stops it, and dies with the test process
// (SIGKILL on parent death) if the test process dies first.
func startInNetns(netns, logPath string, argv ...string) (*exec.Cmd, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	args := append([]string{"--net=" + machine.NetnsPath(netns), "--"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	go func() { _ = cmd.Wait() }()
	return cmd, nil
}

// run runs a command and returns its standard output; the error carries
// its standard error.
func run(ctx context.Context, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "(no log)"
		}
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
