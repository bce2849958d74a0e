// Package etcdsnapshot takes etcd snapshots for kao's EtcdBackup: it streams
// a snapshot from one member into a file while hashing it, checks the
// integrity hash etcd appends, asks etcdutl what the file holds, and copies
// it to a backup host over SSH with the host key pinned.
package etcdsnapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec snapshotCodec wraps
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
)

const (
	// dialTimeout bounds connecting to the member: a member that takes
	// longer is as good as down.
	dialTimeout = 5 * time.Second

	// keepAliveTime and keepAliveTimeout make a member that vanishes in the
	// middle of a snapshot (power loss, network cut: no TCP reset) an error
	// within about 20s instead of a stream that waits forever.
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 10 * time.Second

	// idleTimeout ends a snapshot when the member sends nothing for this
	// long: a member sends its database as fast as the network takes it.
	idleTimeout = 30 * time.Second

	// writeBuffer batches the member's 32 KiB chunks into fewer, larger writes.
	writeBuffer = 1 << 20
)

// snapshotBufferPool is gRPC's tiered buffer pool with a tier that fits a
// snapshot message: etcd sends 32 KiB of data per message, a few bytes more
// with framing, which gRPC's default tiers put in a 1 MiB buffer that it
// zeroes for every message. That zeroing cost more CPU than the SHA-256
// (docs/benchmarks.md).
var snapshotBufferPool = mem.NewTieredBufferPool(256, 4<<10, 16<<10, 32<<10, 33<<10, 64<<10, 1<<20)

// snapshotCodec is gRPC's proto codec, except that it assembles a message
// that arrived in several frames in snapshotBufferPool: the proto codec
// always uses gRPC's default pool.
type snapshotCodec struct{ encoding.CodecV2 }

// snapshotDialOptions make the client use snapshotBufferPool, and connect
// over via when it is set.
func snapshotDialOptions(via func(ctx context.Context, addr string) (net.Conn, error)) []grpc.DialOption {
	opts := []grpc.DialOption{experimental.WithBufferPool(snapshotBufferPool)}
	if via != nil {
		opts = append(opts, grpc.WithContextDialer(via))
	}
	if proto := encoding.GetCodecV2("proto"); proto != nil {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(snapshotCodec{proto})))
	}
	return opts
}

func (c snapshotCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) <= 1 {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(snapshotBufferPool)
	defer buf.Free()
	return c.CodecV2.Unmarshal(mem.BufferSlice{buf}, v)
}

// errIdle is why a stream that stalled was cancelled.
var errIdle = fmt.Errorf("the member sent nothing for %s", idleTimeout)

// DefaultMaxBytes is the largest snapshot Save takes unless told otherwise:
// etcd's own largest supported database (--quota-backend-bytes 8 GiB) and
// its appended hash.
const DefaultMaxBytes = 8<<30 + 4<<20

// freeReserve is the room Save leaves on the file system beyond a
// snapshot's expected size: a full state volume would stop every run.
const freeReserve = 256 << 20

// Limits bound what Save writes.
type Limits struct {
	// MaxBytes is the largest snapshot taken; DefaultMaxBytes when zero.
	// A member whose database is larger is refused before streaming, and a
	// stream that grows past it is cut.
	MaxBytes int64
}

// ErrTooLarge is returned for a snapshot over Limits.MaxBytes.
var ErrTooLarge = errors.New("the snapshot is larger than the operator takes")

// ErrNoSpace is returned when the file system lacks room for a snapshot.
var ErrNoSpace = errors.New("not enough free space for the snapshot")

// Saved describes a snapshot written by Save.
type Saved struct {
	// Size is the file size in bytes, etcd's integrity hash included.
	Size int64
	// SHA256 is the SHA-256 of the whole file, in hex.
	SHA256 string
	// EtcdVersion is the storage version the member reported ("" before etcd 3.6).
	EtcdVersion string
}

