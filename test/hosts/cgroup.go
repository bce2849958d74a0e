package hosts

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// cgroupParent is the directory, below each cgroup hierarchy's root, under
// which every host gets its own cgroup.
//
// systemd-nspawn --keep-unit puts the container's payload in a "payload"
// sub-cgroup of the cgroup nspawn was started in. Started from one process,
// every container would share that cgroup, and one container's systemd would
// manage (and kill) the others' services. So each host's nspawn is moved into
// its own cgroup before it starts.
const cgroupParent = "kao-hosts"

// cgroupRoots returns the mount points of the cgroup hierarchies a host gets
// a cgroup in: those systemd uses for process tracking (the named v1
// "systemd" hierarchy and the v2, unified, one) and the v1 cpuacct
// hierarchy, which counts the CPU time of everything the host runs
// (cpuSeconds), whichever are mounted.
func cgroupRoots() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	var roots []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// Fields: id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || len(fields) < 5 || fields[3] != "/" {
			continue
		}
		fstype, superOpts := fields[sep+1], fields[sep+3]
		switch {
		case fstype == "cgroup2":
			roots = append(roots, unescapeMountinfo(fields[4]))
		case fstype == "cgroup" && (hasOption(superOpts, "name=systemd") || hasOption(superOpts, "cpuacct")):
			roots = append(roots, unescapeMountinfo(fields[4]))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	sort.Strings(roots)
	return dedupe(roots), nil
}

// cpuSeconds returns the CPU time that the processes of a host's cgroups
// used, from the cpuacct one among them (false when there is none). The
// count includes processes that ended: every Ansible module run and SSH
// session of the host, which a sample of running processes misses.
func cpuSeconds(cgroups []string) (float64, bool) {
	for _, d := range cgroups {
		data, err := os.ReadFile(filepath.Join(d, "cpuacct.usage"))
		if err != nil {
			continue
		}
		ns, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			continue
		}
		return float64(ns) / 1e9, true
	}
	return 0, false
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// hostCgroups returns the cgroup directories for a machine, one per
// hierarchy of cgroupRoots.
func hostCgroups(machine string) ([]string, error) {
	roots, err := cgroupRoots()
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(roots))
	for _, r := range roots {
		dirs = append(dirs, filepath.Join(r, cgroupParent, machine))
	}
	return dirs, nil
}

// createCgroups creates the given cgroup directories.
func createCgroups(dirs []string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
	}
	return nil
}

// removeCgroups removes the given cgroup directories and the sub-cgroups that
// nspawn and the container's systemd made in them, deepest first. A cgroup can
// only be removed once it has no processes. The shared parent is removed too
// when it is empty.
func removeCgroups(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		if !strings.Contains(d, "/"+cgroupParent+"/") {
			errs = append(errs, fmt.Errorf("refusing to remove cgroup %s: not below %s", d, cgroupParent))
			continue
		}
		var sub []string
		err := filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				sub = append(sub, path)
			}
			return nil
		})
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("listing cgroup %s: %w", d, err))
			continue
		}
		sort.Slice(sub, func(i, j int) bool { return len(sub[i]) > len(sub[j]) })
		for _, s := range sub {
			if err := syscall.Rmdir(s); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", s, err))
			}
		}
		// Other instances may still use the parent; ENOTEMPTY/EBUSY are fine.
		_ = syscall.Rmdir(filepath.Dir(d))
	}
	return errors.Join(errs...)
}
