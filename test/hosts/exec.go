package hosts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// requiredTools are the programs the harness shells out to.
var requiredTools = []string{"systemd-nspawn", "debootstrap", "ip", "ssh", "ssh-keygen"}

// toolPackages names the Debian/Ubuntu package of each required tool.
var toolPackages = map[string]string{
	"systemd-nspawn": "systemd-container",
	"debootstrap":    "debootstrap",
	"ip":             "iproute2",
	"ssh":            "openssh-client",
	"ssh-keygen":     "openssh-client",
}

// sbinDirs are searched after $PATH: non-login root shells and CI runners often
// lack them.
var sbinDirs = []string{"/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"}

// lookTool finds a program in $PATH or the usual system directories.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in $PATH or %s", name, strings.Join(sbinDirs, ", "))
}

// MissingTools returns the required programs that cannot be found.
func MissingTools() []string {
	var missing []string
	for _, t := range requiredTools {
		if _, err := lookTool(t); err != nil {
			missing = append(missing, t)
		}
	}
	return missing
}

// packagesFor returns the Debian/Ubuntu packages that provide tools, each once.
func packagesFor(tools []string) []string {
	var pkgs []string
	seen := map[string]bool{}
	for _, t := range tools {
		p := toolPackages[t]
		if p == "" {
			p = t
		}
		if !seen[p] {
			seen[p] = true
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// toolEnv is the environment for child processes: the caller's, with the
// system directories appended to PATH so that tools such as debootstrap find
// their own helpers.
func toolEnv() []string {
	env := os.Environ()
	path := os.Getenv("PATH")
	for _, dir := range sbinDirs {
		if !strings.Contains(":"+path+":", ":"+dir+":") {
			path = strings.TrimPrefix(path+":"+dir, ":")
		}
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PATH="+path)
}

// command builds an exec.Cmd for a tool, resolved with lookTool.
func command(ctx context.Context, name string, args ...string) (*exec.Cmd, error) {
	path, err := lookTool(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = toolEnv()
	return cmd, nil
}

// run runs a tool. On failure the error names the command and carries its
// standard error.
func run(ctx context.Context, name string, args ...string) error {
	cmd, err := command(ctx, name, args...)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailFile returns the last n lines of a file, or a note saying why not.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return tail(stripANSI(string(data)), n)
}

// stripANSI removes terminal escape sequences (systemd colours its console).
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
