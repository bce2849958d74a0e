package etcdsnapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
)

// FileSHA256 reads a whole file and returns its SHA-256 in hex and its size.
func FileSHA256(file string) (sum string, size int64, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", file, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Download copies the snapshot file name from the target directory to the
// local path, which must not exist yet; it is written with mode 0600. The
// copy is not checked here: the caller compares its SHA-256 with the one
// recorded when the snapshot was stored.
func (t *SSHTarget) Download(ctx context.Context, name, local string) error {
	if !FileName.MatchString(name) {
		return fmt.Errorf("%q is not a snapshot file name", name)
	}
	if !path.IsAbs(local) {
		return fmt.Errorf("the local path %q is not absolute", local) // scp would read "host:" in a relative one
	}
	// Created first, so the copy never has a wider mode than 0600.
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	s, err := t.open()
	if err != nil {
		return err
	}
	defer s.close()
	src := t.User + "@" + scpHost(t.Address) + ":" + path.Join(t.Directory, name)
	if _, err := s.run(ctx, "fetching the snapshot", "scp", append(s.options("-P"), "-q", "--", src, local)...); err != nil {
		_ = os.Remove(local)
		return err
	}
	return os.Chmod(local, 0o600)
}
