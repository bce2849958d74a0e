package etcdsnapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// etcdStream is what a member sends: a database padded to 512-byte sectors
// followed by its SHA-256.
func etcdStream(t *testing.T, sectors int) []byte {
	t.Helper()
	db := make([]byte, sectors*512)
	if _, err := rand.Read(db); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

func TestIntegrityWriterChecksEtcdsHashInOnePass(t *testing.T) {
	good := etcdStream(t, 9)
	damaged := append([]byte(nil), good...)
	damaged[100] ^= 1
	tests := []struct {
		// name says what the stream is.
		name string
		// stream is written in chunks of chunk bytes.
		stream []byte
		chunk  int
		// wantErr is a part of the error; empty means the stream is good.
		wantErr string
	}{
		{name: "whole stream in one write", stream: good, chunk: len(good)},
		{name: "one byte at a time", stream: good, chunk: 1},
		{name: "writes shorter than the hash", stream: good, chunk: 7},
		{name: "writes exactly the hash's size", stream: good, chunk: sha256.Size},
		{name: "writes one longer than the hash", stream: good, chunk: sha256.Size + 1},
		{name: "etcd's 32 KiB chunks", stream: good, chunk: 32 << 10},
		{name: "hash missing", stream: good[:len(good)-sha256.Size], chunk: 4096, wantErr: "cut short"},
		{name: "cut inside the database", stream: good[:1000], chunk: 4096, wantErr: "cut short"},
		{name: "a flipped bit", stream: damaged, chunk: 4096, wantErr: "damaged"},
		{name: "empty", stream: nil, chunk: 1, wantErr: "cut short"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newIntegrityWriter()
			for p := tc.stream; len(p) > 0; {
				n := min(tc.chunk, len(p))
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatal(err)
				}
				p = p[n:]
			}
			got, err := w.finish()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an error with %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := sha256.Sum256(tc.stream)
			if got != hex.EncodeToString(want[:]) {
				t.Errorf("sha256 %s, want the whole file's %x", got, want)
			}
		})
	}
}

// TestSaveWritesAVerifiedSnapshot takes a snapshot of a real TLS etcd: the
// file is private, its recorded sha256 is the file's, etcdutl reads the
// revision etcd reported, and a second Save never overwrites it.
func TestSaveWritesAVerifiedSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd binaries from make tools")
	}
	e, stop := startTLSEtcd(t)
	defer stop()
	cli := e.client(t)
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rev int64
	for i := range 50 {
		resp, err := cli.Put(ctx, fmt.Sprintf("/registry/k%03d", i), strings.Repeat("v", 1000))
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}

	path := filepath.Join(t.TempDir(), "s.db")
	saved, err := Save(ctx, e.endpoint, e.clientTLS, nil, path, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); saved.SHA256 != hex.EncodeToString(sum[:]) || saved.Size != int64(len(data)) {
		t.Errorf("Save reported sha256 %s size %d; the file has %x size %d", saved.SHA256, saved.Size, sum, len(data))
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("snapshot mode %v, want 0600", st.Mode().Perm())
	}
	st, err := ReadStatus(ctx, filepath.Join(e.bin, "etcdutl"), path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision != rev || st.TotalKey < 50 {
		t.Errorf("etcdutl reads revision %d with %d keys, want revision %d and at least 50 keys", st.Revision, st.TotalKey, rev)
	}
	if _, err := Save(ctx, e.endpoint, e.clientTLS, nil, path, Limits{}); err == nil {
		t.Error("a second Save to the same path must fail, not overwrite")
	}
	// A database over the cap is refused before anything is written.
	capped := filepath.Join(t.TempDir(), "capped.db")
	if _, err := Save(ctx, e.endpoint, e.clientTLS, nil, capped, Limits{MaxBytes: saved.Size / 2}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a snapshot twice the cap: %v, want ErrTooLarge", err)
	}
	if _, err := os.Stat(capped); !os.IsNotExist(err) {
		t.Errorf("a refused snapshot left a file (%v)", err)
	}
	if again, _ := os.ReadFile(path); len(again) != len(data) {
		t.Error("the failed Save changed the existing snapshot")
	}

	garbage := filepath.Join(t.TempDir(), "garbage.db")
	if err := os.WriteFile(garbage, []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadStatus(ctx, filepath.Join(e.bin, "etcdutl"), garbage); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("etcdutl must refuse a file that is no database, got %v", err)
	}
}

