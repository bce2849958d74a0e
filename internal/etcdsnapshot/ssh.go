package etcdsnapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Errors an SSH target returns, for callers that explain them.
var (
	// ErrHostKey means the backup host's key is not in known_hosts or does not match it.
	ErrHostKey = errors.New("host key verification failed")
	// ErrAuth means the backup host refused the private key.
	ErrAuth = errors.New("the backup host refused the private key")
	// ErrUnreachable means no SSH connection could be made.
	ErrUnreachable = errors.New("the backup host is unreachable")
	// ErrChecksum means the copy on the backup host differs from the local file.
	ErrChecksum = errors.New("the copy on the backup host has a different sha256")
)

// Validation of everything that reaches a command line, again: the API
// validates these fields, and ssh must never see an option where it expects
// a host, user or path.
var (
	sshUser      = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	sshDirectory = regexp.MustCompile(`^/[-_./a-zA-Z0-9]*$`)
	dnsName      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// FileName is the pattern of the snapshot file names kao writes.
	FileName = regexp.MustCompile(`^[a-z0-9][-a-zA-Z0-9.]*\.db$`)
)

const (
	// sshConnectTimeout bounds the TCP connect and SSH handshake.
	sshConnectTimeout = 10 * time.Second
	// sshAliveInterval and sshAliveCount end a copy to a host that stops
	// answering (about a minute) instead of letting it hang.
	sshAliveInterval = 15 * time.Second
	sshAliveCount    = 4
	// sshWaitDelay is how long a killed ssh may take to release its pipes.
	sshWaitDelay = 5 * time.Second
)

// SSHTarget is a directory on a backup host, reached with the system's ssh
// and scp with the host key pinned. Every field comes from validated typed
// API fields or Secrets; none is ever passed as an -o option.
//
// A snapshot Job's request carries it as JSON, without TempDir.
type SSHTarget struct {
	// Address is the host's IP address or DNS name.
	Address string `json:"address"`
	// Port is the SSH port.
	Port int `json:"port"`
	// User is the SSH user.
	User string `json:"user"`
	// Directory is the absolute directory snapshots go to.
	Directory string `json:"directory"`
	// PrivateKey is an unencrypted OpenSSH private key.
	PrivateKey []byte `json:"privateKey"`
	// KnownHosts is a known_hosts file that lists the host's key.
	KnownHosts []byte `json:"knownHosts"`
	// TempDir is where each call writes the key and known_hosts, in a
	// private directory removed when the call returns; os.TempDir() when empty.
	TempDir string `json:"-"`
}

// Validate checks the fields that reach a command line.
func (t *SSHTarget) Validate() error {
	if net.ParseIP(t.Address) == nil && !dnsName.MatchString(t.Address) {
		return fmt.Errorf("address %q is not an IP address or a lower-case DNS name", t.Address)
	}
	if t.Port < 1 || t.Port > 65535 {
		return fmt.Errorf("port %d is out of range", t.Port)
	}
	if !sshUser.MatchString(t.User) {
		return fmt.Errorf("user %q is not a valid user name", t.User)
	}
	if !sshDirectory.MatchString(t.Directory) {
		return fmt.Errorf("directory %q is not an absolute path of letters, digits and -_./", t.Directory)
	}
	return nil
}

// Location is host:path of a file in the target directory, as status shows it.
func (t *SSHTarget) Location(name string) string {
	host := t.Address
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return host + ":" + path.Join(t.Directory, name)
}

// Upload copies the local file to name in the target directory, verifies
// the remote copy's sha256 and only then gives it its name: a copy cut
// short or damaged never appears as a snapshot.
func (t *SSHTarget) Upload(ctx context.Context, local, name, sha256 string) error {
	if !FileName.MatchString(name) {
		return fmt.Errorf("%q is not a snapshot file name", name)
	}
	s, err := t.open()
	if err != nil {
		return err
	}
	defer s.close()
	partial := path.Join(t.Directory, "."+name+".partial")
	final := path.Join(t.Directory, name)
	if _, err := s.ssh(ctx, "creating the directory", "mkdir", "-p", "-m", "0700", "--", t.Directory); err != nil {
		return err
	}
	dest := t.User + "@" + scpHost(t.Address) + ":" + partial
	if _, err := s.run(ctx, "copying the snapshot", "scp", append(s.options("-P"), "-q", "--", local, dest)...); err != nil {
		return err
	}
	out, err := s.ssh(ctx, "checking the copy's sha256", "sha256sum", "--", partial)
	if err != nil {
		return err
	}
	got, _, _ := strings.Cut(strings.TrimSpace(out), " ")
	if got != sha256 {
		_, _ = s.ssh(ctx, "removing the damaged copy", "rm", "-f", "--", partial)
		return fmt.Errorf("%w: %s holds %q, want %s", ErrChecksum, t.Location("."+name+".partial"), truncate(got, 64), sha256)
	}
	if _, err := s.ssh(ctx, "naming the copy", "mv", "-f", "--", partial, final); err != nil {
		return err
	}
	return nil
}

