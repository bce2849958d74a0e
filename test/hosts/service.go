package hosts

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ServiceArgv returns the command line of the main process of a systemd
// service on host.
func (c *Cluster) ServiceArgv(ctx context.Context, host, service string) ([]string, error) {
	out, err := c.Run(ctx, host, `pid=$(systemctl show -p MainPID --value `+service+`); [ "$pid" != 0 ] || { echo "`+service+` does not run" >&2; exit 1; }; base64 -w0 "/proc/$pid/cmdline"`)
	if err != nil {
		return nil, fmt.Errorf("the command line of %s on %s: %w", service, host, err)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(out))
	if err != nil {
		return nil, fmt.Errorf("the command line of %s on %s: %w", service, host, err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00"), nil
}

// Restart is a systemd service's last restart on a host: when it went down
// and came up again in the host's monotonic clock (microseconds; the test
// hosts share the machine's), and when it went down in the wall clock, to
// the second.
type Restart struct {
	Host     string
	Down, Up int64
	DownAt   time.Time
}

func (r Restart) String() string { return fmt.Sprintf("%s down %d up %d", r.Host, r.Down, r.Up) }

// LastRestart reads service's last restart on host from systemd; it fails
// for a service that was never restarted there.
func (c *Cluster) LastRestart(ctx context.Context, host, service string) (Restart, error) {
	out, err := c.Run(ctx, host, "TZ=UTC systemctl show -p InactiveEnterTimestampMonotonic "+
		"-p ActiveEnterTimestampMonotonic -p InactiveEnterTimestamp "+service+".service")
	if err != nil {
		return Restart{}, fmt.Errorf("reading the restarts of %s on %s: %w", service, host, err)
	}
	props := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "=")
		props[k] = v
	}
	r := Restart{Host: host}
	r.Down, _ = strconv.ParseInt(props["InactiveEnterTimestampMonotonic"], 10, 64)
	r.Up, _ = strconv.ParseInt(props["ActiveEnterTimestampMonotonic"], 10, 64)
	if r.Down == 0 || r.Up < r.Down {
		return Restart{}, fmt.Errorf("%s was not restarted on %s: %q", service, host, out)
	}
	if r.DownAt, err = time.Parse("Mon 2006-01-02 15:04:05 MST", props["InactiveEnterTimestamp"]); err != nil {
		return Restart{}, fmt.Errorf("when %s last went down on %s: %w", service, host, err)
	}
	return r, nil
}

// Overlap tells whether two of the restarts had the service down at once:
// one went down before another was back up.
func Overlap(rs []Restart) bool {
	for i := range rs {
		for j := range rs {
			if i != j && rs[i].Down <= rs[j].Down && rs[j].Down < rs[i].Up {
				return true
			}
		}
	}
	return false
}
