package hosts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// netnsDir is where iproute2 binds named network namespaces.
const netnsDir = "/run/netns"

// maxIfName is the longest network interface name Linux accepts (IFNAMSIZ-1).
const maxIfName = 15

// containerIf is the name of each host's interface inside its namespace.
const containerIf = "eth0"

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

func netnsExists(name string) bool {
	_, err := os.Lstat(netnsPath(name))
	return err == nil
}

// linkExists reports whether a network interface exists in the root namespace.
func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

func checkIfName(name string) error {
	if len(name) == 0 || len(name) > maxIfName {
		return fmt.Errorf("interface name %q must be 1 to %d characters", name, maxIfName)
	}
	return nil
}

// createBridge creates a bridge with the given address (CIDR form) and brings
// it up. The bridge must not exist yet.
func createBridge(ctx context.Context, name, addrCIDR string) error {
	if err := checkIfName(name); err != nil {
		return err
	}
	if linkExists(name) {
		return fmt.Errorf("bridge %s already exists and is not ours", name)
	}
	steps := [][]string{
		{"link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		{"addr", "add", addrCIDR, "dev", name},
		{"link", "set", name, "up"},
	}
	for _, args := range steps {
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("creating bridge %s: %w", name, err)
		}
	}
	return nil
}

// createNetns creates a named network namespace with its loopback up. It must
// not exist yet.
func createNetns(ctx context.Context, name string) error {
	if netnsExists(name) {
		return fmt.Errorf("network namespace %s already exists and is not ours", name)
	}
	if _, err := run(ctx, "ip", "netns", "add", name); err != nil {
		return fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	if _, err := run(ctx, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
		return fmt.Errorf("bringing up loopback in %s: %w", name, err)
	}
	return nil
}

// createVeth creates a veth pair: veth in the root namespace, attached to the
// bridge and up; its peer named containerIf inside netns, holding addrCIDR and
// up. No route is added besides the subnet's own.
func createVeth(ctx context.Context, veth, bridge, netns, addrCIDR string) error {
	if err := checkIfName(veth); err != nil {
		return err
	}
	if linkExists(veth) {
		return fmt.Errorf("interface %s already exists and is not ours", veth)
	}
	steps := [][]string{
		{"link", "add", veth, "type", "veth", "peer", "name", containerIf, "netns", netns},
		{"link", "set", veth, "master", bridge},
		{"link", "set", veth, "up"},
		{"-n", netns, "addr", "add", addrCIDR, "dev", containerIf},
		{"-n", netns, "link", "set", containerIf, "up"},
	}
	for _, args := range steps {
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("creating link %s: %w", veth, err)
		}
	}
	return nil
}

// setLinkUp brings a root-namespace link up or down.
func setLinkUp(ctx context.Context, name string, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	if _, err := run(ctx, "ip", "link", "set", name, state); err != nil {
		return fmt.Errorf("setting %s %s: %w", name, state, err)
	}
	return nil
}

// deleteLink deletes a root-namespace link if it exists.
func deleteLink(ctx context.Context, name string) error {
	if name == "" || !linkExists(name) {
		return nil
	}
	if _, err := run(ctx, "ip", "link", "del", name); err != nil && linkExists(name) {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}

// deleteNetns deletes a named network namespace if it exists.
func deleteNetns(ctx context.Context, name string) error {
	if name == "" || !netnsExists(name) {
		return nil
	}
	if _, err := run(ctx, "ip", "netns", "del", name); err != nil && netnsExists(name) {
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	return nil
}

// usedPrefixes returns the IPv4 destinations of every route on the machine
// (all tables), except default routes. A subnet that overlaps one of them is
// already in use by someone.
func usedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	out, err := run(ctx, "ip", "-4", "-o", "route", "show", "table", "all")
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	return parseRoutes(out), nil
}

// routeTypes are the route type keywords that may precede a destination in
// `ip route` output.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"throw": true, "unreachable": true, "prohibit": true, "blackhole": true,
	"nat": true, "anycast": true,
}

// parseRoutes extracts destinations from `ip -4 -o route` output.
func parseRoutes(out string) []netip.Prefix {
	var prefixes []netip.Prefix
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		dst := f[0]
		if routeTypes[dst] && len(f) > 1 {
			dst = f[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil && p.Addr().Is4() && p.Bits() > 0 {
			prefixes = append(prefixes, p.Masked())
		}
	}
	return prefixes
}

// ipAdd returns the address n positions after a (IPv4 only).
func ipAdd(a netip.Addr, n int) (netip.Addr, error) {
	if !a.Is4() {
		return netip.Addr{}, errors.New("not an IPv4 address")
	}
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}
