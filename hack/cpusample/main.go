// Command cpusample says where a long run's CPU went: it samples the
// machine's busy time and each process's CPU time from /proc until it is
// stopped (SIGINT or SIGTERM, or its parent ends), then prints
//
//   - the machine's busy share per period (is the run bound by CPU, or by
//     waiting?);
//   - the CPU-seconds per program, most first: the process's command name,
//     and where it runs when that is not this machine's own namespaces:
//     "[pod]" for a container of a real node's pods, "[contained]" for
//     another mount namespace (a test host's systemd-nspawn container, an
//     image build's sandbox). A kube-apiserver of a member cluster or of
//     envtest, one of a Karmada control plane on a test host and one in a
//     pod are three lines.
//
// A process is counted whole when a sample sees it and it started after the
// sample before; one that began before the first sample, from that sample
// on. A process that starts and ends between two samples (a short kubectl
// or Ansible module) is missed: what no sampled process accounts for is
// printed as one line of its own. make check runs it beside
// the test suite; its report comes last.
//
// With -hosts, the report ends with the CPU-seconds of each test-host
// instance (one per test that boots hosts, named after the test), from the
// file test/hosts' teardowns append to ($KAO_TEST_CPU_RECORDS): counted by
// the kernel's cpuacct cgroup of each host, so they include the short
// processes the samples miss.
//
//	cpusample [-interval 2s] [-period 5m] [-top 20] [-hosts FILE]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	interval := flag.Duration("interval", 2*time.Second, "how often to read /proc")
	period := flag.Duration("period", 5*time.Minute, "the span of each busy share printed")
	top := flag.Int("top", 20, "how many programs to list")
	hosts := flag.String("hosts", "", "a file of \"instance<TAB>CPU-seconds\" lines from test/hosts, reported last")
	flag.Parse()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	s := newSampler("/proc", sysconfClockTicks)
	s.sample()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	// A run that is killed (CI's time limit) may take its shell with it
	// before the shell stops this sampler: a new parent says so, and the
	// report still comes.
	parent := os.Getppid()
	for done := false; !done; {
		select {
		case <-tick.C:
			done = os.Getppid() != parent
		case <-stop:
			done = true
		}
		s.sample()
	}
	err := s.report(os.Stdout, *period, *top)
	if err == nil && *hosts != "" {
		err = reportHosts(os.Stdout, *hosts, *top)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpusample:", err)
		os.Exit(1)
	}
}

// reportHosts writes the test-host instances' CPU-seconds from the records
// file, most first; a missing file means no instance was torn down.
func reportHosts(out io.Writer, path string, top int) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	type instance struct {
		name    string
		seconds float64
	}
	var is []instance
	var total float64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		name, secs, ok := strings.Cut(line, "\t")
		v, err := strconv.ParseFloat(secs, 64)
		if !ok || err != nil {
			continue // a line cut short by a killed test
		}
		is = append(is, instance{name, v})
		total += v
	}
	if len(is) == 0 {
		return nil
	}
	sort.Slice(is, func(i, j int) bool { return is[i].seconds > is[j].seconds })
	var w strings.Builder
	fmt.Fprintf(&w, "[cpu] CPU-seconds of the test hosts, by instance (%.0f s in all, short processes included):\n", total)
	for i, in := range is {
		if i == top {
			break
		}
		fmt.Fprintf(&w, "[cpu]   %8.1f  %s\n", in.seconds, in.name)
	}
	_, err = io.WriteString(out, w.String())
	return err
}

// sysconfClockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every
// Linux architecture Go runs on.
const sysconfClockTicks = 100

// sampler keeps the last reading of every process and what each program and
// the machine used since the first sample.
type sampler struct {
	proc  string
	hz    float64
	start time.Time
	// last ticks per pid, keyed by pid and start time (a reused pid is
	// another process).
	last     map[procKey]uint64
	labels   map[procKey]string // what each process is counted as
	ownMnt   string             // the mount namespace of this machine's programs
	programs map[string]uint64  // ticks per command name
	// since is the machine's uptime in ticks at the last sample: a process
	// started after it is new, and all its time counts.
	since uint64
	// machine: busy and total ticks of /proc/stat, as read at each sample.
	machine []machineSample
}

type procKey struct {
	pid   int
	start uint64
}

type machineSample struct {
	at          time.Time
	busy, total uint64
}

func newSampler(proc string, hz float64) *sampler {
	own, _ := os.Readlink(filepath.Join(proc, "self", "ns", "mnt"))
	return &sampler{proc: proc, hz: hz, start: time.Now(), last: map[procKey]uint64{}, labels: map[procKey]string{},
		programs: map[string]uint64{}, ownMnt: own}
}

