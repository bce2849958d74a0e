package hosts

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/machine"
)

func TestPickMirror(t *testing.T) {
	root := t.TempDir()
	deb822 := `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
Components: main
`
	mustWrite(t, filepath.Join(root, "etc/apt/sources.list.d/debian.sources"), deb822)
	mustWrite(t, filepath.Join(root, "etc/apt/sources.list"), "# nothing here\n")
	got, err := aptMirror(root, "bookworm")
	if err != nil || got != "http://deb.example.org/debian" {
		t.Errorf("deb822: got %q, %v", got, err)
	}

	root = t.TempDir()
	mustWrite(t, filepath.Join(root, "etc/apt/sources.list"), `deb http://security.example.org/debian-security bookworm-security main
deb [arch=amd64 signed-by=/x.gpg] https://mirror.example.net/debian trixie main
deb-src http://src.example.net/debian bookworm main
deb http://mirror.example.com/debian bookworm main # the one
`)
	got, err = aptMirror(root, "bookworm")
	if err != nil || got != "http://mirror.example.com/debian" {
		t.Errorf("one-line: got %q, %v", got, err)
	}
	got, err = aptMirror(root, "sid")
	if err != nil || got != "https://mirror.example.net/debian" {
		t.Errorf("one-line, other suite: got %q, %v", got, err)
	}

	if _, err := aptMirror(t.TempDir(), "bookworm"); err == nil {
		t.Error("no sources: want an error")
	}
}

func TestParseRoutesAndPickSubnet(t *testing.T) {
	out := `default via 172.16.0.1 dev eth0
10.213.0.0/24 dev kaobr0 proto kernel scope link src 10.213.0.1
local 10.213.1.1 dev kaobr1 table local proto kernel scope host src 10.213.1.1
broadcast 10.213.2.255 dev x table local proto kernel scope link src 10.213.2.1
172.16.0.0/16 dev eth0 proto kernel scope link src 172.16.0.2
`
	got := machine.ParseRoutes(out)
	want := []string{"10.213.0.0/24", "10.213.1.1/32", "10.213.2.255/32", "172.16.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("parseRoutes: got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("parseRoutes[%d] = %s, want %s", i, got[i], want[i])
		}
	}
	pool := netip.MustParsePrefix("10.213.0.0/16")
	sub, err := pickSubnet(pool, got)
	if err != nil || sub.String() != "10.213.3.0/24" {
		t.Errorf("pickSubnet: got %s, %v; want 10.213.3.0/24", sub, err)
	}
	if _, err := pickSubnet(netip.MustParsePrefix("10.213.0.0/24"), got); err == nil {
		t.Error("pickSubnet on a full pool: want an error")
	}
}

func TestConfigValidation(t *testing.T) {
	for _, bad := range []Config{
		{Name: ""},
		{Name: "Upper"},
		{Name: "a_b"},
		{Name: strings.Repeat("a", 49)},
		{Name: "ok", SubnetPool: "10.213.0.0/25"},
		{Name: "ok", SubnetPool: "10.213.0.1/16"},
		{Name: "ok", SubnetPool: "fd00::/64"},
		{Name: "ok", StateRoot: "relative"},
		{Name: "ok", StateRoot: "/a:b"},
		{Name: "ok", HostPrefix: "9x"},
	} {
		if _, err := bad.complete(); err == nil {
			t.Errorf("%+v: want an error", bad)
		}
	}
	good, err := Config{Name: "kao", CacheDir: "/tmp/c", StateRoot: "/tmp/s/"}.complete()
	if err != nil {
		t.Fatal(err)
	}
	if good.StateRoot != "/tmp/s" || good.HostPrefix != DefaultHostPrefix || good.BootTimeout != DefaultBootTimeout {
		t.Errorf("defaults not applied: %+v", good)
	}
}

