package hosts

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

const (
	// DefaultStateRoot is the directory shared by all harness instances on the
	// machine: the allocation lock, per-instance locks and instance state
	// directories live below it. It is on disk rather than on /run because host
	// upper directories can grow large (binaries copied onto the hosts).
	DefaultStateRoot = "/var/lib/kao-hosts"

	// DefaultSubnetPool is the private range whose /24 subnets the harness hands
	// out, one per instance.
	DefaultSubnetPool = "10.213.0.0/16"

	// DefaultHostPrefix is the prefix of host names: node1, node2, ...
	DefaultHostPrefix = "node"

	// DefaultBootTimeout bounds how long Up and Start wait for a host to answer SSH
	// and report a finished boot.
	DefaultBootTimeout = 3 * time.Minute

	// SSHPort is the port sshd listens on in every host.
	SSHPort = 22

	// SSHUser is the user the harness logs in as.
	SSHUser = "root"

	// MaxHosts is the largest number of hosts one instance may have.
	MaxHosts = 100

	// EnvStateRoot overrides DefaultStateRoot.
	EnvStateRoot = "KAO_HOSTS_STATE_ROOT"
	// EnvCache overrides the base root cache directory.
	EnvCache = "KAO_HOSTS_CACHE"
	// EnvSubnetPool overrides DefaultSubnetPool.
	EnvSubnetPool = "KAO_HOSTS_SUBNET_POOL"
	// EnvMirror overrides the Debian mirror taken from the machine's apt sources.
	EnvMirror = "KAO_HOSTS_MIRROR"
)

var (
	instanceNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$`)
	hostPrefixRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)
)

// Config describes one harness instance. The zero value of every field except
// Name means "use the default" (environment variable first, then the built-in
// default).
type Config struct {
	// Name identifies the instance; lower-case letters, digits and dashes, at
	// most 48 characters. Required.
	Name string
	// StateRoot is the directory shared by all instances; see DefaultStateRoot
	// and EnvStateRoot.
	StateRoot string
	// CacheDir holds cached base roots; default $KAO_HOSTS_CACHE, else
	// ${XDG_CACHE_HOME:-$HOME/.cache}/kao/hosts.
	CacheDir string
	// SubnetPool is an IPv4 prefix of length /24 or shorter from which the
	// instance's /24 subnet is taken; see DefaultSubnetPool and EnvSubnetPool.
	SubnetPool string
	// Mirror is the Debian archive URL used to build the base root; default
	// $KAO_HOSTS_MIRROR, else the first Debian archive in the machine's apt
	// sources.
	Mirror string
	// HostPrefix is the prefix of host names; see DefaultHostPrefix.
	HostPrefix string
	// BootTimeout bounds the wait for one host to boot; see DefaultBootTimeout.
	BootTimeout time.Duration
	// Logf receives progress messages; nil discards them.
	Logf func(format string, args ...any)

	// owner, when set, is the process that owns the instance: once it is gone,
	// any later Up on the machine may reclaim the instance. Start sets it to the
	// test process so that a test binary killed by its timeout leaves nothing
	// for long. Instances made by the CLI have no owner and live until Down.
	owner *processID
}

// complete returns a copy of c with defaults filled in, or an error if a
// field is invalid.
func (c Config) complete() (Config, error) {
	if err := ValidateName(c.Name); err != nil {
		return c, err
	}
	return c.completeShared()
}

// ValidateName checks an instance name.
func ValidateName(name string) error {
	if !instanceNameRE.MatchString(name) {
		return fmt.Errorf("invalid instance name %q: want lower-case letters, digits and dashes, at most 48 characters", name)
	}
	return nil
}

// completeShared fills in and checks every field except Name.
func (c Config) completeShared() (Config, error) {
	c.StateRoot = firstNonEmpty(c.StateRoot, os.Getenv(EnvStateRoot), DefaultStateRoot)
	c.SubnetPool = firstNonEmpty(c.SubnetPool, os.Getenv(EnvSubnetPool), DefaultSubnetPool)
	c.HostPrefix = firstNonEmpty(c.HostPrefix, DefaultHostPrefix)
	if c.BootTimeout <= 0 {
		c.BootTimeout = DefaultBootTimeout
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.CacheDir == "" {
		dir, err := defaultCacheDir()
		if err != nil {
			return c, err
		}
		c.CacheDir = dir
	}
	var err error
	if c.StateRoot, err = cleanPath("state root", c.StateRoot); err != nil {
		return c, err
	}
	if c.CacheDir, err = cleanPath("cache dir", c.CacheDir); err != nil {
		return c, err
	}
	if _, err := parseSubnetPool(c.SubnetPool); err != nil {
		return c, err
	}
	if !hostPrefixRE.MatchString(c.HostPrefix) {
		return c, fmt.Errorf("invalid host prefix %q: want a lower-case letter, then letters, digits and dashes, at most 20 characters", c.HostPrefix)
	}
	return c, nil
}

// defaultCacheDir returns $KAO_HOSTS_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/kao/hosts,
// matching hack/tools.sh's layout.
func defaultCacheDir() (string, error) {
	if dir := os.Getenv(EnvCache); dir != "" {
		return dir, nil
	}
	if xdg := os.Getenv("XDG_CACHE_HOME"); xdg != "" {
		return filepath.Join(xdg, "kao", "hosts"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding the cache directory (set %s): %w", EnvCache, err)
	}
	return filepath.Join(home, ".cache", "kao", "hosts"), nil
}

// cleanPath checks that p is absolute and safe to pass in systemd-nspawn's
// --overlay= syntax, and returns it cleaned.
func cleanPath(what, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s %q is not an absolute path", what, p)
	}
	if strings.ContainsAny(p, ":,\n") {
		return "", fmt.Errorf("%s %q must not contain ':', ',' or newlines", what, p)
	}
	return filepath.Clean(p), nil
}

// parseSubnetPool parses an IPv4 prefix of length /24 or shorter.
func parseSubnetPool(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid subnet pool %q: %w", s, err)
	}
	if !p.Addr().Is4() || p.Bits() > 24 || p.Bits() < 8 {
		return netip.Prefix{}, fmt.Errorf("invalid subnet pool %q: want an IPv4 prefix between /8 and /24", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("invalid subnet pool %q: host bits set (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
