package machine

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func TestParseRoutes(t *testing.T) {
	out := `default via 172.16.0.1 dev eth0
10.213.0.0/24 dev kaobr0 proto kernel scope link src 10.213.0.1
local 10.213.1.1 dev kaobr1 table local proto kernel scope host src 10.213.1.1
broadcast 10.213.2.255 dev x table local proto kernel scope link src 10.213.2.1
172.16.0.0/16 dev eth0 proto kernel scope link src 172.16.0.2
unreachable 10.99.0.0/16
`
	got := ParseRoutes(out)
	want := []string{"10.213.0.0/24", "10.213.1.1/32", "10.213.2.255/32", "172.16.0.0/16", "10.99.0.0/16"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("[%d] = %s, want %s", i, got[i], want[i])
		}
	}
}

func TestLockIsExclusiveEvenInOneProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.lock")
	a, ok, err := TryLock(path)
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := TryLock(path); err != nil || ok {
		t.Fatalf("a second lock on a held path: ok %v, err %v", ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := WaitLock(ctx, path); err == nil {
		t.Fatal("WaitLock got a held lock")
	}
	a.Unlock()
	b, err := WaitLock(context.Background(), path)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	b.Unlock()
	var none *Lock
	none.Unlock() // a nil Lock is a no-op
}
