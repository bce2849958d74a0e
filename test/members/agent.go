package members

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/testenv"
)

// This file plays a Pull member's kubelet for tests: the member has no
// nodes, so the karmada-agent Deployment kao created never gets a Pod; the
// test runs the bundle's karmada-agent binary with the Deployment's command
// line and the Secret's kubeconfig instead.

// closedPort returns a loopback port nothing listens on right now.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// agentDeployment is what the test reads back from a Pull member's
// karmada-agent Deployment.
type agentDeployment struct {
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Image   string   `json:"image"`
					Command []string `json:"command"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// ReadAgent reads the karmada-agent Deployment and its kubeconfig Secret
// from a Pull member: the image, the command line and the kubeconfig.
func ReadAgent(ctx context.Context, t testing.TB, kubectl, memberKubeconfig string) (image string, command []string, agentKubeconfig []byte) {
	t.Helper()
	out, err := testenv.Kubectl(ctx, kubectl, memberKubeconfig, "-n", "karmada-system", "get", "deployment", "karmada-agent", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d agentDeployment
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("karmada-agent has %d containers, want 1", n)
	}
	c := d.Spec.Template.Spec.Containers[0]
	data, err := testenv.Kubectl(ctx, kubectl, memberKubeconfig, "-n", "karmada-system", "get", "secret", "karmada-kubeconfig",
		"-o", "jsonpath={.data.karmada-kubeconfig}")
	if err != nil {
		t.Fatal(err)
	}
	agentKubeconfig, err = base64.StdEncoding.DecodeString(data)
	if err != nil {
		t.Fatalf("karmada-kubeconfig is not base64: %v", err)
	}
	return c.Image, c.Command, agentKubeconfig
}

// AgentArgs turns the Deployment's command into a command line for this
// machine, playing the member's kubelet: the kubeconfig mounted from the
// Secret is a local file, $(POD_IP) is loopback on ports of our own, and
// --kubeconfig points at the member as in-cluster config would.
func AgentArgs(t testing.TB, command []string, karmadaKubeconfig, memberKubeconfig string) []string {
	t.Helper()
	if len(command) == 0 || command[0] != "/bin/karmada-agent" {
		t.Fatalf("karmada-agent's command %q does not start with /bin/karmada-agent", command)
	}
	var args []string
	for _, a := range command[1:] {
		switch {
		case strings.HasPrefix(a, "--karmada-kubeconfig="):
			a = "--karmada-kubeconfig=" + karmadaKubeconfig
		case strings.HasPrefix(a, "--metrics-bind-address="):
			a = "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(closedPort(t))
		case strings.HasPrefix(a, "--health-probe-bind-address="):
			a = "--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(closedPort(t))
		}
		args = append(args, a)
	}
	return append(args, "--kubeconfig="+memberKubeconfig)
}

// StartAgent runs karmada-agent on this machine until stop is called or
// the test ends, restarting it whenever it exits, as the member's kubelet
// would for a Deployment's Pod (restartPolicy Always, with a back-off of 1 s
// doubling to 10 s). karmada-agent exits by design when it loses its leader
// lease, for example while karmada-apiserver is stopped for a restore. Its
// output, across restarts, goes to logPath; restarts reports how many
// times it was started again.
func StartAgent(t testing.TB, bin, logPath string, args []string) (stop func(), restarts func() int) {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		cur      *exec.Cmd
		stopping bool
		started  int
	)
	start := func() (<-chan struct{}, error) {
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		cur = cmd
		started++
		return exited, nil
	}
	mu.Lock()
	exited, err := start()
	mu.Unlock()
	if err != nil {
		_ = log.Close()
		t.Fatalf("starting karmada-agent: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = log.Close() }()
		backoff := time.Second
		for {
			<-exited
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			mu.Unlock()
			_, _ = fmt.Fprintf(log, "--- karmada-agent exited; the test's kubelet restarts it in %s\n", backoff)
			time.Sleep(backoff)
			backoff = min(2*backoff, 10*time.Second)
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			exited, err = start()
			mu.Unlock()
			if err != nil {
				_, _ = fmt.Fprintf(log, "--- restarting karmada-agent: %v\n", err)
				return
			}
		}
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		mu.Lock()
		stopping = true
		pid := cur.Process.Pid
		mu.Unlock()
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			<-done
		}
	}
	restarts = func() int {
		mu.Lock()
		defer mu.Unlock()
		return started - 1
	}
	t.Cleanup(stop)
	return stop, restarts
}
