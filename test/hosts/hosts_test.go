package hosts_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kao-io/kao/test/hosts"
)

// TestHosts boots three hosts and checks what the e2e tests rely on: SSH with
// verified host keys, a closed air-gapped network, power off and on, network
// partitions, and a teardown that leaves nothing behind.
func TestHosts(t *testing.T) {
	c := hosts.Start(t, 3)
	t.Logf("booted 3 hosts from the cached base in %s", c.BootDuration().Round(10*time.Millisecond))
	ctx := t.Context()
	all := c.Hosts()
	if len(all) != 3 {
		t.Fatalf("got %d hosts, want 3", len(all))
	}

	t.Run("running with verified host keys", func(t *testing.T) {
		for _, h := range all {
			if h.Port != 22 || h.User != "root" {
				t.Errorf("%s: port %d user %q, want 22 root", h.Name, h.Port, h.User)
			}
			out := mustRun(ctx, t, c, h.Name, "systemctl is-system-running; hostname")
			if want := "running\n" + h.Name; out != want {
				t.Errorf("%s: got %q, want %q", h.Name, out, want)
			}
		}
	})

	t.Run("wrong or missing known_hosts entry is refused", func(t *testing.T) {
		h := all[0]
		dir := t.TempDir()
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "other")).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		other, err := os.ReadFile(filepath.Join(dir, "other.pub"))
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(other))
		wrong := filepath.Join(dir, "wrong_known_hosts")
		empty := filepath.Join(dir, "empty_known_hosts")
		writeFile(t, wrong, h.Address+" "+fields[0]+" "+fields[1]+"\n")
		writeFile(t, empty, "")
		for _, kh := range []string{wrong, empty} {
			out, err := sshWithKnownHosts(ctx, t, c, h.Name, kh, "true")
			if err == nil {
				t.Fatalf("ssh with %s succeeded, want host key verification failure", filepath.Base(kh))
			}
			if !strings.Contains(out, "Host key verification failed") {
				t.Errorf("ssh with %s: want host key verification failure, got: %s", filepath.Base(kh), out)
			}
		}
	})

	t.Run("hosts reach each other's ssh port", func(t *testing.T) {
		for _, from := range all {
			for _, to := range all {
				if from.Name == to.Name {
					continue
				}
				banner := mustRun(ctx, t, c, from.Name, "timeout 5 bash -c 'exec 3<>/dev/tcp/"+to.Address+"/22; head -c 7 <&3'")
				if banner != "SSH-2.0" {
					t.Errorf("%s -> %s:22: got banner %q, want SSH-2.0", from.Name, to.Name, banner)
				}
			}
			if got := mustRun(ctx, t, c, from.Name, "getent hosts "+all[0].Name+" | cut -d' ' -f1"); got != all[0].Address {
				t.Errorf("%s resolves %s to %q, want %s", from.Name, all[0].Name, got, all[0].Address)
			}
		}
	})

	t.Run("no route out", func(t *testing.T) {
		for _, h := range all {
			if out := mustRun(ctx, t, c, h.Name, "ip -4 route show default; ip -6 route show default"); out != "" {
				t.Errorf("%s has a default route: %s", h.Name, out)
			}
			// `ip route get` only asks the kernel; it sends nothing.
			out, err := c.Run(ctx, h.Name, "ip route get 1.1.1.1")
			if err == nil {
				t.Errorf("%s: ip route get 1.1.1.1 succeeded: %s", h.Name, out)
			} else if !strings.Contains(err.Error(), "unreachable") {
				t.Errorf("%s: ip route get 1.1.1.1: want 'Network is unreachable', got %v", h.Name, err)
			}
			// The machine itself (the bridge) is reachable.
			if _, err := c.Run(ctx, h.Name, "ip route get "+c.Gateway()); err != nil {
				t.Errorf("%s: no route to the machine %s: %v", h.Name, c.Gateway(), err)
			}
		}
	})

	t.Run("stop and start", func(t *testing.T) {
		h := all[1]
		keyBefore := mustRun(ctx, t, c, h.Name, "cat /etc/ssh/ssh_host_ed25519_key.pub; echo survived > /root/marker")
		if err := c.Stop(ctx, h.Name); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if err := dial(h.Address, 2*time.Second); err == nil {
			t.Errorf("%s:22 still answers after stop", h.Name)
		}
		if _, err := c.Run(ctx, h.Name, "true"); err == nil {
			t.Errorf("ssh to %s succeeded after stop", h.Name)
		}
		if err := c.Stop(ctx, h.Name); err != nil {
			t.Errorf("second stop: %v", err)
		}
		start := time.Now()
		if err := c.Start(ctx, h.Name); err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Logf("%s booted again in %s", h.Name, time.Since(start).Round(10*time.Millisecond))
		if got := mustRun(ctx, t, c, h.Name, "systemctl is-system-running"); got != "running" {
			t.Errorf("after start %s is %q, want running", h.Name, got)
		}
		keyAfter := mustRun(ctx, t, c, h.Name, "cat /etc/ssh/ssh_host_ed25519_key.pub")
		if keyAfter != strings.SplitN(keyBefore, "\n", 2)[0] {
			t.Errorf("host key changed across stop/start: %q -> %q", keyBefore, keyAfter)
		}
		if got := mustRun(ctx, t, c, h.Name, "cat /root/marker"); got != "survived" {
			t.Errorf("disk did not survive stop/start: /root/marker = %q", got)
		}
		if err := c.Start(ctx, h.Name); err != nil {
			t.Errorf("start of a running host: %v", err)
		}
	})

	// A host that fails is silent: a connection it had hears no FIN or RST,
	// where Stop's end is heard at once. Restore and Start bring it back.
	t.Run("fail silently", func(t *testing.T) {
		h := all[1]
		open := func() net.Conn {
			t.Helper()
			conn, err := net.DialTimeout("tcp", net.JoinHostPort(h.Address, "22"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			banner := make([]byte, 64)
			if _, err := conn.Read(banner); err != nil { // sshd's version line
				t.Fatal(err)
			}
			return conn
		}
		// heard waits up to 3 s for the connection to end and says how it
		// ended, or "" if nothing came.
		heard := func(conn net.Conn) string {
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, err := conn.Read(make([]byte, 1))
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return ""
			}
			return fmt.Sprint(err)
		}
		conn := open()
		if err := c.Stop(ctx, h.Name); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if got := heard(conn); got == "" {
			t.Errorf("after Stop a connection to %s heard nothing; want its end", h.Name)
		}
		_ = conn.Close()
		if err := c.Start(ctx, h.Name); err != nil {
			t.Fatalf("start: %v", err)
		}
		conn = open()
		defer func() { _ = conn.Close() }()
		if err := c.Fail(ctx, h.Name); err != nil {
			t.Fatalf("fail: %v", err)
		}
		if got := heard(conn); got != "" {
			t.Errorf("after Fail a connection to %s ended (%s); want silence", h.Name, got)
		}
		if err := dial(h.Address, 2*time.Second); err == nil {
			t.Errorf("%s:22 answers after Fail", h.Name)
		}
		if err := c.Restore(ctx, h.Name); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if err := c.Start(ctx, h.Name); err != nil {
			t.Fatalf("start: %v", err)
		}
		if got := mustRun(ctx, t, c, h.Name, "systemctl is-system-running"); got != "running" {
			t.Errorf("after restore and start %s is %q, want running", h.Name, got)
		}
	})

	t.Run("cut and restore", func(t *testing.T) {
		h, peer := all[2], all[0]
		probe := "timeout 3 bash -c 'echo > /dev/tcp/" + h.Address + "/22'"
		if err := c.Cut(ctx, h.Name); err != nil {
			t.Fatalf("cut: %v", err)
		}
		if err := dial(h.Address, 2*time.Second); err == nil {
			t.Errorf("machine reaches %s:22 while cut", h.Name)
		}
		if _, err := c.Run(ctx, peer.Name, probe); err == nil {
			t.Errorf("%s reaches %s:22 while cut", peer.Name, h.Name)
		}
		// From inside the cut host's own network namespace, nobody is reachable.
		nsOfHost := c.Resources().Netns[2]
		if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", nsOfHost, "timeout", "3", "bash", "-c", "echo > /dev/tcp/"+peer.Address+"/22").CombinedOutput(); err == nil {
			t.Errorf("cut %s reaches %s:22: %s", h.Name, peer.Name, out)
		}
		if err := c.Restore(ctx, h.Name); err != nil {
			t.Fatalf("restore: %v", err)
		}
		if err := dial(h.Address, 5*time.Second); err != nil {
			t.Errorf("machine does not reach %s after restore: %v", h.Name, err)
		}
		mustRun(ctx, t, c, peer.Name, probe)
		if got := mustRun(ctx, t, c, h.Name, "systemctl is-system-running"); got != "running" {
			t.Errorf("after restore %s is %q, want running", h.Name, got)
		}
	})

	t.Run("down leaves nothing", func(t *testing.T) {
		res := c.Resources()
		if len(res.Netns) != 3 || len(res.Links) != 4 || len(res.Cgroups) == 0 {
			t.Fatalf("unexpected resources: %+v", res)
		}
		if err := c.Down(ctx); err != nil {
			t.Fatalf("down: %v", err)
		}
		if err := c.Down(ctx); err != nil {
			t.Errorf("second down: %v", err)
		}
		if left := res.Leftovers(); len(left) > 0 {
			t.Errorf("left after down: %v", left)
		}
		assertGone(t, res)
	})
}

