package hosts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Option changes the Config that Start uses.
type Option func(*Config)

// WithName sets the instance name instead of one derived from the test.
func WithName(name string) Option { return func(c *Config) { c.Name = name } }

// WithSubnetPool sets the pool the instance's /24 comes from.
func WithSubnetPool(cidr string) Option { return func(c *Config) { c.SubnetPool = cidr } }

// WithStateRoot sets the shared state root.
func WithStateRoot(dir string) Option { return func(c *Config) { c.StateRoot = dir } }

// WithCacheDir sets the base root cache directory.
func WithCacheDir(dir string) Option { return func(c *Config) { c.CacheDir = dir } }

// WithHostPrefix sets the host name prefix.
func WithHostPrefix(prefix string) Option { return func(c *Config) { c.HostPrefix = prefix } }

// WithBootTimeout sets how long to wait for one host to boot.
func WithBootTimeout(d time.Duration) Option { return func(c *Config) { c.BootTimeout = d } }

// Start brings up n test hosts for a test and tears them down in t.Cleanup,
// also when the test fails. It skips the test in -short mode. Otherwise, if
// the machine cannot run test hosts (not Linux, not root, tools missing), it
// fails the test with what to install or do: a test that skipped would pass
// on a machine that never ran it. The first run on a machine builds the base
// root (about 2 minutes).
//
// The instance name is derived from the test's package directory and name, so
// a re-run replaces what a crashed earlier run left behind; the instance is
// owned by the test process, so if the test binary dies (a timeout), the next
// Up anywhere on the machine reclaims it.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	requireHosts(t)
	self, err := identify(os.Getpid())
	if err != nil {
		t.Fatalf("test hosts: %v", err)
	}
	cfg := Config{
		Name: testInstanceName(t.Name()),
		Logf: func(format string, args ...any) {
			t.Helper()
			t.Logf("test hosts: "+format, args...)
		},
		owner: &self,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if !claimName(cfg.Name) {
		t.Fatalf("test hosts: instance name %s is already in use in this test binary", cfg.Name)
	}
	t.Cleanup(func() { releaseName(cfg.Name) })

	// Registered before Up so that a failing or interrupted Up is cleaned too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := Down(ctx, cfg); err != nil {
			t.Errorf("test hosts: tearing down %s: %v", cfg.Name, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := Up(ctx, cfg, n)
	if err != nil {
		t.Fatalf("test hosts: up %d: %v", n, err)
	}
	return c
}

// requireHosts skips t in -short mode and fails it if this machine cannot run
// test hosts, saying what to install or do. It never skips otherwise: CI runs
// as root with the tools installed (.ci/run), and a skipped test would pass
// there even if it could not run.
func requireHosts(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("test hosts: skipped in -short mode (boots systemd-nspawn containers)")
	}
	if reason := Unsupported(); reason != "" {
		t.Fatalf("%s.\n"+
			"This test boots test hosts and runs in CI (.ci/run, as root with systemd-container, debootstrap, iproute2 and openssh-client). "+
			"To run it: sudo apt-get install systemd-container debootstrap iproute2 openssh-client, then sudo \"$(command -v go)\" test ./... "+
			"To skip it: go test -short.", reason)
	}
}

var (
	namesMu sync.Mutex
	names   = map[string]int{}
)

// claimName reserves an instance name within this process, so that two Start
// calls never replace each other's instance.
func claimName(name string) bool {
	namesMu.Lock()
	defer namesMu.Unlock()
	if names[name] > 0 {
		return false
	}
	names[name]++
	return true
}

func releaseName(name string) {
	namesMu.Lock()
	defer namesMu.Unlock()
	delete(names, name)
}

// testInstanceName derives a stable, valid instance name from the working
// directory (the test's package directory) and the test name.
func testInstanceName(testName string) string {
	wd, _ := os.Getwd()
	sum := sha256.Sum256([]byte(wd + "\x00" + testName))
	readable := sanitizeName(filepath.Base(wd) + "-" + testName)
	if len(readable) > 38 {
		readable = strings.TrimRight(readable[:38], "-")
	}
	return fmt.Sprintf("%s-%s", readable, hex.EncodeToString(sum[:])[:8])
}

// sanitizeName lower-cases s and turns every run of characters outside
// [a-z0-9] into one dash.
func sanitizeName(s string) string {
	var b strings.Builder
	dash := true
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if out == "" {
		out = "t"
	}
	return out
}
