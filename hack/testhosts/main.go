// Command testhosts manages kao's test hosts: Debian bookworm machines booted
// with systemd-nspawn on this machine, each in its own network namespace and
// reachable over SSH with host key checking on. It is a thin front end to
// package github.com/kao-io/kao/test/hosts, which the Go tests use too.
//
//	go run ./hack/testhosts up 3
//	go run ./hack/testhosts status
//	go run ./hack/testhosts ssh node1 systemctl is-system-running
//	go run ./hack/testhosts down
//
// See hack/testhosts/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kao-io/kao/test/hosts"
)

const usage = `Usage: testhosts [flags] COMMAND [ARGS]

Commands:
  up N             boot N hosts (an earlier instance of the same name is removed first)
  down             power off and remove everything the instance created
  status           show the instance's hosts and their state
  ssh HOST [CMD]   ssh to a host as root, host key checked against known_hosts
  stop HOST        power a host off abruptly (its disk, address and keys survive)
  fail HOST        power a host off silently, as a power loss: cut, then stopped
                   (its connections hear no end); restore, then start, brings it back
  start HOST       power a stopped host on and wait for it to boot
  cut HOST         cut a host off the network
  restore HOST     reconnect a cut host
  base             build the cached Debian base root if needed; print its path
  list             list the instances on this machine

Flags:
`

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("testhosts", flag.ContinueOnError)
	fs.Usage = func() {
		// Nothing useful to do if the usage text cannot be written.
		_, _ = fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	cfg := hosts.Config{}
	fs.StringVar(&cfg.Name, "name", envOr("KAO_HOSTS_NAME", "kao"), "instance name (env KAO_HOSTS_NAME)")
	fs.StringVar(&cfg.StateRoot, "state-root", "", "state root shared by all instances (default $"+hosts.EnvStateRoot+" or "+hosts.DefaultStateRoot+")")
	fs.StringVar(&cfg.CacheDir, "cache", "", "base root cache (default $"+hosts.EnvCache+" or ~/.cache/kao/hosts)")
	fs.StringVar(&cfg.SubnetPool, "subnet-pool", "", "IPv4 pool to take the instance's /24 from (default $"+hosts.EnvSubnetPool+" or "+hosts.DefaultSubnetPool+")")
	fs.StringVar(&cfg.Mirror, "mirror", "", "Debian mirror for the base build (default $"+hosts.EnvMirror+" or the machine's apt sources)")
	fs.StringVar(&cfg.HostPrefix, "prefix", "", "host name prefix (default "+hosts.DefaultHostPrefix+")")
	fs.DurationVar(&cfg.BootTimeout, "boot-timeout", 0, "how long to wait for one host to boot (default "+hosts.DefaultBootTimeout.String()+")")
	asJSON := fs.Bool("json", false, "status: print JSON")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s testhosts: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	args := fs.Args()
	if len(args) == 0 {
		fs.Usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dispatch(ctx, cfg, args[0], args[1:], *asJSON); err != nil {
		var usageErr usageError
		if errors.As(err, &usageErr) {
			fmt.Fprintf(os.Stderr, "testhosts: %v\n\n", err)
			fs.Usage()
			return 2
		}
		fmt.Fprintf(os.Stderr, "testhosts: %v\n", err)
		return 1
	}
	return 0
}

// usageError is a mistake in the command line.
type usageError string

func (e usageError) Error() string { return string(e) }

func dispatch(ctx context.Context, cfg hosts.Config, cmd string, args []string, asJSON bool) error {
	switch cmd {
	case "up":
		return up(ctx, cfg, args)
	case "down":
		if len(args) != 0 {
			return usageError("down takes no arguments")
		}
		return hosts.Down(ctx, cfg)
	case "status":
		if len(args) != 0 {
			return usageError("status takes no arguments")
		}
		return status(cfg, asJSON)
	case "ssh":
		if len(args) < 1 {
			return usageError("ssh needs a host")
		}
		return sshTo(cfg, args[0], args[1:])
	case "stop", "fail", "start", "cut", "restore":
		if len(args) != 1 {
			return usageError(cmd + " needs exactly one host")
		}
		return hostAction(ctx, cfg, cmd, args[0])
	case "base":
		path, _, err := hosts.EnsureBase(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Println(path)
		return nil
	case "list":
		return list(cfg)
	default:
		return usageError(fmt.Sprintf("unknown command %q", cmd))
	}
}

func up(ctx context.Context, cfg hosts.Config, args []string) error {
	if len(args) != 1 {
		return usageError("up needs the number of hosts")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return usageError(fmt.Sprintf("up: %q is not a number", args[0]))
	}
	start := time.Now()
	c, err := hosts.Up(ctx, cfg, n)
	if err != nil {
		return err
	}
	fmt.Printf("%d hosts up in %s (boot %s)\n", n, time.Since(start).Round(10*time.Millisecond), c.BootDuration().Round(10*time.Millisecond))
	return printStatus(c)
}

func status(cfg hosts.Config, asJSON bool) error {
	c, err := hosts.Open(cfg)
	if err != nil {
		return err
	}
	if asJSON {
		st, err := c.Status()
		if err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Instance   string             `json:"instance"`
			Subnet     string             `json:"subnet"`
			Gateway    string             `json:"gateway"`
			StateDir   string             `json:"stateDir"`
			PrivateKey string             `json:"privateKey"`
			KnownHosts string             `json:"knownHosts"`
			Hosts      []hosts.HostStatus `json:"hosts"`
		}{c.Name(), c.Subnet(), c.Gateway(), c.StateDir(), c.PrivateKeyPath(), c.KnownHostsPath(), st})
	}
	return printStatus(c)
}