// sample reads /proc/stat and every /proc/PID/stat once.
func (s *sampler) sample() {
	now, upErr := readUptime(filepath.Join(s.proc, "uptime"), s.hz)
	if busy, total, err := readMachine(filepath.Join(s.proc, "stat")); err == nil {
		s.machine = append(s.machine, machineSample{at: time.Now(), busy: busy, total: total})
	}
	entries, err := os.ReadDir(s.proc)
	if err != nil {
		return
	}
	seen := make(map[procKey]uint64, len(s.last))
	labels := make(map[procKey]string, len(s.labels))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.proc, e.Name(), "stat"))
		if err != nil {
			continue // gone since the listing
		}
		comm, ticks, start, ok := parseProcStat(string(data))
		if !ok {
			continue
		}
		k := procKey{pid, start}
		label, known := s.labels[k]
		if !known {
			label = s.label(e.Name(), comm)
		}
		labels[k] = label
		if before, known := s.last[k]; known {
			if ticks >= before {
				s.programs[label] += ticks - before
			}
		} else if s.since > 0 && start >= s.since {
			s.programs[label] += ticks
		}
		seen[k] = ticks
	}
	s.last, s.labels = seen, labels
	if upErr == nil {
		s.since = now
	}
}

// label is what process pid (a /proc entry) is counted as: its command name,
// marked when it runs in a real node's pod or in a mount namespace of its
// own.
func (s *sampler) label(pid, comm string) string {
	if cg, err := os.ReadFile(filepath.Join(s.proc, pid, "cgroup")); err == nil && strings.Contains(string(cg), "kubepods") {
		return comm + " [pod]"
	}
	if mnt, err := os.Readlink(filepath.Join(s.proc, pid, "ns", "mnt")); err == nil && s.ownMnt != "" && mnt != s.ownMnt {
		return comm + " [contained]"
	}
	return comm
}

// readUptime returns the machine's uptime from /proc/uptime in ticks, the
// unit of a process's start time.
func readUptime(path string, hz float64) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s: empty", path)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return uint64(secs * hz), nil
}

// parseProcStat returns a process's command name, its user and system
// ticks, and its start time from the text of /proc/PID/stat. The name is in
// parentheses and may hold spaces and parentheses itself: the fields after
// it start at the last ')'.
func parseProcStat(stat string) (comm string, ticks, start uint64, ok bool) {
	open, closing := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || closing < open {
		return "", 0, 0, false
	}
	comm = stat[open+1 : closing]
	// After the name: state(3) ppid(4) ... utime(14) stime(15) ...
	// starttime(22), numbered as proc(5) numbers them.
	f := strings.Fields(stat[closing+1:])
	const utime, stime, starttime = 14 - 3, 15 - 3, 22 - 3
	if len(f) <= starttime {
		return "", 0, 0, false
	}
	u, err1 := strconv.ParseUint(f[utime], 10, 64)
	st, err2 := strconv.ParseUint(f[stime], 10, 64)
	start, err3 := strconv.ParseUint(f[starttime], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return "", 0, 0, false
	}
	return comm, u + st, start, true
}

// readMachine returns the busy and total ticks of every CPU from the "cpu"
// line of /proc/stat: idle and iowait are not busy.
func readMachine(path string) (busy, total uint64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("%s: no cpu line", path)
	}
	// user nice system idle iowait irq softirq steal (guest time is in user)
	var idle uint64
	for i, v := range f[1:] {
		if i >= 8 {
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		total += n
		if i == 3 || i == 4 {
			idle += n
		}
	}
	return total - idle, total, nil
}

// report writes the run's busy share and CPU-seconds per program to out.
func (s *sampler) report(out io.Writer, period time.Duration, top int) error {
	var w strings.Builder
	s.writeReport(&w, period, top)
	_, err := io.WriteString(out, w.String())
	return err
}

func (s *sampler) writeReport(w *strings.Builder, period time.Duration, top int) {
	if len(s.machine) < 2 {
		fmt.Fprintln(w, "[cpu] too short a run to report")
		return
	}
	first, last := s.machine[0], s.machine[len(s.machine)-1]
	cpus := float64(last.total-first.total) / last.at.Sub(first.at).Seconds() / s.hz
	fmt.Fprintf(w, "[cpu] %s on %.0f CPUs, busy %s of the time\n",
		last.at.Sub(first.at).Round(time.Second), cpus, share(last.busy-first.busy, last.total-first.total))

	var shares []string
	from := first
	for i, m := range s.machine[1:] {
		if m.at.Sub(from.at) >= period || i == len(s.machine)-2 {
			shares = append(shares, share(m.busy-from.busy, m.total-from.total))
			from = m
		}
	}
	fmt.Fprintf(w, "[cpu] busy per %s: %s\n", period, strings.Join(shares, " "))

	type program struct {
		name  string
		ticks uint64
	}
	var ps []program
	var counted uint64
	for name, ticks := range s.programs {
		ps = append(ps, program{name, ticks})
		counted += ticks
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].ticks != ps[j].ticks {
			return ps[i].ticks > ps[j].ticks
		}
		return ps[i].name < ps[j].name
	})
	busy := last.busy - first.busy
	fmt.Fprintf(w, "[cpu] CPU-seconds by program (%.0f s busy in all):\n", float64(busy)/s.hz)
	for i, p := range ps {
		if i == top || p.ticks == 0 {
			break
		}
		fmt.Fprintf(w, "[cpu]   %8.1f  %s\n", float64(p.ticks)/s.hz, p.name)
	}
	if busy > counted {
		fmt.Fprintf(w, "[cpu]   %8.1f  (processes shorter than a sample, and the kernel)\n", float64(busy-counted)/s.hz)
	}
}

func share(part, whole uint64) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%d%%", (part*100+whole/2)/whole)
}
