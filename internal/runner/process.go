package runner

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/apenella/go-ansible/v2/pkg/execute"
	gaexec "github.com/apenella/go-ansible/v2/pkg/execute/exec"

	"github.com/kao-io/kao/internal/procfs"
)

// killGrace is how long ansible-playbook's process group gets between SIGTERM
// and SIGKILL when a run is cancelled: long enough for Ansible to stop its
// workers, short enough that a cancel is prompt.
const killGrace = 5 * time.Second

// groupExecutable starts ansible-playbook in its own process group with a
// scrubbed environment and no stdin, and kills the whole group on cancel.
//
// go-ansible v2.3.0's DefaultExecute overwrites Env (with the controller's
// whole environment), Stdin (os.Stdin) and Dir of any *exec.Cmd it gets back;
// returning our own Cmder type keeps the settings made here. Without a process
// group, cancelling kills only ansible-playbook and leaves its workers and
// their children running as orphans.
type groupExecutable struct {
	env []string
	dir string

	mu   sync.Mutex
	last *groupCmd
}

var _ execute.Executabler = (*groupExecutable)(nil)

// Command implements execute.Executabler.
func (g *groupExecutable) Command(name string, arg ...string) gaexec.Cmder {
	return g.CommandContext(context.Background(), name, arg...)
}

// CommandContext implements execute.Executabler.
func (g *groupExecutable) CommandContext(ctx context.Context, name string, arg ...string) gaexec.Cmder {
	c := exec.CommandContext(ctx, name, arg...)
	c.Env = g.env
	c.Dir = g.dir
	c.Stdin = nil // /dev/null: ansible must never wait for a prompt
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	gc := &groupCmd{Cmd: c}
	c.Cancel = gc.terminate
	// After the group is signalled, stop waiting for pipes held open by
	// anything that escaped it.
	c.WaitDelay = killGrace + 2*time.Second
	g.mu.Lock()
	g.last = gc
	g.mu.Unlock()
	return gc
}

// lastCmd returns the most recently created command, for its exit status.
func (g *groupExecutable) lastCmd() *groupCmd {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last
}

// groupCmd is an *exec.Cmd whose whole process group is signalled on cancel
// and killed once the leader exits.
type groupCmd struct {
	*exec.Cmd

	once     sync.Once
	exitCode int
	waitErr  error
}

// terminate sends SIGTERM to the process group and SIGKILL after killGrace.
func (c *groupCmd) terminate() error {
	if c.Process == nil {
		return nil
	}
	pgid := c.Process.Pid
	err := syscall.Kill(-pgid, syscall.SIGTERM)
	time.AfterFunc(killGrace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Wait waits for ansible-playbook, then kills whatever is left of its process
// group so no worker outlives the run. It returns *exec.ExitError or nil:
// go-ansible type-asserts the error to *exec.ExitError.
func (c *groupCmd) Wait() error {
	c.once.Do(func() {
		err := c.Cmd.Wait()
		if c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			awaitGroupGone(c.Process.Pid, killGrace)
		}
		c.exitCode = -1
		if c.ProcessState != nil {
			c.exitCode = c.ProcessState.ExitCode()
		}
		var exitErr *exec.ExitError
		switch {
		case err == nil, errors.As(err, &exitErr):
			c.waitErr = err
		case errors.Is(err, exec.ErrWaitDelay) && c.ProcessState != nil && c.ProcessState.Success():
			// ansible-playbook succeeded but a descendant kept a pipe open
			// until WaitDelay; the group kill above has dealt with it.
			c.waitErr = nil
		case c.ProcessState != nil:
			c.waitErr = &exec.ExitError{ProcessState: c.ProcessState}
		default:
			// Never started or waited twice: report a failure without a state.
			c.waitErr = &exec.ExitError{ProcessState: &os.ProcessState{}}
		}
	})
	return c.waitErr
}

// awaitGroupGone waits, at most limit, until no process of group pgid is
// still running. SIGKILL is delivered asynchronously: on a loaded machine the
// killed workers can stay alive for a moment after kill returns, and a run
// must not be reported ended while they still act on hosts. Zombies count as
// gone; they no longer run and their reaping is up to their new parent.
func awaitGroupGone(pgid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for liveGroupMembers(pgid) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// liveGroupMembers counts the processes of group pgid that still run.
func liveGroupMembers(pgid int) int {
	pids, err := procfs.PIDs()
	if err != nil {
		return 0
	}
	live := 0
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid); err == nil && st.PGRP == pgid && st.Running() {
			live++
		}
	}
	return live
}
