package machine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Lock is an exclusive flock(2) on a file. Locks belong to the open file
// description, so two Locks on one path conflict even inside one process.
// The file is opened close-on-exec: child processes inherit it only when
// given File explicitly.
type Lock struct {
	f *os.File
}

// TryLock takes the lock at path, creating the file and its directory, if
// nobody holds it. ok is false, with no error, when someone does.
func TryLock(path string) (l *Lock, ok bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, false, fmt.Errorf("creating lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("opening lock %s: %w", path, err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	switch {
	case err == nil:
		return &Lock{f: f}, true, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		_ = f.Close()
		return nil, false, nil
	default:
		_ = f.Close()
		return nil, false, fmt.Errorf("locking %s: %w", path, err)
	}
}

// WaitLock takes the lock at path, waiting until it is free or ctx is done.
func WaitLock(ctx context.Context, path string) (*Lock, error) {
	for {
		l, ok, err := TryLock(path)
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

// File is the locked file, for a child process that must hold the lock as
// long as it runs (exec.Cmd.ExtraFiles).
func (l *Lock) File() *os.File { return l.f }

// Unlock releases the lock; a nil Lock is a no-op.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
	}
}