func TestNames(t *testing.T) {
	for _, name := range []string{"TestHosts", "TestHosts/sub test", strings.Repeat("TestVeryLong", 10), "___"} {
		got := testInstanceName(name)
		if err := ValidateName(got); err != nil {
			t.Errorf("testInstanceName(%q) = %q: %v", name, got, err)
		}
		if got != testInstanceName(name) {
			t.Errorf("testInstanceName(%q) is not stable", name)
		}
	}
	if testInstanceName("TestA") == testInstanceName("TestB") {
		t.Error("different tests got the same instance name")
	}
	for _, n := range []string{bridgeName(maxIndex), vethName(maxIndex, MaxHosts)} {
		if len(n) > maxIfName {
			t.Errorf("interface name %q longer than %d", n, maxIfName)
		}
	}
	if k := BaseKey(); len(k) != 12 || k != BaseKey() {
		t.Errorf("BaseKey() = %q", k)
	}
}

func TestPackagesFor(t *testing.T) {
	got := packagesFor([]string{"ssh", "systemd-nspawn", "ssh-keygen", "ip", "debootstrap"})
	want := "openssh-client systemd-container iproute2 debootstrap"
	if strings.Join(got, " ") != want {
		t.Errorf("packagesFor: got %v, want %s", got, want)
	}
	for _, tool := range requiredTools {
		if toolPackages[tool] == "" {
			t.Errorf("required tool %s has no package in toolPackages", tool)
		}
	}
}

func TestProcAndMountinfoHelpers(t *testing.T) {
	self, err := identify(os.Getpid())
	if err != nil || !self.alive() {
		t.Fatalf("identify self: %+v, %v", self, err)
	}
	if (processID{PID: self.PID, Start: self.Start + 1}).alive() {
		t.Error("a process with another start time must not count as alive")
	}
	if got := unescapeMountinfo(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("unescapeMountinfo: %q", got)
	}
	if got := stripANSI("\x1b[0;32m  OK  \x1b[0m] Started"); got != "  OK  ] Started" {
		t.Errorf("stripANSI: %q", got)
	}
}

// TestParallelInstances brings up two instances at the same time and checks
// that they get their own subnet and bridge and cannot reach each other.
func TestParallelInstances(t *testing.T) {
	requireHosts(t)
	self, err := identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// Build (or find) the base first so that both Ups time only the boot.
	if _, _, err := EnsureBase(ctx, Config{Logf: t.Logf}); err != nil {
		t.Fatal(err)
	}
	cfgs := make([]Config, 2)
	for i, suffix := range []string{"a", "b"} {
		cfgs[i] = Config{Name: testInstanceName(t.Name() + "-" + suffix), Logf: t.Logf, owner: &self}
		cfg := cfgs[i]
		t.Cleanup(func() {
			dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer dcancel()
			if err := Down(dctx, cfg); err != nil {
				t.Errorf("down %s: %v", cfg.Name, err)
			}
		})
	}
	clusters := make([]*Cluster, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = Up(ctx, cfgs[i], 1)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	a, b := clusters[0], clusters[1]
	if a.Subnet() == b.Subnet() {
		t.Errorf("both instances got subnet %s", a.Subnet())
	}
	ra, rb := a.Resources(), b.Resources()
	if ra.Links[0] == rb.Links[0] || ra.Netns[0] == rb.Netns[0] {
		t.Errorf("instances share names: %+v %+v", ra, rb)
	}
	for _, pair := range [][2]*Cluster{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		if out, err := from.Run(ctx, "node1", "systemctl is-system-running"); err != nil || strings.TrimSpace(out) != "running" {
			t.Errorf("%s/node1: %q, %v", from.Name(), out, err)
		}
		// Different subnets and no default route: the kernel has no route.
		if _, err := from.Run(ctx, "node1", "ip route get "+to.Hosts()[0].Address); err == nil {
			t.Errorf("%s/node1 has a route to %s/node1", from.Name(), to.Name())
		}
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
