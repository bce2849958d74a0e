package pipeline

import (
	"regexp"
	"testing"
	"time"
)

// TestNewRunIDSortsWithinASecond: runs started within one second sort in
// the order they started, whatever their random suffixes, and every ID is
// a valid label value and name part.
func TestNewRunIDSortsWithinASecond(t *testing.T) {
	start := time.Date(2026, 11, 26, 12, 50, 33, 0, time.FixedZone("CET", 3600))
	valid := regexp.MustCompile(`^[0-9]{8}-[0-9]{6}-[0-9]{3}-[0-9a-f]{4}$`)
	prev := ""
	for ms := 0; ms < 1000; ms += 7 {
		id := NewRunID(start.Add(time.Duration(ms) * time.Millisecond))
		if !valid.MatchString(id) {
			t.Fatalf("run ID %q is not date-time-milliseconds-suffix", id)
		}
		if id <= prev {
			t.Fatalf("run ID %q, started after %q, does not sort after it", id, prev)
		}
		prev = id
	}
	if id := NewRunID(start); id[:19] != "20261126-115033-000" {
		t.Errorf("run ID %q is not in UTC", id)
	}
}
