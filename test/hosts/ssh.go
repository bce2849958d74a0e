package hosts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sshKeygen generates a key pair without a passphrase at path and path.pub.
func sshKeygen(ctx context.Context, keyType, path, comment string) error {
	for _, p := range []string{path, path + ".pub"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing old key %s: %w", p, err)
		}
	}
	if err := run(ctx, "ssh-keygen", "-q", "-t", keyType, "-N", "", "-C", comment, "-f", path); err != nil {
		return fmt.Errorf("generating %s key: %w", keyType, err)
	}
	return nil
}

// readPublicKey returns "type base64" of an OpenSSH public key file, without
// its comment.
func readPublicKey(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading public key: %w", err)
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return "", fmt.Errorf("malformed public key %s", path)
	}
	return f[0] + " " + f[1], nil
}

// sshOptions are the options every harness ssh invocation uses: the user's
// own ssh configuration is ignored, host keys are checked strictly against
// the instance's known_hosts only, and only the harness key is offered.
func sshOptions(keyPath, knownHostsPath string) []string {
	return []string{
		"-F", "/dev/null",
		"-i", keyPath,
		"-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "UserKnownHostsFile=" + knownHostsPath,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "ConnectTimeout=5",
		"-o", "ServerAliveInterval=5",
		"-o", "ServerAliveCountMax=3",
		"-o", "LogLevel=ERROR",
	}
}

// runSSH runs a command on a host and returns its standard output. On failure
// the error carries the standard error.
func runSSH(ctx context.Context, keyPath, knownHostsPath string, h Host, script string) (string, error) {
	args := append(sshOptions(keyPath, knownHostsPath), "-p", strconv.Itoa(h.Port), h.User+"@"+h.Address, "--", script)
	cmd, err := command(ctx, "ssh", args...)
	if err != nil {
		return "", err
	}
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("ssh %s@%s %q: %w: %s", h.User, h.Address, script, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), err
}

// waitBooted waits until the host answers SSH (with its host key verified)
// and systemd reports the boot finished. It fails at once if the boot ends
// degraded (naming the failed units) or the host powers off.
func waitBooted(ctx context.Context, keyPath, knownHostsPath string, h Host, alive func() bool, console string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		if !alive() {
			return fmt.Errorf("%w: %s powered off while booting; console:\n%s", ErrBootFailed, h.Name, tailFile(console, 20))
		}
		out, err := runSSH(ctx, keyPath, knownHostsPath, h, "systemctl is-system-running --wait")
		switch state := strings.TrimSpace(out); state {
		case "running":
			return nil
		case "degraded", "maintenance", "stopping":
			// Best effort: the boot failed either way; the list only helps.
			failed, _ := runSSH(ctx, keyPath, knownHostsPath, h, "systemctl --failed --no-legend --plain --full")
			return fmt.Errorf("%w: %s booted %s; failed units:\n%s", ErrBootFailed, h.Name, state, strings.TrimSpace(failed))
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr == nil {
				lastErr = ctx.Err()
			}
			return fmt.Errorf("%s did not finish booting within %s (last error: %w); console:\n%s", h.Name, timeout, lastErr, tailFile(console, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitPort waits until a TCP connection to addr succeeds.
func waitPort(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var d net.Dialer
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := d.DialContext(attempt, "tcp", addr)
		cancel()
		if err == nil {
			return conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s unreachable after %s: %w", addr, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// File is the content of hosts.json in an instance's state directory:
// everything a program needs to reach the hosts.
type File struct {
	Instance   string `json:"instance"`
	Subnet     string `json:"subnet"`
	Gateway    string `json:"gateway"`
	PrivateKey string `json:"privateKey"`
	KnownHosts string `json:"knownHosts"`
	Inventory  string `json:"inventory"`
	SSHConfig  string `json:"sshConfig"`
	Hosts      []Host `json:"hosts"`
}

// writeAccessFiles writes known_hosts (each host's real host keys, read from
// its upper directory), hosts.json, an Ansible inventory and an ssh_config.
func writeAccessFiles(dir string, st *instanceState, hosts []Host) error {
	var kh strings.Builder
	for _, h := range st.Hosts {
		for _, t := range hostKeyTypes {
			key, err := readPublicKey(filepath.Join(upperDir(dir, h.Name), "etc/ssh", "ssh_host_"+t+"_key.pub"))
			if err != nil {
				return err
			}
			fmt.Fprintf(&kh, "%s,%s %s\n", h.Address, h.Name, key)
		}
	}
	if err := writeFile(filepath.Join(dir, knownHosts), kh.String(), 0o644); err != nil {
		return err
	}
	hf := File{
		Instance:   st.Name,
		Subnet:     st.Subnet,
		Gateway:    st.Gateway,
		PrivateKey: filepath.Join(dir, keyFile),
		KnownHosts: filepath.Join(dir, knownHosts),
		Inventory:  filepath.Join(dir, inventoryFile),
		SSHConfig:  filepath.Join(dir, sshConfigFile),
		Hosts:      hosts,
	}
	data, err := json.MarshalIndent(hf, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding hosts file: %w", err)
	}
	if err := writeFile(filepath.Join(dir, hostsFile), string(data)+"\n", 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, inventoryFile), inventory(hf), 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, sshConfigFile), sshConfig(hf), 0o644)
}

// inventory renders an Ansible INI inventory for the hosts.
func inventory(hf File) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kao test hosts, instance %s. Written by test/hosts; do not edit.\n[testhosts]\n", hf.Instance)
	for _, h := range hf.Hosts {
		fmt.Fprintf(&b, "%s ansible_host=%s ansible_port=%d\n", h.Name, h.Address, h.Port)
	}
	fmt.Fprintf(&b, "\n[testhosts:vars]\nansible_user=%s\nansible_ssh_private_key_file=%s\n", SSHUser, hf.PrivateKey)
	fmt.Fprintf(&b, "ansible_ssh_common_args='-o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes'\n", hf.KnownHosts)
	b.WriteString("ansible_python_interpreter=/usr/bin/python3\n")
	return b.String()
}

// sshConfig renders an ssh_config so that `ssh -F FILE node1` works.
func sshConfig(hf File) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kao test hosts, instance %s. Use: ssh -F %s HOST\n", hf.Instance, hf.SSHConfig)
	for _, h := range hf.Hosts {
		fmt.Fprintf(&b, "\nHost %s %s\n  HostName %s\n  Port %d\n  User %s\n", h.Name, h.Address, h.Address, h.Port, h.User)
	}
	fmt.Fprintf(&b, "\nHost *\n  IdentityFile %s\n  IdentitiesOnly yes\n  StrictHostKeyChecking yes\n  UserKnownHostsFile %s\n  GlobalKnownHostsFile /dev/null\n", hf.PrivateKey, hf.KnownHosts)
	return b.String()
}