// assertGone checks, without the package's own helpers, that no network
// namespace, link, cgroup, process or mount of res is left.
func assertGone(t *testing.T, res hosts.Resources) {
	t.Helper()
	if _, err := os.Stat(res.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s still exists (%v)", res.StateDir, err)
	}
	netns, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	links, _ := exec.Command("ip", "-o", "link", "show").CombinedOutput()
	for _, ns := range res.Netns {
		if strings.Contains(string(netns), ns) {
			t.Errorf("network namespace %s left: %s", ns, netns)
		}
	}
	for _, l := range res.Links {
		if strings.Contains(string(links), " "+l+":") || strings.Contains(string(links), " "+l+"@") {
			t.Errorf("link %s left", l)
		}
	}
	for _, cg := range res.Cgroups {
		if _, err := os.Stat(cg); err == nil {
			t.Errorf("cgroup %s left", cg)
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil || isZombie(string(stat)) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		stray := strings.Contains(string(cmdline), res.StateDir+"/")
		for _, ns := range res.Netns {
			stray = stray || strings.Contains(string(cgroup), "/kao-hosts/"+ns+"/") || strings.Contains(string(cgroup), "/kao-hosts/"+ns+"\n")
		}
		if stray {
			t.Errorf("process %d left: %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
		f, err := os.Open(filepath.Join(dir, "mountinfo"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			hit := strings.Contains(line, res.StateDir+"/")
			for _, ns := range res.Netns {
				hit = hit || strings.Contains(line, "/run/netns/"+ns+" ")
			}
			if hit {
				t.Errorf("mount left, seen by process %d: %s", pid, line)
			}
		}
		_ = f.Close() // read only
	}
}

func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	f := strings.Fields(stat[i+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// mustRun runs a command on a host and returns its trimmed output.
func mustRun(ctx context.Context, t *testing.T, c *hosts.Cluster, host, script string) string {
	t.Helper()
	out, err := c.Run(ctx, host, script)
	if err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	return strings.TrimSpace(out)
}

// sshWithKnownHosts runs ssh to a host with the harness's options but another
// known_hosts file, returning combined output.
func sshWithKnownHosts(ctx context.Context, t *testing.T, c *hosts.Cluster, host, knownHosts, script string) (string, error) {
	t.Helper()
	args, err := c.SSHArgs(host)
	if err != nil {
		t.Fatal(err)
	}
	replaced := false
	for i, a := range args {
		if strings.HasPrefix(a, "UserKnownHostsFile=") {
			args[i] = "UserKnownHostsFile=" + knownHosts
			replaced = true
		}
	}
	if !replaced {
		t.Fatalf("no UserKnownHostsFile option in %v", args)
	}
	out, err := exec.CommandContext(ctx, "ssh", append(args, "--", script)...).CombinedOutput()
	return string(out), err
}

func dial(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "22"), timeout)
	if err != nil {
		return err
	}
	return conn.Close()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
