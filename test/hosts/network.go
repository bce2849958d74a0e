package hosts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/kao-io/kao/internal/machine"
)

// maxIfName is the longest network interface name Linux accepts (IFNAMSIZ-1).
const maxIfName = 15

// containerIf is the name of each host's interface inside its namespace.
const containerIf = "eth0"

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
	if machine.LinkExists(name) {
		return fmt.Errorf("bridge %s already exists and is not ours", name)
	}
	steps := [][]string{
		{"link", "add", name, "type", "bridge", "stp_state", "0", "forward_delay", "0"},
		{"addr", "add", addrCIDR, "dev", name},
		{"link", "set", name, "up"},
	}
	for _, args := range steps {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("creating bridge %s: %w", name, err)
		}
	}
	return nil
}

// createNetns creates a named network namespace with its loopback up. It must
// not exist yet.
func createNetns(ctx context.Context, name string) error {
	if machine.NetnsExists(name) {
		return fmt.Errorf("network namespace %s already exists and is not ours", name)
	}
	if err := run(ctx, "ip", "netns", "add", name); err != nil {
		return fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	if err := run(ctx, "ip", "-n", name, "link", "set", "lo", "up"); err != nil {
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
	if machine.LinkExists(veth) {
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
		if err := run(ctx, "ip", args...); err != nil {
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
	if err := run(ctx, "ip", "link", "set", name, state); err != nil {
		return fmt.Errorf("setting %s %s: %w", name, state, err)
	}
	return nil
}

// deleteLink deletes a root-namespace link if it exists.
func deleteLink(ctx context.Context, name string) error {
	if name == "" || !machine.LinkExists(name) {
		return nil
	}
	if err := run(ctx, "ip", "link", "del", name); err != nil && machine.LinkExists(name) {
		return fmt.Errorf("deleting link %s: %w", name, err)
	}
	return nil
}

// deleteNetns deletes a named network namespace if it exists.
func deleteNetns(ctx context.Context, name string) error {
	if name == "" || !machine.NetnsExists(name) {
		return nil
	}
	if err := run(ctx, "ip", "netns", "del", name); err != nil && machine.NetnsExists(name) {
		return fmt.Errorf("deleting network namespace %s: %w", name, err)
	}
	return nil
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
