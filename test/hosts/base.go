package hosts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kao-io/kao/internal/machine"
)

const (
	baseSuite   = "bookworm"
	baseVariant = "minbase"
	// baseRecipe is part of the cache key: bump it whenever customizeBase
	// changes so that cached bases are rebuilt.
	baseRecipe = "1"
)

// basePackages are installed on top of debootstrap's minbase variant.
var basePackages = []string{
	"systemd", "systemd-sysv", "openssh-server", "python3", "dbus",
	"iproute2", "tar", "gzip", "ca-certificates", "procps",
}

// maskedUnits are units that must not run on an offline host in a container:
// apt's timers reach for the network and would change hosts under a test;
// e2scrub and fstrim act on block devices the hosts do not have.
var maskedUnits = []string{
	"apt-daily.timer",
	"apt-daily-upgrade.timer",
	"e2scrub_all.timer",
	"e2scrub_reap.service",
	"fstrim.timer",
}

// sshdDropIn configures sshd in the base: host keys are the two types the
// harness generates per host, and only public key authentication is offered.
const sshdDropIn = `# Written by kao's test host harness (test/hosts).
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
`

// BaseKey returns the cache key of the base root: a short hash of the sorted
// package list, the suite, the debootstrap variant and the recipe revision.
func BaseKey() string {
	pkgs := append([]string(nil), basePackages...)
	sort.Strings(pkgs)
	sum := sha256.Sum256([]byte(strings.Join(pkgs, ",") + "\n" + baseSuite + "\n" + baseVariant + "\nrecipe " + baseRecipe + "\n"))
	return hex.EncodeToString(sum[:])[:12]
}

// BasePath returns where the base root for cfg lives (or will live).
func BasePath(cfg Config) (string, error) {
	cfg, err := cfg.completeShared()
	if err != nil {
		return "", err
	}
	return filepath.Join(cfg.CacheDir, "base-"+BaseKey()), nil
}

// EnsureBase returns the path of the cached Debian base root, building it first
// if it is not cached. Concurrent callers wait for one build. The build happens
// in a temporary directory that is renamed into place only when complete, so a
// crash never leaves a half-built base that looks done; leftovers of crashed
// builds are removed by the next build. built reports whether this call built it.
func EnsureBase(ctx context.Context, cfg Config) (path string, built bool, err error) {
	cfg, err = cfg.completeShared()
	if err != nil {
		return "", false, err
	}
	final := filepath.Join(cfg.CacheDir, "base-"+BaseKey())
	if isDir(final) {
		return final, false, nil
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return "", false, fmt.Errorf("creating cache dir: %w", err)
	}
	lock, err := machine.WaitLock(ctx, final+".lock")
	if err != nil {
		return "", false, err
	}
	defer lock.Unlock()
	if isDir(final) { // built by someone else while we waited
		return final, false, nil
	}
	if err := buildBase(ctx, cfg, final, lock); err != nil {
		return "", false, err
	}
	return final, true, nil
}

// buildBase runs debootstrap into a temporary directory next to final,
// customizes the result and renames it to final. The caller holds lock.
func buildBase(ctx context.Context, cfg Config, final string, lock *machine.Lock) error {
	stale, err := filepath.Glob(final + ".tmp-*")
	if err != nil {
		return fmt.Errorf("listing stale base builds: %w", err)
	}
	for _, s := range stale {
		cfg.Logf("removing unfinished base build %s", s)
		if err := removeTree(s); err != nil {
			return err
		}
	}
	mirror := firstNonEmpty(cfg.Mirror, os.Getenv(EnvMirror))
	if mirror == "" {
		if mirror, err = aptMirror("/", baseSuite); err != nil {
			return err
		}
	}
	tmp := fmt.Sprintf("%s.tmp-%d", final, time.Now().UnixNano())
	logPath := final + ".log"
	cfg.Logf("building Debian %s base root in %s from %s (about 2 minutes; log %s)", baseSuite, final, mirror, logPath)
	start := time.Now()
	if err := debootstrap(ctx, tmp, mirror, logPath, lock); err != nil {
		if rmErr := removeTree(tmp); rmErr != nil {
			err = errors.Join(err, rmErr)
		}
		return err
	}
	if err := customizeBase(tmp, mirror); err != nil {
		return errors.Join(fmt.Errorf("customizing base root: %w", err), removeTree(tmp))
	}
	if err := os.Rename(tmp, final); err != nil {
		return errors.Join(fmt.Errorf("moving base root into place: %w", err), removeTree(tmp))
	}
	cfg.Logf("built base root %s in %s", final, time.Since(start).Round(time.Second))
	return nil
}

