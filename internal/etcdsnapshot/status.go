package etcdsnapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"unicode/utf8"
)

// Status is what `etcdutl snapshot status` reads from a snapshot file.
type Status struct {
	// Hash is etcd's hash of the key space.
	Hash uint32 `json:"hash"`
	// Revision is the newest revision the snapshot holds.
	Revision int64 `json:"revision"`
	// TotalKey counts the keys, every revision of every key included.
	TotalKey int `json:"totalKey"`
	// TotalSize is the database size in bytes.
	TotalSize int64 `json:"totalSize"`
	// Version is the storage version of the snapshot ("" before etcd 3.6).
	Version string `json:"version"`
}

// ReadStatus runs `etcdutl snapshot status -w json` on a snapshot file: the
// file opens as an etcd database, or the snapshot is refused.
func ReadStatus(ctx context.Context, etcdutl, path string) (*Status, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, etcdutl, "snapshot", "status", "--write-out=json", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return nil, fmt.Errorf("etcdutl snapshot status refused the snapshot: %s", lastLine(stderr.String(), 300))
		}
		return nil, fmt.Errorf("running etcdutl: %w", err)
	}
	st := &Status{}
	if err := json.Unmarshal(stdout.Bytes(), st); err != nil {
		return nil, fmt.Errorf("etcdutl snapshot status printed no JSON status: %w", err)
	}
	if st.Revision <= 0 {
		return nil, fmt.Errorf("etcdutl snapshot status reports revision %d: not a snapshot of a live cluster", st.Revision)
	}
	return st, nil
}

// lastLine is the last non-empty line of s, at most n bytes: where
// command-line tools put their error.
func lastLine(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	if line == "" {
		return "no error message"
	}
	return truncate(line, n)
}

// truncate shortens s to at most n bytes without splitting a character.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
