package hosts

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kao-io/kao/internal/machine"
	"github.com/kao-io/kao/internal/procfs"
)

// hostKeyTypes are the SSH host key types generated for every host; the base's
// sshd drop-in lists exactly these.
var hostKeyTypes = []string{"ed25519", "ecdsa"}

// cgroupWrapper moves the shell into each cgroup given before "--" (by
// writing to cgroup.procs) and then execs the command after "--", so that
// systemd-nspawn starts inside the host's own cgroups.
const cgroupWrapper = `while [ "$1" != "--" ]; do echo $$ > "$1" || exit 1; shift; done; shift; exec "$@"`

// prepareUpper writes a host's identity into its overlay upper directory
// before its first boot: hostname, /etc/hosts, machine-id, SSH host keys and
// root's authorized_keys.
func prepareUpper(ctx context.Context, base, upper string, h hostState, all []hostState, authorizedKey string) error {
	if err := os.MkdirAll(upper, 0o755); err != nil {
		return fmt.Errorf("creating upper dir: %w", err)
	}
	for _, rel := range []string{"etc/ssh", "root"} {
		if err := mkdirLike(base, upper, rel); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(upper, "root/.ssh"), 0o700); err != nil {
		return fmt.Errorf("creating root's .ssh: %w", err)
	}
	machineID, err := randomHex(16)
	if err != nil {
		return err
	}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n\n")
	for _, o := range all {
		fmt.Fprintf(&hosts, "%s\t%s\n", o.Address, o.Name)
	}
	files := []struct {
		rel, content string
		mode         os.FileMode
	}{
		{"etc/hostname", h.Name + "\n", 0o644},
		{"etc/hosts", hosts.String(), 0o644},
		{"etc/machine-id", machineID + "\n", 0o444},
		{"root/.ssh/authorized_keys", authorizedKey + "\n", 0o600},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(upper, f.rel), f.content, f.mode); err != nil {
			return err
		}
	}
	for _, t := range hostKeyTypes {
		path := filepath.Join(upper, "etc/ssh", "ssh_host_"+t+"_key")
		if err := sshKeygen(ctx, t, path, "root@"+h.Name); err != nil {
			return err
		}
	}
	return nil
}

// mkdirLike creates rel and its parents in upper with the mode and ownership
// they have in base. Overlayfs shows a directory with the upper copy's
// attributes, so a plain MkdirAll would, for example, open up /root.
func mkdirLike(base, upper, rel string) error {
	parts := strings.Split(filepath.Clean(rel), "/")
	for i := range parts {
		sub := filepath.Join(parts[:i+1]...)
		dst := filepath.Join(upper, sub)
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		mode, uid, gid := os.FileMode(0o755), 0, 0
		if fi, err := os.Lstat(filepath.Join(base, sub)); err == nil && fi.IsDir() {
			mode = fi.Mode().Perm()
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				uid, gid = int(st.Uid), int(st.Gid)
			}
		}
		if err := os.Mkdir(dst, mode); err != nil {
			return fmt.Errorf("creating %s: %w", dst, err)
		}
		if err := os.Chmod(dst, mode); err != nil {
			return fmt.Errorf("creating %s: %w", dst, err)
		}
		if err := os.Lchown(dst, uid, gid); err != nil {
			return fmt.Errorf("creating %s: %w", dst, err)
		}
	}
	return nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// removeStaleWorkdirs removes overlay work directories that systemd-nspawn
// creates next to the upper directory (".#upper<random>") and leaves behind
// when it is killed. Call only while the host is powered off.
func removeStaleWorkdirs(hostDir string) error {
	stale, err := filepath.Glob(filepath.Join(hostDir, ".#upper*"))
	if err != nil {
		return fmt.Errorf("listing stale overlay work dirs: %w", err)
	}
	for _, s := range stale {
		if err := removeTree(s); err != nil {
			return err
		}
	}
	return nil
}

// nspawnArgs returns systemd-nspawn's arguments for a host.
func nspawnArgs(base, upper string, h *hostState) []string {
	return []string{
		"--quiet",
		"--directory=" + base,
		"--overlay=" + base + ":" + upper + ":/",
		"--boot",
		// PID 1 of the machine may not be systemd: no machined, no system bus.
		"--register=no",
		"--keep-unit",
		"--network-namespace-path=" + machine.NetnsPath(h.Netns),
		"--machine=" + h.Machine,
		"--hostname=" + h.Name,
		"--console=read-only",
		"--link-journal=no",
		"--resolv-conf=off",
		"--timezone=off",
	}
}