// debootstrap runs debootstrap with its output going to logPath.
//
// debootstrap and everything it starts inherit the build lock, so the lock
// stays held while any of them may still write to target, even if the caller
// dies. debootstrap runs in its own process group, killed as a whole when ctx
// is done, and gets SIGKILL if the caller dies.
func debootstrap(ctx context.Context, target, mirror, logPath string, lock *machine.Lock) error {
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating debootstrap log: %w", err)
	}
	// debootstrap writes the log through its own descriptors; ours holds no
	// buffered data, so a failing Close loses nothing.
	defer func() { _ = logFile.Close() }()
	args := []string{
		"--variant=" + baseVariant,
		"--include=" + strings.Join(basePackages, ","),
		baseSuite, target, mirror,
	}
	cmd, err := command(ctx, "debootstrap", args...)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{lock.File()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	// Pdeathsig fires when the forking thread exits: keep this goroutine on
	// its thread until debootstrap is done.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap %s: %w; last lines of %s:\n%s", strings.Join(args, " "), err, logPath, tailFile(logPath, 15))
	}
	return nil
}

// customizeBase turns a fresh debootstrap root into the shared base of all
// hosts: no per-machine identity (SSH host keys, machine-id, hostname), sshd
// enabled and key-only, container-hostile units masked, offline DNS.
func customizeBase(root, mirror string) error {
	keys, err := filepath.Glob(filepath.Join(root, "etc/ssh/ssh_host_*"))
	if err != nil {
		return fmt.Errorf("listing base host keys: %w", err)
	}
	for _, k := range keys {
		if err := os.Remove(k); err != nil {
			return fmt.Errorf("removing base host key: %w", err)
		}
	}
	for _, rel := range []string{"etc/hostname", "etc/resolv.conf"} {
		if err := os.Remove(filepath.Join(root, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", rel, err)
		}
	}
	files := []struct {
		rel     string
		content string
		mode    os.FileMode
	}{
		// Empty: each host gets its own in its upper directory.
		{"etc/machine-id", "", 0o444},
		{"etc/resolv.conf", "# Offline test host: no DNS servers.\n", 0o644},
		{"etc/ssh/sshd_config.d/kao-hosts.conf", sshdDropIn, 0o644},
		{"etc/kao-hosts-base", fmt.Sprintf("key=%s\nsuite=%s\nvariant=%s\npackages=%s\nmirror=%s\nbuilt=%s\n",
			BaseKey(), baseSuite, baseVariant, strings.Join(basePackages, ","), mirror, time.Now().UTC().Format(time.RFC3339)), 0o644},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(root, f.rel), f.content, f.mode); err != nil {
			return err
		}
	}
	if err := enableUnit(root, "ssh.service", "multi-user.target"); err != nil {
		return err
	}
	for _, u := range maskedUnits {
		if err := maskUnit(root, u); err != nil {
			return err
		}
	}
	return nil
}

// enableUnit links a unit into target.wants in /etc/systemd/system, as
// systemctl enable would.
func enableUnit(root, unit, target string) error {
	src := "/lib/systemd/system/" + unit
	if _, err := os.Stat(filepath.Join(root, src)); err != nil {
		return fmt.Errorf("enabling %s: %w", unit, err)
	}
	link := filepath.Join(root, "etc/systemd/system", target+".wants", unit)
	if _, err := os.Lstat(link); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("enabling %s: %w", unit, err)
	}
	if err := os.Symlink(src, link); err != nil {
		return fmt.Errorf("enabling %s: %w", unit, err)
	}
	return nil
}

// maskUnit links a unit to /dev/null in /etc/systemd/system and removes it
// from every .wants directory there, as systemctl disable + mask would.
func maskUnit(root, unit string) error {
	wants, err := filepath.Glob(filepath.Join(root, "etc/systemd/system/*.wants", unit))
	if err != nil {
		return fmt.Errorf("masking %s: %w", unit, err)
	}
	for _, w := range wants {
		if err := os.Remove(w); err != nil {
			return fmt.Errorf("masking %s: %w", unit, err)
		}
	}
	link := filepath.Join(root, "etc/systemd/system", unit)
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("masking %s: %w", unit, err)
	}
	if err := os.Symlink("/dev/null", link); err != nil {
		return fmt.Errorf("masking %s: %w", unit, err)
	}
	return nil
}

// writeFile writes a file atomically (temporary file and rename), creating
// parent directories.
func writeFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile's mode is subject to umask
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
