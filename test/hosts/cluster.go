package hosts

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kao-io/kao/internal/machine"
)

// Host is one test host as clients reach it.
type Host struct {
	// Name is the host's name and hostname (node1, node2, ...).
	Name string `json:"name"`
	// Address is the host's IPv4 address on the instance's subnet.
	Address string `json:"address"`
	// Port is the SSH port (SSHPort).
	Port int `json:"port"`
	// User is the SSH user (SSHUser).
	User string `json:"user"`
}

// HostStatus is a host and its power and network state.
type HostStatus struct {
	Host
	// PoweredOn is true while the host's systemd-nspawn process runs.
	PoweredOn bool `json:"poweredOn"`
	// Cut is true while the host is cut off the network.
	Cut bool `json:"cut"`
	// PID is the systemd-nspawn process id while powered on.
	PID int `json:"pid,omitempty"`
}

// Cluster is one running harness instance: a set of hosts on the instance's
// own bridge and subnet. Its methods are safe for concurrent use, and across
// processes: each change holds the instance's lock and re-reads its state.
type Cluster struct {
	cfg Config
	l   layout
	dir string

	mu           sync.Mutex
	st           *instanceState
	bootDuration time.Duration
}

// Unsupported returns why test hosts cannot run on this machine and what to do
// about it, or "" if they can: they need Linux, root, and the tools the
// harness shells out to.
func Unsupported() string {
	if runtime.GOOS != "linux" {
		return "test hosts need Linux (they are systemd-nspawn containers), not " + runtime.GOOS + ": run on a Linux machine or VM"
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("test hosts need root (they create network namespaces, links and cgroups and run systemd-nspawn), "+
			"but this process runs as uid %d: run it as root, e.g. with sudo", os.Geteuid())
	}
	if missing := MissingTools(); len(missing) > 0 {
		return fmt.Sprintf("test hosts need %s, not found in $PATH or %s: install them (Debian/Ubuntu: apt-get install %s)",
			strings.Join(missing, ", "), strings.Join(sbinDirs, ", "), strings.Join(packagesFor(missing), " "))
	}
	return ""
}

// Up creates instance cfg.Name with n hosts and waits until every host answers
// SSH and has finished booting. It builds the base root first if it is not
// cached. An existing instance of the same name is torn down first (this is
// how leftovers of a crash are cleaned), unless another live process owns it.
// If Up fails it removes what it created.
func Up(ctx context.Context, cfg Config, n int) (*Cluster, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	if n < 1 || n > MaxHosts {
		return nil, fmt.Errorf("number of hosts %d out of range 1..%d", n, MaxHosts)
	}
	if reason := Unsupported(); reason != "" {
		return nil, errors.New(reason)
	}
	base, _, err := EnsureBase(ctx, cfg)
	if err != nil {
		return nil, err
	}
	l := layout{root: cfg.StateRoot}
	lock, err := machine.WaitLock(ctx, l.instanceLock(cfg.Name))
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	if err := clearPrevious(ctx, cfg, l); err != nil {
		return nil, err
	}
	st, err := allocate(ctx, cfg, l, base)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, l: l, dir: l.instanceDir(cfg.Name), st: st}
	if err := c.create(ctx, n); err != nil {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if terr := teardown(tctx, cfg.Logf, l, cfg.Name); terr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up after the failed up: %w", terr))
		}
		return nil, err
	}
	return c, nil
}

// clearPrevious tears down an earlier instance of the same name. The caller
// holds the instance lock.
func clearPrevious(ctx context.Context, cfg Config, l layout) error {
	st, err := loadState(l.instanceDir(cfg.Name))
	if errors.Is(err, os.ErrNotExist) {
		return removeTree(l.instanceDir(cfg.Name))
	}
	if err != nil {
		return err
	}
	if st.Owner != nil && st.Owner.alive() && (cfg.owner == nil || *st.Owner != *cfg.owner) {
		return fmt.Errorf("instance %s is in use by running process %d", cfg.Name, st.Owner.PID)
	}
	cfg.Logf("removing the previous instance %s", cfg.Name)
	return teardown(ctx, cfg.Logf, l, cfg.Name)
}

