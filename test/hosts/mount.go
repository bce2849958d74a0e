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

// mountPoints returns the mount points listed in a mountinfo file
// (/proc/PID/mountinfo), with octal escapes decoded.
func mountPoints(mountinfo string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		points = append(points, unescapeMountinfo(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", mountinfo, err)
	}
	return points, nil
}

// unescapeMountinfo decodes the \NNN octal escapes the kernel uses for spaces,
// tabs, newlines and backslashes in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsUnder returns the mount points of the caller's mount namespace that are
// dir or inside it, deepest first.
func mountsUnder(dir string) ([]string, error) {
	points, err := mountPoints("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var found []string
	for _, p := range points {
		if under(p, dir) {
			found = append(found, p)
		}
	}
	sort.Slice(found, func(i, j int) bool { return len(found[i]) > len(found[j]) })
	return found, nil
}

// resolve returns the path with symlinks resolved when it exists (mountinfo
// shows resolved paths), else the cleaned path.
func resolve(path string) string {
	if p, err := filepath.EvalSymlinks(path); err == nil {
		return p
	}
	return filepath.Clean(path)
}

// removeTree removes dir and everything in it, after detaching any mount at or
// below it (debootstrap killed mid-way leaves proc and sys mounted in its
// target). It refuses to remove anything while a mount remains, so it never
// deletes through a mount into another file system.
func removeTree(dir string) error {
	dir = resolve(dir)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	if mounts, err = mountsUnder(dir); err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("refusing to remove %s: still mounted: %s", dir, strings.Join(mounts, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
