package hostcluster

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// stopGrace is how long a process gets to exit after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// group is a program running in a process group of its own, so that
// stopping it also stops what it started.
type group struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, set before done is closed
}

// startGroup starts cmd in its own process group. If the test binary dies
// without its cleanups, the kernel kills the process.
func startGroup(cmd *exec.Cmd) (*group, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &group{cmd: cmd, done: make(chan struct{})}
	go func() {
		g.err = cmd.Wait()
		close(g.done)
	}()
	return g, nil
}

// exited reports whether the process has ended.
func (g *group) exited() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after stopGrace.
func (g *group) stop() {
	if g.exited() {
		return
	}
	pgid := -g.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = g.cmd.Process.Kill()
	}
	select {
	case <-g.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-g.done
	}
}
