package procfs

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	line := "4242 (a) b (c)) S 17 4200 4200 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
	st, err := parseStat(4242, line)
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stat{State: "S", PPID: 17, PGRP: 4200, Start: 987654}) || !st.Running() {
		t.Fatalf("got %+v", st)
	}
	for _, bad := range []string{"4242 no paren", "4242 (x) S 1 2", "4242 (x) S one 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"} {
		if _, err := parseStat(4242, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestReadStatOfAChild(t *testing.T) {
	c := exec.Command("sleep", "300")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	st, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st.PPID != os.Getpid() || st.PGRP != pid || !st.Running() || st.Start == 0 {
		t.Errorf("the sleep: %+v, want parent %d and its own group", st, os.Getpid())
	}
	pids, err := PIDs()
	if err != nil || !slices.Contains(pids, pid) {
		t.Errorf("PIDs does not list the sleep %d: %v", pid, err)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	// Reaped: its entry is gone, or the pid is another process's.
	if again, err := ReadStat(pid); err == nil && again.Start == st.Start {
		t.Errorf("a reaped process still reads as itself: %+v", again)
	}
}
