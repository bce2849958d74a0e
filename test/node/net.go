package node

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/kao-io/kao/internal/machine"
)

// createNodeNetwork creates the node's network namespace and the veth that
// joins it to the machine: the machine's end holds a.Host and routes the
// pod, Service and load-balancer ranges to the node, where kube-proxy's
// rules take them; the node's end (eth0) holds a.Node. The
// namespace and the link must not exist yet. Everything the node adds to
// its network (the CNI bridge, the pods' veths, kube-proxy's and portmap's
// iptables rules, sysctls) lives in the namespace and goes with it.
func createNodeNetwork(ctx context.Context, netns, veth string, a addresses) error {
	if machine.NetnsExists(netns) || machine.LinkExists(veth) {
		return fmt.Errorf("network namespace %s or link %s already exists and is not ours", netns, veth)
	}
	steps := [][]string{
		{"netns", "add", netns},
		{"-n", netns, "link", "set", "lo", "up"},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns},
		{"addr", "add", netip.PrefixFrom(a.Host, a.Link.Bits()).String(), "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", netns, "addr", "add", netip.PrefixFrom(a.Node, a.Link.Bits()).String(), "dev", "eth0"},
		{"-n", netns, "link", "set", "eth0", "up"},
		{"-n", netns, "route", "add", "default", "via", a.Host.String()},
		{"route", "add", a.Pods.String(), "via", a.Node.String(), "dev", veth},
		{"route", "add", a.Services.String(), "via", a.Node.String(), "dev", veth},
		{"route", "add", a.LoadBalancers.String(), "via", a.Node.String(), "dev", veth},
	}
	for _, args := range steps {
		if _, err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("creating the node's network: %w", err)
		}
	}
	// Pod to Service to a pod on the same bridge: the reply must pass
	// iptables to be un-NATed. The setting is per network namespace.
	if _, err := run(ctx, "nsenter", "--net="+machine.NetnsPath(netns), "--", "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"); err != nil {
		return fmt.Errorf("creating the node's network: %w", err)
	}
	return nil
}

// deleteNodeNetwork deletes the link (its routes go with it) and the
// namespace, if they exist.
func deleteNodeNetwork(ctx context.Context, netns, veth string) error {
	if veth != "" && machine.LinkExists(veth) {
		if _, err := run(ctx, "ip", "link", "del", veth); err != nil && machine.LinkExists(veth) {
			return fmt.Errorf("deleting link %s: %w", veth, err)
		}
	}
	if netns != "" && machine.NetnsExists(netns) {
		if _, err := run(ctx, "ip", "netns", "del", netns); err != nil && machine.NetnsExists(netns) {
			return fmt.Errorf("deleting network namespace %s: %w", netns, err)
		}
	}
	return nil
}

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	// Deepest first. A path mounted twice is listed twice: each unmount of
	// it takes the topmost mount.
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint reports whether dir is a mount point.
func isMountPoint(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && unescapeMount(f[4]) == dir {
			return true
		}
	}
	return false
}
