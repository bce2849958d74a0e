package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// fileLock is an exclusive flock(2) on a file. Locks are tied to the open file
// description, so two fileLocks on the same path conflict even inside one
// process. The file is opened close-on-exec, so child processes (nspawn) never
// inherit it.
type fileLock struct {
	f *os.File
}

// lockFile takes an exclusive lock on path, creating the file if needed, and
// waits until it gets the lock or ctx is done.
func lockFile(ctx context.Context, path string) (*fileLock, error) {
	for {
		l, ok, err := tryLockFile(path)
		if err != nil || ok {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryLockFile takes an exclusive lock on path if nobody holds it. It returns
// ok=false, and no error, if the lock is held elsewhere.
func tryLockFile(path string) (*fileLock, bool, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, false, fmt.Errorf("creating lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("opening lock %s: %w", path, err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		return &fileLock{f: f}, true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		_ = f.Close()
		return nil, false, nil
	default:
		_ = f.Close()
		return nil, false, fmt.Errorf("locking %s: %w", path, err)
	}
}

// unlock releases the lock.
func (l *fileLock) unlock() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
	}
}
