package hosts

import "testing"

func TestOverlap(t *testing.T) {
	for _, c := range []struct {
		rs   []Restart
		want bool
	}{
		{[]Restart{{Down: 10, Up: 20}, {Down: 20, Up: 30}, {Down: 35, Up: 40}}, false},
		{[]Restart{{Down: 35, Up: 40}, {Down: 10, Up: 20}}, false},
		{[]Restart{{Down: 10, Up: 20}, {Down: 19, Up: 30}}, true},
		{[]Restart{{Down: 19, Up: 30}, {Down: 10, Up: 20}}, true},
		{[]Restart{{Down: 10, Up: 20}, {Down: 10, Up: 12}}, true},
		{nil, false},
	} {
		if got := Overlap(c.rs); got != c.want {
			t.Errorf("Overlap(%v) = %v, want %v", c.rs, got, c.want)
		}
	}
}