// Open returns the running instance cfg.Name (created by an earlier Up, maybe
// by another process).
func Open(cfg Config) (*Cluster, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	l := layout{root: cfg.StateRoot}
	st, err := loadState(l.instanceDir(cfg.Name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("instance %s is not up (no state in %s)", cfg.Name, l.instanceDir(cfg.Name))
	}
	if err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, l: l, dir: l.instanceDir(cfg.Name), st: st}, nil
}

// Down tears down instance cfg.Name: it powers off every host and removes the
// network namespaces, links, cgroups and state directory that the instance
// recorded, then checks that none is left. Down of an instance that is not up
// does nothing.
func Down(ctx context.Context, cfg Config) error {
	cfg, err := cfg.complete()
	if err != nil {
		return err
	}
	l := layout{root: cfg.StateRoot}
	lock, err := machine.WaitLock(ctx, l.instanceLock(cfg.Name))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	return teardown(ctx, cfg.Logf, l, cfg.Name)
}

// Instances returns the names of the instances recorded in cfg's state root
// (cfg.Name is ignored).
func Instances(cfg Config) ([]string, error) {
	cfg, err := cfg.completeShared()
	if err != nil {
		return nil, err
	}
	return listInstances(layout{root: cfg.StateRoot})
}

// create builds the instance's network and hosts and boots them. The caller
// holds the instance lock; every resource is recorded in the state before it
// is created.
func (c *Cluster) create(ctx context.Context, n int) error {
	st := c.st
	save := func() error { return saveState(c.dir, st) }

	keyPath := filepath.Join(c.dir, keyFile)
	if err := sshKeygen(ctx, "ed25519", keyPath, "kao-test-hosts@"+st.Name); err != nil {
		return err
	}
	authorizedKey, err := readPublicKey(keyPath + ".pub")
	if err != nil {
		return err
	}
	subnet, err := netip.ParsePrefix(st.Subnet)
	if err != nil {
		return fmt.Errorf("parsing subnet: %w", err)
	}

	bridge := bridgeName(st.Index)
	if machine.LinkExists(bridge) {
		return fmt.Errorf("bridge %s already exists and is not ours", bridge)
	}
	st.Bridge = bridge
	if err := save(); err != nil {
		return err
	}
	if err := createBridge(ctx, st.Bridge, st.Gateway+"/24"); err != nil {
		return err
	}

	for i := 1; i <= n; i++ {
		addr, err := ipAdd(subnet.Addr(), 10+i)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%s%d", c.cfg.HostPrefix, i)
		mach := machineName(st.Index, name)
		veth := vethName(st.Index, i)
		if machine.NetnsExists(mach) || machine.LinkExists(veth) {
			return fmt.Errorf("network namespace %s or link %s already exists and is not ours", mach, veth)
		}
		st.Hosts = append(st.Hosts, hostState{Name: name, Address: addr.String(), Machine: mach, Netns: mach, Veth: veth})
	}
	if err := save(); err != nil {
		return err
	}
	for i := range st.Hosts {
		h := &st.Hosts[i]
		if err := createNetns(ctx, h.Netns); err != nil {
			return err
		}
		if err := createVeth(ctx, h.Veth, st.Bridge, h.Netns, h.Address+"/24"); err != nil {
			return err
		}
		if err := prepareUpper(ctx, st.Base, upperDir(c.dir, h.Name), *h, st.Hosts, authorizedKey); err != nil {
			return fmt.Errorf("preparing %s: %w", h.Name, err)
		}
	}
	if err := writeAccessFiles(c.dir, st, hostsOf(st)); err != nil {
		return err
	}

	c.cfg.Logf("booting %d hosts on %s (bridge %s, state %s)", n, st.Subnet, st.Bridge, c.dir)
	start := time.Now()
	for i := range st.Hosts {
		if err := powerOn(st, c.dir, &st.Hosts[i], save); err != nil {
			return err
		}
	}
	if err := c.waitAllBooted(ctx, st); err != nil {
		return err
	}
	c.bootDuration = time.Since(start)
	c.cfg.Logf("booted %d hosts in %s", n, c.bootDuration.Round(10*time.Millisecond))
	return nil
}

