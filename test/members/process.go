package members

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a process gets to exit after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// process is a program Start runs.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // its exit status, set before done is closed
}

// startProcess starts bin with args in a process group of its own (so that
// stop also reaches anything it forks), stdout and stderr in logPath, with
// this process's environment and env added to it.
func startProcess(name, logPath, bin string, env []string, args ...string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// If the test binary dies without running its cleanups (a test
		// timeout), the kernel ends the process rather than leaving it bound
		// to its port.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr is how the process ended; nil while it runs or after a clean exit.
func (p *process) exitErr() error {
	if !p.exited() {
		return nil
	}
	return p.err
}

// stopAll ends every process at once: SIGTERM to all, then SIGKILL to those
// still running after stopGrace. Twenty members are forty processes: one
// after another, each API server's graceful shutdown added up to minutes.
func stopAll(procs []*process) {
	for _, p := range procs {
		if !p.exited() {
			if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
				_ = p.cmd.Process.Kill()
			}
		}
	}
	deadline := time.After(stopGrace)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			// Every later process gets its SIGKILL at once too.
			deadline = closedChan
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
}

// closedChan is a channel a select never waits on.
var closedChan = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// logTail returns the last n lines of the process's log.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
