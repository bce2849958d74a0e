package machine

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NetnsDir is where iproute2 binds named network namespaces.
const NetnsDir = "/run/netns"

// NetnsPath is the bind mount of the named network namespace.
func NetnsPath(name string) string { return filepath.Join(NetnsDir, name) }

// NetnsExists says whether a named network namespace exists.
func NetnsExists(name string) bool {
	_, err := os.Lstat(NetnsPath(name))
	return err == nil
}

// LinkExists says whether a network interface exists in the machine's own
// network namespace.
func LinkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// UsedPrefixes returns the IPv4 destinations of every route on the machine
// (all tables), except default routes: an address block that overlaps one is
// in use by someone.
func UsedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "-4", "-o", "route", "show", "table", "all")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("listing routes: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return ParseRoutes(stdout.String()), nil
}

// routeTypes are the route type keywords that may precede a destination in
// `ip route` output.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true,
	"throw": true, "unreachable": true, "prohibit": true, "blackhole": true,
	"nat": true, "anycast": true,
}

// ParseRoutes extracts the destinations of `ip -4 -o route` output.
func ParseRoutes(out string) []netip.Prefix {
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