// waitAllBooted waits for every powered-on host in parallel.
func (c *Cluster) waitAllBooted(ctx context.Context, st *instanceState) error {
	var wg sync.WaitGroup
	errs := make([]error, len(st.Hosts))
	for i := range st.Hosts {
		h := st.Hosts[i]
		if h.Nspawn == nil {
			continue
		}
		id := *h.Nspawn
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = waitBooted(ctx, c.PrivateKeyPath(), c.KnownHostsPath(), hostOf(h), id.alive, consoleLog(c.dir, h.Name), c.cfg.BootTimeout)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// teardown removes everything instance name recorded. The caller holds the
// instance lock. On failure the state is kept (so a later Down can retry) and
// the error says what is left.
func teardown(ctx context.Context, logf func(string, ...any), l layout, name string) error {
	dir := l.instanceDir(name)
	st, err := loadState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return removeTree(dir) // nothing recorded; at most a partial directory
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := range st.Hosts {
		errs = append(errs, powerOff(ctx, dir, &st.Hosts[i]))
	}
	reportCPU(logf, name, st.Hosts)
	for _, h := range st.Hosts {
		errs = append(errs, deleteLink(ctx, h.Veth), deleteNetns(ctx, h.Netns), removeCgroups(h.Cgroups))
	}
	errs = append(errs, deleteLink(ctx, st.Bridge))
	if left := resourcesOf(st, dir).Leftovers(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("still present: %s", strings.Join(left, "; ")))
	}
	if err := errors.Join(errs...); err != nil {
		if serr := saveState(dir, st); serr != nil {
			err = errors.Join(err, serr)
		}
		return fmt.Errorf("tearing down instance %s: %w", name, err)
	}
	if err := removeTree(dir); err != nil {
		return fmt.Errorf("tearing down instance %s: %w", name, err)
	}
	logf("instance %s is down", name)
	return nil
}

// CPURecordsEnv names a file to which every instance's teardown appends a
// line "instance<TAB>CPU-seconds": the CPU time its hosts used, for
// hack/cpusample's report of where a test run's CPU went (make check-suite
// sets it).
const CPURecordsEnv = "KAO_TEST_CPU_RECORDS"

// reportCPU logs the CPU time each powered-off host used over its life,
// and appends the instance's total to $KAO_TEST_CPU_RECORDS. Neither is
// fatal: it is a measurement, not part of the teardown.
func reportCPU(logf func(string, ...any), name string, hs []hostState) {
	var total float64
	var per []string
	for _, h := range hs {
		if s, ok := cpuSeconds(h.Cgroups); ok {
			total += s
			per = append(per, fmt.Sprintf("%s %.0f", h.Name, s))
		}
	}
	if len(per) == 0 {
		return
	}
	logf("instance %s: its hosts used %.0f CPU-seconds (%s)", name, total, strings.Join(per, ", "))
	path := os.Getenv(CPURecordsEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		logf("recording the CPU time of %s: %v", name, err)
		return
	}
	// One short write with O_APPEND: records of concurrent teardowns do not mix.
	if _, err := fmt.Fprintf(f, "%s\t%.1f\n", name, total); err != nil {
		logf("recording the CPU time of %s: %v", name, err)
	}
	if err := f.Close(); err != nil {
		logf("recording the CPU time of %s: %v", name, err)
	}
}

// withLock runs fn on the freshly read state under the instance lock and
// saves the state afterwards, also when fn fails.
func (c *Cluster) withLock(ctx context.Context, fn func(st *instanceState, save func() error) error) error {
	lock, err := machine.WaitLock(ctx, c.l.instanceLock(c.cfg.Name))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	st, err := loadState(c.dir)
	if err != nil {
		return fmt.Errorf("instance %s: %w", c.cfg.Name, err)
	}
	save := func() error { return saveState(c.dir, st) }
	err = fn(st, save)
	if serr := save(); serr != nil {
		err = errors.Join(err, serr)
	}
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
	return err
}

// Stop powers a host off abruptly, like pulling its plug: its processes are
// killed with SIGKILL, nothing shuts down cleanly. Its disk (the overlay upper
// directory), address and keys survive, so Start boots it again. Stopping a
// stopped host does nothing.
func (c *Cluster) Stop(ctx context.Context, host string) error {
	return c.withLock(ctx, func(st *instanceState, _ func() error) error {
		h, err := st.host(host)
		if err != nil {
			return err
		}
		if err := powerOff(ctx, c.dir, h); err != nil {
			return err
		}
		c.cfg.Logf("%s powered off", host)
		return nil
	})
}

// Fail powers a host off as a power loss or a dead machine does: silently.
// Its link goes down first, then its processes are killed, so that nothing
// tells its peers: no FIN or RST for the connections it had, no refused
// connection after; they hear nothing until their own timeouts. (Stop kills
// the processes with the network up: their kernel closes every connection
// at once, as an orderly shutdown would.) The host stays cut off until
// Restore, which comes before Start to bring it back.
func (c *Cluster) Fail(ctx context.Context, host string) error {
	if err := c.Cut(ctx, host); err != nil {
		return err
	}
	return c.Stop(ctx, host)
}

// Start powers a stopped host on and waits until it has booted (unless it is
// cut off the network, when there is no way to tell). Starting a running host
// does nothing.
func (c *Cluster) Start(ctx context.Context, host string) error {
	var (
		h       hostState
		already bool
	)
	err := c.withLock(ctx, func(st *instanceState, save func() error) error {
		hs, err := st.host(host)
		if err != nil {
			return err
		}
		if hs.poweredOn() {
			already = true
			return nil
		}
		// Clear whatever a crashed earlier run left in the host's cgroups.
		if err := powerOff(ctx, c.dir, hs); err != nil {
			return err
		}
		if err := powerOn(st, c.dir, hs, save); err != nil {
			return err
		}
		h = *hs
		return nil
	})
	if err != nil || already {
		return err
	}
	if h.Cut {
		c.cfg.Logf("%s powered on; it is cut off the network, so not waiting for its boot", host)
		return nil
	}
	start := time.Now()
	if err := waitBooted(ctx, c.PrivateKeyPath(), c.KnownHostsPath(), hostOf(h), h.Nspawn.alive, consoleLog(c.dir, h.Name), c.cfg.BootTimeout); err != nil {
		return err
	}
	c.cfg.Logf("%s booted in %s", host, time.Since(start).Round(10*time.Millisecond))
	return nil
}

// Cut partitions a host off the network: neither the machine nor the other
// hosts reach it, and it reaches nobody, until Restore. The host keeps running.
func (c *Cluster) Cut(ctx context.Context, host string) error {
	return c.withLock(ctx, func(st *instanceState, _ func() error) error {
		h, err := st.host(host)
		if err != nil {
			return err
		}
		if err := setLinkUp(ctx, h.Veth, false); err != nil {
			return err
		}
		h.Cut = true
		c.cfg.Logf("%s cut off the network", host)
		return nil
	})
}

// Restore reconnects a host cut off by Cut. If the host is powered on, it
// waits until the machine reaches the host's SSH port again.
func (c *Cluster) Restore(ctx context.Context, host string) error {
	var h hostState
	err := c.withLock(ctx, func(st *instanceState, _ func() error) error {
		hs, err := st.host(host)
		if err != nil {
			return err
		}
		if err := setLinkUp(ctx, hs.Veth, true); err != nil {
			return err
		}
		hs.Cut = false
		h = *hs
		return nil
	})
	if err != nil {
		return err
	}
	c.cfg.Logf("%s reconnected", host)
	if !h.poweredOn() {
		return nil
	}
	return waitPort(ctx, net.JoinHostPort(h.Address, strconv.Itoa(SSHPort)), 30*time.Second)
}

// Run runs a shell command line (script) on a host over SSH, with the host key checked
// against the instance's known_hosts, and returns its standard output. The
// error carries the standard error.
func (c *Cluster) Run(ctx context.Context, host, script string) (string, error) {
	h, err := c.Host(host)
	if err != nil {
		return "", err
	}
	out, err := runSSH(ctx, c.PrivateKeyPath(), c.KnownHostsPath(), h, script)
	return out, err
}

// SSHArgs returns ssh's arguments (without the program name) to reach a host
// with strict host key checking: options, then user@address. Append a command
// to run one.
func (c *Cluster) SSHArgs(host string) ([]string, error) {
	h, err := c.Host(host)
	if err != nil {
		return nil, err
	}
	return append(sshOptions(c.PrivateKeyPath(), c.KnownHostsPath()), "-p", strconv.Itoa(h.Port), h.User+"@"+h.Address), nil
}

// SSHCommand returns an unstarted ssh command that runs remote (joined by
// spaces, as ssh does) on a host; with no remote, an interactive login.
func (c *Cluster) SSHCommand(ctx context.Context, host string, remote ...string) (*exec.Cmd, error) {
	args, err := c.SSHArgs(host)
	if err != nil {
		return nil, err
	}
	if len(remote) > 0 {
		args = append(append(args, "--"), remote...)
	}
	return command(ctx, "ssh", args...)
}

// Status re-reads the instance's state and reports every host.
func (c *Cluster) Status() ([]HostStatus, error) {
	st, err := loadState(c.dir)
	if err != nil {
		return nil, fmt.Errorf("instance %s: %w", c.cfg.Name, err)
	}
	c.mu.Lock()
	c.st = st
	c.mu.Unlock()
	out := make([]HostStatus, 0, len(st.Hosts))
	for _, h := range st.Hosts {
		s := HostStatus{Host: hostOf(h), Cut: h.Cut, PoweredOn: h.poweredOn()}
		if s.PoweredOn {
			s.PID = h.Nspawn.PID
		}
		out = append(out, s)
	}
	return out, nil
}

// Down tears the instance down; see the package-level Down.
func (c *Cluster) Down(ctx context.Context) error {
	return Down(ctx, c.cfg)
}

// Name returns the instance name.
func (c *Cluster) Name() string { return c.cfg.Name }

// StateDir returns the instance's state directory.
func (c *Cluster) StateDir() string { return c.dir }

// PrivateKeyPath returns the path of the SSH private key that logs in as root
// on every host.
func (c *Cluster) PrivateKeyPath() string { return filepath.Join(c.dir, keyFile) }

// KnownHostsPath returns the path of the known_hosts file holding every host's
// real host keys.
func (c *Cluster) KnownHostsPath() string { return filepath.Join(c.dir, knownHosts) }

// SSHSecretData returns the private key and known_hosts as the data of a
// Secret a KarmadaDeployment's spec.ssh names: keys id_ed25519 and
// known_hosts.
func (c *Cluster) SSHSecretData() (map[string][]byte, error) {
	key, err := os.ReadFile(c.PrivateKeyPath())
	if err != nil {
		return nil, err
	}
	knownHosts, err := os.ReadFile(c.KnownHostsPath())
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"id_ed25519": key, "known_hosts": knownHosts}, nil
}

