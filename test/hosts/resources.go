package hosts

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/kao-io/kao/internal/machine"
	"github.com/kao-io/kao/internal/procfs"
)

// Resources lists what an instance created on the machine, for checking that
// nothing is left after Down.
type Resources struct {
	// StateDir is the instance's state directory.
	StateDir string
	// Netns are the names of the network namespaces (below /run/netns), in
	// host order.
	Netns []string
	// Links are the root-namespace interfaces: the bridge and the veths.
	Links []string
	// Cgroups are the per-host cgroup directories.
	Cgroups []string
}

func resourcesOf(st *instanceState, dir string) Resources {
	r := Resources{StateDir: dir}
	if st.Bridge != "" {
		r.Links = append(r.Links, st.Bridge)
	}
	for _, h := range st.Hosts {
		if h.Netns != "" {
			r.Netns = append(r.Netns, h.Netns)
		}
		if h.Veth != "" {
			r.Links = append(r.Links, h.Veth)
		}
		r.Cgroups = append(r.Cgroups, h.Cgroups...)
	}
	return r
}

// Leftovers reports which of the resources still exist: network namespaces,
// links, cgroups, processes that run in them or name the state directory on
// their command line, and mounts (in any mount namespace) of the network
// namespaces or of anything in the state directory, such as a host's overlay.
func (r Resources) Leftovers() []string {
	var left []string
	for _, ns := range r.Netns {
		if machine.NetnsExists(ns) {
			left = append(left, "network namespace "+ns)
		}
	}
	for _, l := range r.Links {
		if machine.LinkExists(l) {
			left = append(left, "link "+l)
		}
	}
	for _, cg := range r.Cgroups {
		if _, err := os.Stat(cg); err == nil {
			left = append(left, "cgroup "+cg)
		}
	}
	if pids, err := pidsInCgroups(r.Cgroups); err == nil {
		for _, pid := range pids {
			left = append(left, fmt.Sprintf("process %d in a host cgroup", pid))
		}
	}
	if r.StateDir != "" {
		left = append(left, processesNaming(resolve(r.StateDir)+"/")...)
	}
	left = append(left, mountsOf(r)...)
	return left
}

// processesNaming returns the live processes (other than the caller) whose
// command line mentions prefix (a directory with a trailing slash):
// systemd-nspawn names its overlay directories.
func processesNaming(prefix string) []string {
	pids, err := procfs.PIDs()
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, pid := range pids {
		if pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(data), prefix) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err != nil || st.State == "Z" {
			continue
		}
		out = append(out, fmt.Sprintf("process %d (%s)", pid, strings.ReplaceAll(strings.TrimRight(string(data), "\x00"), "\x00", " ")))
	}
	return out
}

// mountsOf scans the mount tables of every process for mounts of r's network
// namespaces or of paths in r's state directory (including overlay mounts that
// name it in their options).
func mountsOf(r Resources) []string {
	pids, err := procfs.PIDs()
	if err != nil {
		return []string{err.Error()}
	}
	want := map[string]bool{}
	for _, ns := range r.Netns {
		want[machine.NetnsPath(ns)] = true
	}
	// With a trailing slash, so that instance "kao" does not match "kao2".
	prefix := ""
	if r.StateDir != "" {
		prefix = resolve(r.StateDir) + "/"
	}
	seen := map[string]bool{}
	var out []string
	for _, pid := range pids {
		f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := sc.Text()
			fields := strings.Fields(line)
			if len(fields) < 5 {
				continue
			}
			mp := unescapeMountinfo(fields[4])
			hit := want[mp] || (prefix != "" && (strings.Contains(line, prefix) || mp+"/" == prefix))
			// Mount ids repeat across namespaces; key on the whole line.
			if hit && !seen[line] {
				seen[line] = true
				out = append(out, fmt.Sprintf("mount %s (seen by process %d)", mp, pid))
			}
		}
		_ = f.Close() // read only
	}
	return out
}