func printStatus(c *hosts.Cluster) error {
	st, err := c.Status()
	if err != nil {
		return err
	}
	fmt.Printf("instance:    %s\nsubnet:      %s (machine is %s)\nstate dir:   %s\nprivate key: %s\nknown_hosts: %s\nhosts file:  %s\ninventory:   %s\nssh config:  %s\n\n",
		c.Name(), c.Subnet(), c.Gateway(), c.StateDir(), c.PrivateKeyPath(), c.KnownHostsPath(), c.HostsFilePath(), c.InventoryPath(), c.SSHConfigPath())
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	// tabwriter buffers: a failing stdout shows up in the error of Flush.
	_, _ = fmt.Fprintln(w, "HOST\tADDRESS\tPOWER\tNETWORK\tPID")
	for _, h := range st {
		power, network, pid := "off", "connected", "-"
		if h.PoweredOn {
			power, pid = "on", strconv.Itoa(h.PID)
		}
		if h.Cut {
			network = "cut"
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", h.Name, h.Address, power, network, pid)
	}
	return w.Flush()
}

// sshTo replaces this process with ssh, so that an interactive session gets
// the terminal.
func sshTo(cfg hosts.Config, host string, remote []string) error {
	c, err := hosts.Open(cfg)
	if err != nil {
		return err
	}
	cmd, err := c.SSHCommand(context.Background(), host, remote...)
	if err != nil {
		return err
	}
	argv := append([]string{"ssh"}, cmd.Args[1:]...)
	if err := syscall.Exec(cmd.Path, argv, cmd.Env); err != nil {
		return fmt.Errorf("running %s: %w", cmd.Path, err)
	}
	return nil
}

func hostAction(ctx context.Context, cfg hosts.Config, action, host string) error {
	c, err := hosts.Open(cfg)
	if err != nil {
		return err
	}
	switch action {
	case "stop":
		return c.Stop(ctx, host)
	case "fail":
		return c.Fail(ctx, host)
	case "start":
		return c.Start(ctx, host)
	case "cut":
		return c.Cut(ctx, host)
	default:
		return c.Restore(ctx, host)
	}
}

func list(cfg hosts.Config) error {
	names, err := hosts.Instances(cfg)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	// tabwriter buffers: a failing stdout shows up in the error of Flush.
	_, _ = fmt.Fprintln(w, "INSTANCE\tSUBNET\tHOSTS\tPOWERED ON")
	for _, name := range names {
		c, err := hosts.Open(hosts.Config{Name: name, StateRoot: cfg.StateRoot})
		if err != nil {
			_, _ = fmt.Fprintf(w, "%s\t(%v)\t\t\n", name, err)
			continue
		}
		st, err := c.Status()
		if err != nil {
			_, _ = fmt.Fprintf(w, "%s\t(%v)\t\t\n", name, err)
			continue
		}
		on := 0
		for _, h := range st {
			if h.PoweredOn {
				on++
			}
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", name, c.Subnet(), len(st), on)
	}
	return w.Flush()
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}