// HostsFilePath returns the path of hosts.json (see File).
func (c *Cluster) HostsFilePath() string { return filepath.Join(c.dir, hostsFile) }

// InventoryPath returns the path of the Ansible inventory for the hosts.
func (c *Cluster) InventoryPath() string { return filepath.Join(c.dir, inventoryFile) }

// SSHConfigPath returns the path of an ssh_config for `ssh -F PATH HOST`.
func (c *Cluster) SSHConfigPath() string { return filepath.Join(c.dir, sshConfigFile) }

// BootDuration returns how long Up took to boot the hosts (from the first
// power-on until every host reported a finished boot), excluding the base
// build and network setup.
func (c *Cluster) BootDuration() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bootDuration
}

// Subnet returns the instance's subnet in CIDR form.
func (c *Cluster) Subnet() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Subnet
}

// Gateway returns the bridge's address: the machine as the hosts see it.
func (c *Cluster) Gateway() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st.Gateway
}

// Hosts returns every host.
func (c *Cluster) Hosts() []Host {
	c.mu.Lock()
	defer c.mu.Unlock()
	return hostsOf(c.st)
}

// Host returns the named host.
func (c *Cluster) Host(name string) (Host, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, err := c.st.host(name)
	if err != nil {
		return Host{}, err
	}
	return hostOf(*h), nil
}

// Resources returns what the instance created on the machine.
func (c *Cluster) Resources() Resources {
	c.mu.Lock()
	defer c.mu.Unlock()
	return resourcesOf(c.st, c.dir)
}

func hostOf(h hostState) Host {
	return Host{Name: h.Name, Address: h.Address, Port: SSHPort, User: SSHUser}
}

func hostsOf(st *instanceState) []Host {
	out := make([]Host, 0, len(st.Hosts))
	for _, h := range st.Hosts {
		out = append(out, hostOf(h))
	}
	return out
}
