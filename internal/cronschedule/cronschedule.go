// Package cronschedule reads an EtcdBackup's spec.schedule, for the backup
// controller (when to take a snapshot) and the metrics (how often one is
// due), so that both read it the same way.
package cronschedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Parse parses spec.schedule: five cron fields or a descriptor, in UTC.
// A nil schedule means a one-shot backup.
func Parse(spec string) (cron.Schedule, error) {
	if spec == "" {
		return nil, nil
	}
	// The API admits neither; cron would run them in another zone or at a
	// fixed interval from the operator's start.
	if strings.Contains(spec, "TZ=") || strings.HasPrefix(spec, "@every") {
		return nil, fmt.Errorf("spec.schedule %q: time zones and @every are not supported: schedules are five cron fields in UTC", spec)
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("spec.schedule %q: %w", spec, err)
	}
	return s, nil
}

// gapSamples is how many gaps between schedule times LongestGap looks at:
// enough to cover a week of daily times or the irregular gaps of a list
// such as "0 0 1,15 * *".
const gapSamples = 8

// LongestGap is the longest gap between the next times of a schedule after
// now: the period a backup's last snapshot may be compared with. Zero for a
// one-shot backup (nil) or a schedule that never fires.
func LongestGap(s cron.Schedule, now time.Time) time.Duration {
	if s == nil {
		return 0
	}
	var longest time.Duration
	t := s.Next(now.UTC())
	for i := 0; i < gapSamples && !t.IsZero(); i++ {
		next := s.Next(t)
		if next.IsZero() {
			break
		}
		longest = max(longest, next.Sub(t))
		t = next
	}
	return longest
}
