package readiness

import (
	"testing"
	"time"
)

// rounds builds a report from one string per server, a character per round:
// '+' ready, '-' not.
func rounds(servers map[string]string) Report {
	var r Report
	n := 0
	for _, s := range servers {
		n = max(n, len(s))
	}
	for i := range n {
		round := Round{At: time.Unix(int64(i), 0), Ready: map[string]bool{}}
		for u, s := range servers {
			round.Ready[u] = s[i] == '+'
		}
		r.Rounds = append(r.Rounds, round)
	}
	return r
}

func TestOutagesFollowTheLoadBalancersThresholds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers map[string]string
		outages []int64
		blips   int
	}{
		{
			name:    "both fail one check at once: a blip, not an outage",
			servers: map[string]string{"a": "++-++", "b": "++-++"},
			blips:   1,
		},
		{
			name:    "both fail two checks in a row: still in rotation",
			servers: map[string]string{"a": "+--++", "b": "+--++"},
			blips:   2,
		},
		{
			name:    "both fail three in a row: out from the third",
			servers: map[string]string{"a": "+----++", "b": "+----++"},
			outages: []int64{3, 4, 5},
			blips:   4,
		},
		{
			name:    "one stays down while the other rolls: an outage once both are out",
			servers: map[string]string{"a": "+---------", "b": "++++---+++"},
			outages: []int64{6, 7},
			blips:   3,
		},
		{
			name:    "a rolling restart, one server at a time: no outage",
			servers: map[string]string{"a": "+-----++++++", "b": "+++++++-----"},
			blips:   0,
		},
		{
			name:    "back in rotation only after two passed checks",
			servers: map[string]string{"a": "---+-+--", "b": "--------"},
			outages: []int64{2, 3, 4, 5, 6, 7},
			blips:   6,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rounds(tc.servers)
			var got []int64
			for _, o := range r.Outages() {
				got = append(got, o.At.Unix())
			}
			if len(got) != len(tc.outages) {
				t.Fatalf("outages at rounds %v, want %v", got, tc.outages)
			}
			for i := range got {
				if got[i] != tc.outages[i] {
					t.Fatalf("outages at rounds %v, want %v", got, tc.outages)
				}
			}
			if b := len(r.Blips()); b != tc.blips {
				t.Errorf("%d blips, want %d", b, tc.blips)
			}
		})
	}
}