// TestSaveFromAMemberThatIsGoneFails proves a dead member is an error that
// names it, and leaves no file behind.
func TestSaveFromAMemberThatIsGoneFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", freeLoopbackPort(t))
	_, err := Save(ctx, endpoint, nil, nil, path, Limits{})
	if err == nil || !strings.Contains(err.Error(), endpoint) {
		t.Fatalf("want an error naming %s, got %v", endpoint, err)
	}
	if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
		t.Errorf("a failed Save left %s behind", path)
	}
}

func TestSSHTargetRefusesWhatCouldBecomeAnOption(t *testing.T) {
	good := SSHTarget{Address: "10.0.0.5", Port: 22, User: "root", Directory: "/var/backups/kao"}
	tests := []struct {
		// name says what is wrong.
		name string
		// change breaks one field of a good target.
		change func(*SSHTarget)
	}{
		{"address that is an option", func(s *SSHTarget) { s.Address = "-oProxyCommand=x" }},
		{"address with a space", func(s *SSHTarget) { s.Address = "a b" }},
		{"user that is an option", func(s *SSHTarget) { s.User = "-oX" }},
		{"relative directory", func(s *SSHTarget) { s.Directory = "backups" }},
		{"directory with a shell character", func(s *SSHTarget) { s.Directory = "/tmp/$(reboot)" }},
		{"port out of range", func(s *SSHTarget) { s.Port = 70000 }},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good target is refused: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.change(&s)
			if err := s.Validate(); err == nil {
				t.Errorf("%+v passed validation", s)
			}
		})
	}
	if got := (&SSHTarget{Address: "fd00::5", Directory: "/b"}).Location("x.db"); got != "[fd00::5]:/b/x.db" {
		t.Errorf("IPv6 location %q", got)
	}
	if got := shellQuote("it's"); got != `'it'\''s'` {
		t.Errorf("shellQuote: %s", got)
	}
}

// TestSaveFromAMemberThatDiesMidStreamFails cuts the connection after the
// member has sent part of its database: Save fails saying how far it got,
// and leaves no file that could pass for a snapshot.
func TestSaveFromAMemberThatDiesMidStreamFails(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd binaries from make tools")
	}
	e, stop := startTLSEtcd(t)
	defer stop()
	cli := e.client(t)
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	value := strings.Repeat("v", 64<<10)
	for i := range 80 { // about 5 MiB
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/big/%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	proxy := cuttingProxy(t, strings.TrimPrefix(e.endpoint, "https://"), 1<<20)
	path := filepath.Join(t.TempDir(), "s.db")
	_, err := Save(ctx, "https://"+proxy, e.clientTLS, nil, path, Limits{})
	if err == nil || !strings.Contains(err.Error(), "streaming the snapshot") {
		t.Fatalf("want a streaming error, got %v", err)
	}
	t.Logf("Save: %v", err)
	if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
		t.Errorf("a cut stream left %s behind", path)
	}
}

// cuttingProxy forwards TCP connections to target and closes each after the
// target has sent limit bytes: a member that dies in the middle of a stream.
func cuttingProxy(t *testing.T, target string, limit int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer func() { _ = s.Close() }()
				go func() { _, _ = io.Copy(s, c) }()
				_, _ = io.CopyN(c, s, limit)
			}()
		}
	}()
	return l.Addr().String()
}
