package members

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kao-io/kao/internal/testenv"
)

// This file plays a Pull member's kubelet for tests: the member has no
// nodes, so the karmada-agent Deployment kao created never gets a Pod; the
// test runs the bundle's karmada-agent binary with the Deployment's command
// line and the Secret's kubeconfig instead.

// loopbackPort returns a loopback port nothing listens on right now.
func loopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
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
	args, err := agentArgs(command, karmadaKubeconfig, memberKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// agentArgs is AgentArgs returning its error, for other goroutines than the
// test's.
func agentArgs(command []string, karmadaKubeconfig, memberKubeconfig string) ([]string, error) {
	if len(command) == 0 || command[0] != "/bin/karmada-agent" {
		return nil, fmt.Errorf("karmada-agent's command %q does not start with /bin/karmada-agent", command)
	}
	var args []string
	for _, a := range command[1:] {
		for _, flag := range []string{"--metrics-bind-address=", "--health-probe-bind-address="} {
			if strings.HasPrefix(a, flag) {
				port, err := loopbackPort()
				if err != nil {
					return nil, err
				}
				a = flag + "127.0.0.1:" + strconv.Itoa(port)
			}
		}
		if strings.HasPrefix(a, "--karmada-kubeconfig=") {
			a = "--karmada-kubeconfig=" + karmadaKubeconfig
		}
		args = append(args, a)
	}
	return append(args, "--kubeconfig="+memberKubeconfig), nil
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
	stop, restarts, err := startAgent(bin, logPath, args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return stop, restarts
}

// startAgent is StartAgent without the test: it returns its error, and the
// caller stops the agent.
func startAgent(bin, logPath string, args []string) (stop func(), restarts func() int, err error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, err
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
		return nil, nil, fmt.Errorf("starting karmada-agent: %w", err)
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
			var restartErr error
			exited, restartErr = start()
			mu.Unlock()
			if restartErr != nil {
				_, _ = fmt.Fprintf(log, "--- restarting karmada-agent: %v\n", restartErr)
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
	return stop, restarts, nil
}

// The names kao gives karmada-agent's objects in a Pull member
// (roles/karmada_members/vars/main.yml).
const (
	agentNamespace      = "karmada-system"
	agentDeploymentName = "karmada-agent"
	agentSecret         = "karmada-kubeconfig"
	agentSecretKey      = "karmada-kubeconfig"
)

// How RunAgentWhenDeployed asks a member: each request bounded, the
// client's rate limit above the poll's rate, every 150 ms by default.
const (
	agentPollTimeout   = 5 * time.Second
	agentClientQPS     = 50
	agentClientBurst   = 100
	agentDefaultPeriod = 150 * time.Millisecond
)

// AgentOptions configure RunAgentWhenDeployed.
type AgentOptions struct {
	// Bin is the karmada-agent binary (the bundle's).
	Bin string
	// Dir is a private directory for the agent's kubeconfigs, which hold
	// client keys.
	Dir string
	// LogDir is where the agent's log goes, <member>-karmada-agent.log;
	// empty means Dir. A directory that outlives the test keeps the logs
	// for reading afterwards.
	LogDir string
	// Interval is how often the member is asked for the Deployment; zero
	// means 150 ms.
	Interval time.Duration
	// Timeout bounds the wait for the Deployment, from the call on.
	Timeout time.Duration
}

// DeployedAgent is a Pull member's karmada-agent as RunAgentWhenDeployed
// runs it: waiting for kao's Deployment, then running.
type DeployedAgent struct {
	// Member is the harness's name of the member (member-1, ...).
	Member string
	// LogPath is where the agent's output goes once it runs.
	LogPath string

	done      chan struct{}
	startedAt time.Time
	image     string
	err       error
	stop      func()
}

// Done is closed once the agent runs or the wait for it failed.
func (a *DeployedAgent) Done() <-chan struct{} { return a.done }

// StartedAt is when the agent was started; zero before Done or after a
// failure.
func (a *DeployedAgent) StartedAt() time.Time {
	<-a.done
	return a.startedAt
}

// Image is the image the Deployment names, once Done.
func (a *DeployedAgent) Image() string {
	<-a.done
	return a.image
}

// Err is why the agent did not start, once Done; nil if it runs.
func (a *DeployedAgent) Err() error {
	<-a.done
	return a.err
}

// RunAgentWhenDeployed plays m's kubelet from now on, the way a real one
// reacts to a new Pod: in a goroutine of its own it asks m every interval
// for kao's karmada-agent Deployment and its kubeconfig Secret, and as soon
// as both are there it starts the agent they describe (AgentArgs), restarting
// it whenever it exits (StartAgent). It returns at once, so that a test can
// play the kubelet of many members side by side: each agent starts when its
// own Deployment appears, whatever the others do. The wait ends with an
// error after opts.Timeout; the agent, or the wait, stops when the test
// ends. It reads the member with client-go, which costs the machine far
// less than a kubectl process per poll.
func RunAgentWhenDeployed(t testing.TB, m *Member, opts AgentOptions) *DeployedAgent {
	t.Helper()
	if opts.Interval <= 0 {
		opts.Interval = agentDefaultPeriod
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(m.Kubeconfig)
	if err != nil {
		t.Fatalf("%s: its kubeconfig: %v", m.Name, err)
	}
	// client-go's default limit (5 requests a second) is slower than the
	// poll.
	cfg.Timeout, cfg.QPS, cfg.Burst = agentPollTimeout, agentClientQPS, agentClientBurst
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	memberKubeconfig := filepath.Join(opts.Dir, m.Name+".kubeconfig")
	if err := os.WriteFile(memberKubeconfig, m.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logDir := opts.LogDir
	if logDir == "" {
		logDir = opts.Dir
	}
	a := &DeployedAgent{Member: m.Name, LogPath: filepath.Join(logDir, m.Name+"-karmada-agent.log"), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	// The test's goroutine stops the wait, then the agent: nothing is
	// registered from the other goroutine.
	t.Cleanup(func() {
		cancel()
		<-a.done
		if a.stop != nil {
			a.stop()
		}
	})
	go func() {
		defer close(a.done)
		a.err = a.waitAndStart(ctx, cs, opts, memberKubeconfig)
	}()
	return a
}

// waitAndStart polls the member until the agent's Deployment and Secret are
// there, then starts the agent. Failed requests are retried until the
// timeout, as a kubelet would; a Deployment the harness cannot run ends the
// wait at once.
func (a *DeployedAgent) waitAndStart(ctx context.Context, cs kubernetes.Interface, opts AgentOptions, memberKubeconfig string) error {
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	var last error
	for {
		d, kubeconfig, err := readDeployedAgent(ctx, cs)
		switch {
		case err != nil:
			last = err
		case d != nil:
			containers := d.Spec.Template.Spec.Containers
			if len(containers) != 1 {
				return fmt.Errorf("%s: karmada-agent has %d containers, want 1", a.Member, len(containers))
			}
			karmadaKubeconfig := filepath.Join(opts.Dir, a.Member+"-agent.kubeconfig")
			if err := os.WriteFile(karmadaKubeconfig, kubeconfig, 0o600); err != nil {
				return err
			}
			args, err := agentArgs(containers[0].Command, karmadaKubeconfig, memberKubeconfig)
			if err != nil {
				return fmt.Errorf("%s: %w", a.Member, err)
			}
			stop, _, err := startAgent(opts.Bin, a.LogPath, args)
			if err != nil {
				return fmt.Errorf("%s: %w", a.Member, err)
			}
			a.startedAt, a.image, a.stop = time.Now(), containers[0].Image, stop
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("%s: the test ended before karmada-agent's Deployment and Secret were in the member", a.Member)
			}
			missing := fmt.Errorf("%s: no karmada-agent Deployment with its kubeconfig Secret in %s after %s", a.Member, agentNamespace, opts.Timeout)
			if last != nil {
				return fmt.Errorf("%w; the last request failed: %w", missing, last)
			}
			return missing
		case <-tick.C:
		}
	}
}

// readDeployedAgent reads the agent's Deployment and the kubeconfig in its
// Secret from the member: no Deployment and no error while either is
// missing (a kubelet waits for a Pod's Secret volume too).
func readDeployedAgent(ctx context.Context, cs kubernetes.Interface) (*appsv1.Deployment, []byte, error) {
	d, err := cs.AppsV1().Deployments(agentNamespace).Get(ctx, agentDeploymentName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	s, err := cs.CoreV1().Secrets(agentNamespace).Get(ctx, agentSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if len(s.Data[agentSecretKey]) == 0 {
		return nil, nil, nil
	}
	return d, s.Data[agentSecretKey], nil
}