// powerOn starts systemd-nspawn for a host, detached from the caller (its own
// session, output to the host's console log), inside the host's own cgroups,
// and records its process. It does not wait for the boot to finish.
func powerOn(st *instanceState, dir string, h *hostState, save func() error) error {
	if err := removeStaleWorkdirs(hostDir(dir, h.Name)); err != nil {
		return err
	}
	cgroups, err := hostCgroups(h.Machine)
	if err != nil {
		return err
	}
	h.Cgroups = cgroups
	if err := save(); err != nil {
		return err
	}
	if err := createCgroups(cgroups); err != nil {
		return err
	}
	nspawn, err := lookTool("systemd-nspawn")
	if err != nil {
		return err
	}
	args := []string{"-c", cgroupWrapper, "sh"}
	for _, cg := range cgroups {
		args = append(args, filepath.Join(cg, "cgroup.procs"))
	}
	args = append(args, "--", nspawn)
	args = append(args, nspawnArgs(st.Base, upperDir(dir, h.Name), h)...)

	logFile, err := os.OpenFile(consoleLog(dir, h.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening console log: %w", err)
	}
	// nspawn gets its own descriptor of the log; ours holds no buffered data,
	// so a failing Close loses nothing.
	defer func() { _ = logFile.Close() }()
	if _, err := fmt.Fprintf(logFile, "\n==== kao test hosts: power on %s at %s ====\n", h.Name, time.Now().UTC().Format(time.RFC3339)); err != nil {
		return fmt.Errorf("writing console log of %s: %w", h.Name, err)
	}

	cmd := exec.Command("/bin/sh", args...)
	cmd.Env = nspawnEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting systemd-nspawn for %s: %w", h.Name, err)
	}
	id, err := identify(cmd.Process.Pid)
	// Reap the process when it exits, in case the caller lives that long (tests).
	go func() { _ = cmd.Wait() }()
	if err != nil {
		return fmt.Errorf("starting systemd-nspawn for %s: %w", h.Name, err)
	}
	h.Nspawn = &id
	return save()
}

// nspawnEnv is toolEnv without variables that would make nspawn talk to a
// service manager on the machine.
func nspawnEnv() []string {
	var env []string
	for _, kv := range toolEnv() {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "LISTEN_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// powerOff pulls the plug: it SIGKILLs the container's init (the kernel then
// kills everything in the container's pid namespace), waits for nspawn to exit
// (it unmounts the overlay), and then kills anything still in the host's
// cgroups or network namespace. Powering off a host that is off is a no-op.
func powerOff(ctx context.Context, dir string, h *hostState) error {
	if h.Nspawn != nil && h.Nspawn.alive() {
		children, err := childrenOf(*h.Nspawn)
		if err != nil {
			return fmt.Errorf("powering off %s: %w", h.Name, err)
		}
		for _, c := range children {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
		if !waitExit(ctx, *h.Nspawn, 15*time.Second) {
			_ = syscall.Kill(h.Nspawn.PID, syscall.SIGKILL)
			waitExit(ctx, *h.Nspawn, 5*time.Second)
		}
	}
	err := procfs.KillUntilGone(ctx, 15*time.Second, func() ([]int, error) {
		inCgroups, err := pidsInCgroups(h.Cgroups)
		if err != nil {
			return nil, err
		}
		inNetns, err := pidsInNetns(machine.NetnsPath(h.Netns))
		if err != nil {
			return nil, err
		}
		return append(inCgroups, inNetns...), nil
	})
	if err != nil {
		return fmt.Errorf("powering off %s: %w", h.Name, err)
	}
	h.Nspawn = nil
	return removeStaleWorkdirs(hostDir(dir, h.Name))
}

// poweredOn reports whether the host's nspawn process is alive.
func (h *hostState) poweredOn() bool {
	return h.Nspawn != nil && h.Nspawn.alive()
}

// ErrBootFailed marks a boot that ended badly (degraded, or the host powered
// off); waiting longer would not help.
var ErrBootFailed = errors.New("boot failed")