// Remove deletes snapshot files from the target directory; missing files are not an error.
func (t *SSHTarget) Remove(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	args := []string{"rm", "-f", "--"}
	for _, n := range names {
		if !FileName.MatchString(n) {
			return fmt.Errorf("%q is not a snapshot file name", n)
		}
		args = append(args, path.Join(t.Directory, n))
	}
	s, err := t.open()
	if err != nil {
		return err
	}
	defer s.close()
	_, err = s.ssh(ctx, "removing old snapshots", args...)
	return err
}

// session is the private directory holding one call's key and known_hosts.
type session struct {
	t   *SSHTarget
	dir string
}

func (t *SSHTarget) open() (*session, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(t.TempDir, "kao-ssh-") // 0700
	if err != nil {
		return nil, fmt.Errorf("making a directory for the SSH key: %w", err)
	}
	s := &session{t: t, dir: dir}
	key := t.PrivateKey
	if !bytes.HasSuffix(key, []byte("\n")) { // OpenSSH rejects a key without its final newline
		key = append(append([]byte(nil), key...), '\n')
	}
	for name, data := range map[string][]byte{"id": key, "known_hosts": t.KnownHosts} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			s.close()
			return nil, fmt.Errorf("writing the SSH %s file: %w", name, err)
		}
	}
	return s, nil
}

// close removes the key and known_hosts.
func (s *session) close() { _ = os.RemoveAll(s.dir) }

// options are the options ssh and scp share; portFlag is -p for ssh, -P for scp.
func (s *session) options(portFlag string) []string {
	return []string{
		"-F", "/dev/null", // no user or system configuration
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + filepath.Join(s.dir, "known_hosts"),
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "UpdateHostKeys=no",
		"-o", "IdentitiesOnly=yes",
		"-o", "IdentityAgent=none",
		"-o", "PasswordAuthentication=no",
		"-o", "KbdInteractiveAuthentication=no",
		"-o", "ConnectTimeout=" + strconv.Itoa(int(sshConnectTimeout.Seconds())),
		"-o", "ServerAliveInterval=" + strconv.Itoa(int(sshAliveInterval.Seconds())),
		"-o", "ServerAliveCountMax=" + strconv.Itoa(sshAliveCount),
		"-o", "LogLevel=ERROR",
		"-i", filepath.Join(s.dir, "id"),
		portFlag, strconv.Itoa(s.t.Port),
	}
}

// ssh runs one remote command; every argument is quoted for the remote shell.
func (s *session) ssh(ctx context.Context, op string, remote ...string) (string, error) {
	quoted := make([]string, len(remote))
	for i, a := range remote {
		quoted[i] = shellQuote(a)
	}
	args := append(s.options("-p"), "-l", s.t.User, "--", s.t.Address, strings.Join(quoted, " "))
	return s.run(ctx, op, "ssh", args...)
}

// run runs ssh or scp in its own process group (scp starts ssh: a cancel
// kills both) and turns a failure into an error that says what went wrong.
func (s *session) run(ctx context.Context, op, name string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.dir, "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = sshWaitDelay
	err := cmd.Run()
	if err == nil {
		return stdout.String(), nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("%s on %s: %w", op, s.hostPort(), ctx.Err())
	}
	msg := strings.ReplaceAll(stderr.String(), s.dir, "<tmp>")
	line := lastLine(msg, 300)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return "", fmt.Errorf("%s on %s: running %s: %w", op, s.hostPort(), name, err)
	}
	var kind error
	switch {
	case strings.Contains(msg, "Host key verification failed"), strings.Contains(msg, "REMOTE HOST IDENTIFICATION HAS CHANGED"):
		kind = ErrHostKey
	case strings.Contains(msg, "Permission denied (publickey"), strings.Contains(msg, "Too many authentication failures"):
		kind = ErrAuth
	case strings.Contains(msg, "Connection refused"), strings.Contains(msg, "Connection timed out"),
		strings.Contains(msg, "No route to host"), strings.Contains(msg, "Could not resolve hostname"),
		strings.Contains(msg, "Network is unreachable"), strings.Contains(msg, "Connection closed by"),
		strings.Contains(msg, "Connection reset"), strings.Contains(msg, "Timeout, server"):
		kind = ErrUnreachable
	}
	if kind != nil {
		return "", fmt.Errorf("%s on %s: %w (%s)", op, s.hostPort(), kind, line)
	}
	return "", fmt.Errorf("%s on %s: %s exited with status %d: %s", op, s.hostPort(), name, exit.ExitCode(), line)
}

func (s *session) hostPort() string {
	return net.JoinHostPort(s.t.Address, strconv.Itoa(s.t.Port))
}

// scpHost brackets an IPv6 address for scp's host:path syntax.
func scpHost(addr string) string {
	if strings.Contains(addr, ":") {
		return "[" + addr + "]"
	}
	return addr
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