// Save streams a point-in-time snapshot from the member at endpoint into a
// new file at path (mode 0600; an existing file is an error). The file's
// SHA-256 is computed while it is written, and the SHA-256 etcd appends to
// the database is checked, so a stream cut short is an error, never a
// truncated file that looks complete. On error the file is removed.
//
// Before it streams, Save asks the member for its database size and refuses
// one over lim.MaxBytes, or one the file system at path has no room for
// (with freeReserve to spare).
//
// via, when set, opens the connection in place of the network (addr is
// endpoint's host:port): a port-forward to a member that resolves only
// inside a host cluster.
func Save(ctx context.Context, endpoint string, tlsConfig *tls.Config, via func(ctx context.Context, addr string) (net.Conn, error), path string, lim Limits) (_ *Saved, err error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxBytes
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            []string{endpoint},
		TLS:                  tlsConfig,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		Logger:               zap.NewNop(),
		Context:              ctx,
		DialOptions:          snapshotDialOptions(via),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", endpoint, err)
	}
	defer func() { _ = cli.Close() }()

	// The client waits for a connection as long as its context lasts: ask
	// for the member's status first, with a short deadline, so a member
	// that went away since it was chosen fails fast.
	sctx, cancel := context.WithTimeout(ctx, dialTimeout)
	st, err := cli.Status(sctx, endpoint)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("asking %s for its status: %w", endpoint, describe(ctx, err))
	}
	if st.DbSize > lim.MaxBytes {
		return nil, fmt.Errorf("the database of %s is %d bytes: %w (%d bytes)", endpoint, st.DbSize, ErrTooLarge, lim.MaxBytes)
	}
	if free, err := freeBytes(filepath.Dir(path)); err == nil && free < st.DbSize+st.DbSize/10+freeReserve {
		return nil, fmt.Errorf("%w: the database of %s is %d bytes, and %s has %d bytes free (kao keeps %d spare)",
			ErrNoSpace, endpoint, st.DbSize, filepath.Dir(path), free, freeReserve)
	}

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(path)
		}
	}()

	sctx, cancelStream := context.WithCancelCause(ctx)
	defer cancelStream(nil)
	idle := time.AfterFunc(idleTimeout, func() { cancelStream(errIdle) })
	defer idle.Stop()
	resp, err := cli.SnapshotWithVersion(sctx)
	if err != nil {
		return nil, fmt.Errorf("requesting a snapshot from %s: %w", endpoint, describe(sctx, err))
	}
	defer func() { _ = resp.Snapshot.Close() }()

	iw := newIntegrityWriter()
	bw := bufio.NewWriterSize(io.MultiWriter(f, iw), writeBuffer)
	n, err := io.Copy(bw, io.LimitReader(&activeReader{r: resp.Snapshot, idle: idle}, lim.MaxBytes+1))
	if err == nil && n > lim.MaxBytes {
		err = fmt.Errorf("%w (%d bytes)", ErrTooLarge, lim.MaxBytes)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("streaming the snapshot from %s after %d bytes: %w", endpoint, n, describe(sctx, err))
	}
	sum, err := iw.finish()
	if err != nil {
		return nil, fmt.Errorf("the snapshot from %s (%d bytes) %w", endpoint, n, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("closing %s: %w", path, err)
	}
	return &Saved{Size: n, SHA256: sum, EtcdVersion: resp.Version}, nil
}

// freeBytes is the space an unprivileged writer may still use in dir.
func freeBytes(dir string) (int64, error) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return 0, err
	}
	return int64(fs.Bavail) * fs.Bsize, nil //nolint:gosec // G115: block counts of a real file system fit
}

// activeReader restarts the idle timer whenever data arrives.
type activeReader struct {
	r    io.Reader
	idle *time.Timer
}

func (a *activeReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.idle.Reset(idleTimeout)
	}
	return n, err
}

// describe shortens the errors of a cut stream to what a person needs.
func describe(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	msg := err.Error()
	if strings.Contains(msg, "context deadline exceeded") {
		return fmt.Errorf("no answer within %s", dialTimeout)
	}
	return err
}

// integrityWriter hashes a snapshot stream in one pass for two sums: the
// SHA-256 of the database (every byte but the last 32), which etcd appends
// as those last 32 bytes, and the SHA-256 of the whole file. It holds the
// newest 32 bytes back from the hash until the stream ends.
type integrityWriter struct {
	h    hash.Hash
	tail []byte // the last sha256.Size bytes seen (fewer at the start)
	n    int64
}

func newIntegrityWriter() *integrityWriter {
	return &integrityWriter{h: sha256.New(), tail: make([]byte, 0, sha256.Size)}
}

func (w *integrityWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if len(p) >= sha256.Size {
		w.h.Write(w.tail)
		w.h.Write(p[:len(p)-sha256.Size])
		w.tail = append(w.tail[:0], p[len(p)-sha256.Size:]...)
		return len(p), nil
	}
	// A short write: keep the newest 32 bytes of tail+p, hash what falls out.
	if over := len(w.tail) + len(p) - sha256.Size; over > 0 {
		w.h.Write(w.tail[:over])
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	w.tail = append(w.tail, p...)
	return len(p), nil
}

// finish checks etcd's appended hash and returns the whole file's SHA-256.
func (w *integrityWriter) finish() (string, error) {
	// etcd pads its database to whole 512-byte sectors, then appends the hash.
	if w.n%512 != sha256.Size || len(w.tail) != sha256.Size {
		return "", errors.New("ends without etcd's integrity hash: the stream was cut short")
	}
	if !bytes.Equal(w.h.Sum(nil), w.tail) {
		return "", errors.New("does not match etcd's integrity hash: the data was damaged in transfer")
	}
	w.h.Write(w.tail)
	return hex.EncodeToString(w.h.Sum(nil)), nil
}
