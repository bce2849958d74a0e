package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc is a /proc tree of the files the sampler reads.
type fakeProc struct {
	t   *testing.T
	dir string
}

func (p fakeProc) write(name, body string) {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// process writes /proc/PID/stat with the given name, user and system ticks
// and start time (in ticks since boot).
func (p fakeProc) process(pid int, comm string, utime, stime, start uint64) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime priority nice threads
	// itrealvalue starttime ...
	p.write(fmt.Sprintf("%d/stat", pid), fmt.Sprintf("%d (%s) S 1 1 1 0 -1 0 0 0 0 0 %d %d 0 0 20 0 1 0 %d 0 0\n", pid, comm, utime, stime, start))
}

// machine writes /proc/stat's cpu line and /proc/uptime.
func (p fakeProc) machine(user, system, idle, iowait uint64, uptimeSecs float64) {
	p.write("stat", fmt.Sprintf("cpu  %d 0 %d %d %d 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n", user, system, idle, iowait))
	p.write("uptime", fmt.Sprintf("%.2f 0.00\n", uptimeSecs))
}

func (p fakeProc) remove(pid int) {
	if err := os.RemoveAll(filepath.Join(p.dir, fmt.Sprint(pid))); err != nil {
		p.t.Fatal(err)
	}
}

// TestSamplerCountsWhatEachProgramUsed follows processes through three
// samples: one running before the first sample counts from it on, one that
// starts between samples counts whole, a reused pid is another process, and
// one that ends is counted up to the last sample that saw it.
func TestSamplerCountsWhatEachProgramUsed(t *testing.T) {
	p := fakeProc{t, t.TempDir()}
	s := newSampler(p.dir, 100)

	p.machine(1000, 500, 8000, 500, 100) // uptime 100 s: 10000 ticks
	p.process(10, "kube-apiserver", 700, 100, 50)
	p.process(11, "etcd", 200, 100, 60)
	s.sample()

	p.machine(1300, 600, 8100, 500, 102)
	p.process(10, "kube-apiserver", 800, 150, 50)   // +150
	p.process(11, "etcd", 230, 110, 60)             // +40
	p.process(12, "ansible-playboo", 30, 10, 10050) // new since the last sample: 40 whole
	s.sample()

	p.machine(1500, 700, 8200, 500, 104)
	p.process(10, "kube-apiserver", 850, 150, 50) // +50
	p.remove(11)                                  // etcd ended
	p.process(12, "kube-apiserver", 5, 5, 10390)  // pid 12 reused: a new process, 10 whole
	s.sample()

	want := map[string]uint64{"kube-apiserver": 150 + 50 + 10, "etcd": 40, "ansible-playboo": 40}
	for name, ticks := range want {
		if s.programs[name] != ticks {
			t.Errorf("%s: %d ticks, want %d (all: %v)", name, s.programs[name], ticks, s.programs)
		}
	}
	if len(s.programs) != len(want) {
		t.Errorf("programs %v, want only %v", s.programs, want)
	}

	var out bytes.Buffer
	s.machine[0].at = s.machine[2].at.Add(-4 * time.Second)
	s.machine[1].at = s.machine[2].at.Add(-2 * time.Second)
	if err := s.report(&out, 2*time.Second, 2); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// 700 busy ticks of 900 between the first and the last sample; each
	// period: 400 of 500, then 300 of 400. The top two programs are listed;
	// 700 less the 290 ticks counted is unaccounted for.
	for _, line := range []string{
		"[cpu] 4s on 2 CPUs, busy 78% of the time\n",
		"[cpu] busy per 2s: 80% 75%\n",
		"[cpu] CPU-seconds by program (7 s busy in all):\n",
		"[cpu]        2.1  kube-apiserver\n[cpu]        0.4  ansible-playboo\n[cpu]        4.1  (processes",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("report lacks %q:\n%s", line, got)
		}
	}
}

func TestParseProcStatTakesTheNameToTheLastParenthesis(t *testing.T) {
	comm, ticks, start, ok := parseProcStat("42 (a) b (c)) R 1 1 1 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 999 0 0\n")
	if !ok || comm != "a) b (c)" || ticks != 10 || start != 999 {
		t.Fatalf("got %q %d %d %v", comm, ticks, start, ok)
	}
	if _, _, _, ok := parseProcStat("42 (short) R 1 2"); ok {
		t.Fatal("a truncated stat parsed")
	}
}

func (p fakeProc) namespace(pid, mnt, cgroup string) {
	p.t.Helper()
	if err := os.MkdirAll(filepath.Join(p.dir, pid, "ns"), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Symlink(mnt, filepath.Join(p.dir, pid, "ns", "mnt")); err != nil {
		p.t.Fatal(err)
	}
	if cgroup != "" {
		p.write(pid+"/cgroup", cgroup)
	}
}

// TestSamplerTellsWhereAProgramRuns counts three kube-apiservers: one of
// this machine, one in a test host's mount namespace and one in a pod.
func TestSamplerTellsWhereAProgramRuns(t *testing.T) {
	p := fakeProc{t, t.TempDir()}
	p.namespace("self", "mnt:[4026531832]", "")
	p.namespace("20", "mnt:[4026531832]", "9:name=systemd:/\n")
	p.namespace("21", "mnt:[4026532001]", "9:name=systemd:/machine/host1\n")
	p.namespace("22", "mnt:[4026532002]", "9:name=systemd:/kubepods/besteffort/pod1/abc\n")
	s := newSampler(p.dir, 100)
	p.machine(0, 0, 100, 0, 10)
	for pid := 20; pid <= 22; pid++ {
		p.process(pid, "kube-apiserver", 10, 0, 50)
	}
	s.sample()
	p.machine(60, 0, 100, 0, 11)
	for pid := 20; pid <= 22; pid++ {
		p.process(pid, "kube-apiserver", uint64(10+10*(pid-19)), 0, 50)
	}
	s.sample()
	want := map[string]uint64{"kube-apiserver": 10, "kube-apiserver [contained]": 20, "kube-apiserver [pod]": 30}
	if len(s.programs) != len(want) {
		t.Fatalf("programs %v, want %v", s.programs, want)
	}
	for name, ticks := range want {
		if s.programs[name] != ticks {
			t.Errorf("%s: %d ticks, want %d", name, s.programs[name], ticks)
		}
	}
}

func TestReportHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records")
	var out bytes.Buffer
	if err := reportHosts(&out, path, 2); err != nil || out.Len() != 0 {
		t.Fatalf("no records file: %q, %v; want nothing", out.String(), err)
	}
	if err := os.WriteFile(path, []byte("e2e-testa-1\t10.5\nroles-testb-2\t300.0\ne2e-testc-3\t42.0\ne2e-cut"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := reportHosts(&out, path, 2); err != nil {
		t.Fatal(err)
	}
	want := "[cpu] CPU-seconds of the test hosts, by instance (352 s in all, short processes included):\n" +
		"[cpu]      300.0  roles-testb-2\n[cpu]       42.0  e2e-testc-3\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}
