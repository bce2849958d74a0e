// Package artifacts mirrors an offline bundle (`make artifacts`) served by an
// HTTP(S) server inside the data centre into a local directory, which the
// roles then read like any bundle directory.
//
// Only the index files (manifest.json, SHA256SUMS) and the directories of the
// component versions a deployment needs are fetched. Every file is checked
// against SHA256SUMS before it takes its place (a temporary file renamed into
// place), and a file already mirrored with the right checksum is not fetched
// again. Credentials in the URL are sent as HTTP basic auth and never appear
// in an error, in a cache path or in a log.
package artifacts

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// DefaultMaxFileSize bounds one file of a bundle: the largest binary of
	// a real bundle (kube-apiserver) is about 100 MiB.
	DefaultMaxFileSize = 1 << 30
	// DefaultIdleTimeout fails a download that receives nothing for this
	// long; a whole mirror is bounded by its context.
	DefaultIdleTimeout = time.Minute
	// DefaultFreshFor is how long a successful mirror is trusted without
	// asking the server again: long enough that status probes and reconciles
	// in quick succession cost no request, short enough that a bundle
	// replaced on the server is noticed within a minute.
	DefaultFreshFor = time.Minute

	// connectTimeout bounds the TCP connect and the TLS handshake.
	connectTimeout = 10 * time.Second
	// responseHeaderTimeout bounds the wait for a response's headers.
	responseHeaderTimeout = 30 * time.Second
	// maxRedirects bounds redirects, all of which must stay on the same host.
	maxRedirects = 5
	// tmpMarker is in the name of every temporary file; such files are
	// hidden, which no bundle path may be, so they never collide.
	tmpMarker = ".kao-tmp-"
	// cacheKeyLen is the number of hex digits of the URL's sha256 in the cache directory name.
	cacheKeyLen = 16
)

// Options tune a Mirror; zero values take the defaults.
type Options struct {
	// RootCAs verifies https servers; nil uses the system roots.
	RootCAs *x509.CertPool
	// MaxFileSize bounds one file of the bundle; DefaultMaxFileSize when zero.
	MaxFileSize int64
	// IdleTimeout fails a download that receives nothing for this long;
	// DefaultIdleTimeout when zero.
	IdleTimeout time.Duration
	// FreshFor is how long a successful mirror of the same URL, credentials
	// and components is trusted without a request; DefaultFreshFor when
	// zero, never when negative. Files are still checked on disk.
	FreshFor time.Duration
	// AllowRedirect, when set, must accept every URL a redirect leads to
	// (the mirror already keeps redirects on the bundle's host and scheme).
	AllowRedirect func(*url.URL) bool
	// SumsSHA256 pins the bundle: the hex SHA-256 its SHA256SUMS must have.
	// Over plain http nothing else vouches for the files, which
	// SHA256SUMS lists with their checksums; "" trusts the server (https).
	SumsSHA256 string
}

// Mirror copies the parts of one bundle URL a deployment needs into one
// local directory.
type Mirror struct {
	// base is the bundle URL without credentials.
	base *url.URL
	// user holds the URL's credentials, sent as basic auth; nil for none.
	user *url.Userinfo
	// dir is the mirror directory.
	dir    string
	client *http.Client
	opts   Options
}

// Result says what a Sync did.
type Result struct {
	// Files is how many files the needed components have.
	Files int
	// Downloaded is how many of them were fetched; the others were already mirrored.
	Downloaded int
	// Bytes is the size of the fetched files.
	Bytes int64
	// IndexFetched is false when a fresh earlier mirror was trusted and no request was made.
	IndexFetched bool
}

// New prepares a mirror of the bundle at rawURL in
// CacheDir(cacheRoot, rawURL, o.SumsSHA256).
// Its errors never quote the URL's credentials.
func New(rawURL, cacheRoot string, o Options) (*Mirror, error) {
	base, user, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(cacheRoot)
	if err != nil {
		return nil, fmt.Errorf("mirror root %s: %w", cacheRoot, err)
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = DefaultMaxFileSize
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.FreshFor == 0 {
		o.FreshFor = DefaultFreshFor
	}
	return &Mirror{
		base:   base,
		user:   user,
		dir:    filepath.Join(root, cacheKey(base, o.SumsSHA256)),
		client: newClient(base, o.RootCAs, o.AllowRedirect),
		opts:   o,
	}, nil
}

// CacheDir is the directory under cacheRoot that New mirrors rawURL,
// pinned by pin (Options.SumsSHA256, "" for none), into: named by the
// sha256 of the URL without its credentials and of the pin, so that the
// same bundle is mirrored once whoever asks for it, a credential leaves no
// trace in a path, and a mirror checked against one pin is never read as
// checked against another. It makes no request.
func CacheDir(cacheRoot, rawURL, pin string) (string, error) {
	base, _, err := parseURL(rawURL)
	if err != nil {
		return "", err
	}
	root, err := filepath.Abs(cacheRoot)
	if err != nil {
		return "", fmt.Errorf("mirror root %s: %w", cacheRoot, err)
	}
	return filepath.Join(root, cacheKey(base, pin)), nil
}

// Redact returns rawURL without credentials, for messages; "" if it does not parse.
func Redact(rawURL string) string {
	base, _, err := parseURL(rawURL)
	if err != nil {
		return ""
	}
	return base.String()
}

// Dir is the mirror directory.
func (m *Mirror) Dir() string { return m.dir }

// String is the bundle URL without credentials.
func (m *Mirror) String() string { return m.base.String() }

// parseURL splits a bundle URL into the URL without credentials and the
// credentials. Its errors never quote the URL: a parse error would.
func parseURL(rawURL string) (*url.URL, *url.Userinfo, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, errors.New("not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, nil, errors.New("not an http:// or https:// URL")
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, nil, errors.New("the URL has no host")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, nil, errors.New("the URL has a query or fragment: bundle files are found by path under it")
	}
	user := u.User
	u.User = nil
	// One bundle, one mirror: http://h/kao and http://h/kao/ are the same.
	u.Path, u.RawPath = strings.TrimRight(u.Path, "/"), strings.TrimRight(u.RawPath, "/")
	return u, user, nil
}

func cacheKey(base *url.URL, pin string) string {
	key := base.String()
	if pin != "" {
		key += "\x00" + strings.ToLower(pin)
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])[:cacheKeyLen]
}

// newClient returns a client with bounded connects and header waits, no
// transparent decompression (the bytes checked are the bytes served) and
// redirects only to the bundle's own host, never from https to http.
func newClient(base *url.URL, roots *x509.CertPool, allow func(*url.URL) bool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   connectTimeout,
			ResponseHeaderTimeout: responseHeaderTimeout,
			DisableCompression:    true,
			ForceAttemptHTTP2:     true,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if !strings.EqualFold(req.URL.Host, base.Host) || (base.Scheme == "https" && req.URL.Scheme != "https") {
				// Scheme and host only: a Location header may carry credentials too.
				return fmt.Errorf("refusing a redirect to %s://%s: the bundle must be served from %s://%s",
					req.URL.Scheme, req.URL.Host, base.Scheme, base.Host)
			}
			if allow != nil && !allow(req.URL) {
				return fmt.Errorf("refusing a redirect to %s://%s%s: it leaves the URLs the bundle may come from",
					req.URL.Scheme, req.URL.Host, req.URL.EscapedPath())
			}
			return nil
		},
	}
}

// dirState is what this process knows about one mirror directory. Every
// field but sem is guarded by sem.
type dirState struct {
	// sem is a one-slot lock a waiter can give up on with its context.
	sem chan struct{}
	// index is the index of the last successful mirror, fetchedAt when it
	// was fetched, auth the sha256 of the credentials it was fetched with and
	// comps the components it mirrored.
	index     *Index
	fetchedAt time.Time
	auth      [32]byte
	comps     map[Component]bool
	// verified records files whose checksum was computed, by bundle path, so
	// that an unchanged file is not read again.
	verified map[string]stamp
}

// stamp identifies a verified file on disk.
type stamp struct {
	sum  string
	size int64
	mod  time.Time
	mode fs.FileMode
}

// states holds a dirState per mirror directory: the lock that keeps two
// reconciles from writing the same directory at once, and the memory of what
// is verified.
var states sync.Map

func stateFor(dir string) *dirState {
	v, _ := states.LoadOrStore(dir, &dirState{sem: make(chan struct{}, 1), verified: map[string]stamp{}})
	return v.(*dirState)
}

func (s *dirState) lock(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *dirState) unlock() { <-s.sem }

// Sync fetches the bundle's index, asks need which components to mirror,
// and mirrors them: files missing or not matching SHA256SUMS are fetched and
// verified, then the index files are written. An error returned by need is
// returned as it is. Syncs of one directory run one at a time; the wait for
// another ends with ctx.
func (m *Mirror) Sync(ctx context.Context, need func(*Index) ([]Component, error)) (*Result, error) {
	st := stateFor(m.dir)
	if err := st.lock(ctx); err != nil {
		return nil, fmt.Errorf("waiting for another mirror of %s to finish: %w", m, err)
	}
	defer st.unlock()
	defer m.client.CloseIdleConnections()

	// The mirror holds no secrets; roles read it as the operator's user.
	if err := os.MkdirAll(m.dir, 0o755); err != nil { //nolint:gosec // G301: bundle files are public binaries, read by ansible-playbook
		return nil, fmt.Errorf("creating the mirror directory: %w", err)
	}
	root, err := os.OpenRoot(m.dir)
	if err != nil {
		return nil, fmt.Errorf("opening the mirror directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	removeTemporaries(root)

	res := &Result{}
	auth := authHash(m.user)
	ix := st.index
	if ix == nil || m.opts.FreshFor < 0 || time.Since(st.fetchedAt) >= m.opts.FreshFor || st.auth != auth {
		if ix, err = m.fetchIndex(ctx); err != nil {
			return nil, err
		}
		res.IndexFetched = true
	}
	if err := m.checkPin(ix); err != nil {
		return nil, err
	}
	comps, err := need(ix)
	if err != nil {
		return nil, err
	}
	if !res.IndexFetched {
		for _, c := range comps {
			if !st.comps[c] {
				// A component the fresh mirror did not cover: ask the server.
				if ix, err = m.fetchIndex(ctx); err != nil {
					return nil, err
				}
				res.IndexFetched = true
				if err := m.checkPin(ix); err != nil {
					return nil, err
				}
				if comps, err = need(ix); err != nil {
					return nil, err
				}
				break
			}
		}
	}
	for _, c := range comps {
		if err := checkComponent(c); err != nil {
			return nil, err
		}
		files := ix.files(c)
		if len(files) == 0 {
			return nil, fmt.Errorf("%s of %s lists no file under %s", SumsFile, m, c)
		}
		for _, f := range files {
			if err := m.syncFile(ctx, root, st, f, ix.sums[f], res); err != nil {
				return nil, err
			}
			res.Files++
		}
	}
	// Index files last: a mirror's SHA256SUMS describes files that are there.
	for _, f := range []struct {
		name string
		data []byte
	}{{ManifestFile, ix.manifestRaw}, {SumsFile, ix.sumsRaw}} {
		if err := writeIfChanged(root, f.name, f.data); err != nil {
			return nil, err
		}
	}
	if res.IndexFetched {
		st.index, st.fetchedAt, st.auth, st.comps = ix, time.Now(), auth, map[Component]bool{}
	}
	for _, c := range comps {
		st.comps[c] = true
	}
	return res, nil
}

func authHash(u *url.Userinfo) [32]byte {
	if u == nil {
		return [32]byte{}
	}
	return sha256.Sum256([]byte(u.String()))
}

// ErrPinMismatch is returned when SHA256SUMS does not have the pinned
// checksum (Options.SumsSHA256).
var ErrPinMismatch = errors.New("SHA256SUMS does not have the pinned sha256")

// checkPin checks an index against Options.SumsSHA256.
func (m *Mirror) checkPin(ix *Index) error {
	if m.opts.SumsSHA256 == "" {
		return nil
	}
	sum := sha256.Sum256(ix.sumsRaw)
	if hex.EncodeToString(sum[:]) != strings.ToLower(m.opts.SumsSHA256) {
		return fmt.Errorf("the bundle at %s: %w %s: kao mirrors nothing from it", m, ErrPinMismatch, m.opts.SumsSHA256)
	}
	return nil
}

// fetchIndex fetches and parses manifest.json and SHA256SUMS.
func (m *Mirror) fetchIndex(ctx context.Context) (*Index, error) {
	manifest, err := m.fetchSmall(ctx, ManifestFile, maxManifestSize)
	if err != nil {
		return nil, err
	}
	sums, err := m.fetchSmall(ctx, SumsFile, maxSumsSize)
	if err != nil {
		return nil, err
	}
	ix, err := parseIndex(manifest, sums)
	if err != nil {
		return nil, fmt.Errorf("the bundle at %s: %w", m, err)
	}
	return ix, nil
}

func (m *Mirror) fetchSmall(ctx context.Context, rel string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := m.fetch(ctx, rel, &buf, limit); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// syncFile makes one bundle file of the mirror match sum, fetching it when
// it is missing or different.
func (m *Mirror) syncFile(ctx context.Context, root *os.Root, st *dirState, rel, sum string, res *Result) error {
	mode := fileMode(rel)
	fi, err := root.Lstat(rel)
	switch {
	case err == nil && fi.Mode().IsRegular():
		if s, ok := st.verified[rel]; ok && s.sum == sum && s.size == fi.Size() && s.mode == fi.Mode() &&
			s.mod.Equal(fi.ModTime()) && fi.Mode().Perm() == mode {
			return nil // verified earlier and untouched since: not read again
		}
		if got, err := hashFile(root, rel); err == nil && got == sum {
			if fi.Mode().Perm() != mode {
				if err := root.Chmod(rel, mode); err != nil {
					return fmt.Errorf("setting the mode of %s in the mirror: %w", rel, err)
				}
				if fi, err = root.Lstat(rel); err != nil {
					return err
				}
			}
			st.verified[rel] = stamp{sum, fi.Size(), fi.ModTime(), fi.Mode()}
			return nil
		}
	case err == nil:
		// Not a regular file: nothing of ours, it goes.
		if err := root.RemoveAll(rel); err != nil {
			return fmt.Errorf("removing %s from the mirror: %w", rel, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("reading %s in the mirror: %w", rel, err)
	}
	delete(st.verified, rel)
	n, err := m.download(ctx, root, rel, sum, mode)
	if err != nil {
		return err
	}
	if fi, err = root.Lstat(rel); err != nil {
		return err
	}
	st.verified[rel] = stamp{sum, fi.Size(), fi.ModTime(), fi.Mode()}
	res.Downloaded++
	res.Bytes += n
	return nil
}

// download fetches one file into a temporary file next to its place,
// checks its sha256 and renames it into place. Nothing is left behind on
// failure.
func (m *Mirror) download(ctx context.Context, root *os.Root, rel, sum string, mode fs.FileMode) (n int64, err error) {
	if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil { // bundle directories are public, read by ansible-playbook
		return 0, fmt.Errorf("creating the directory of %s in the mirror: %w", rel, err)
	}
	tmp := path.Join(path.Dir(rel), "."+path.Base(rel)+tmpMarker+rand.Text())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("creating a temporary file for %s in the mirror: %w", rel, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	h := sha256.New()
	if n, err = m.fetch(ctx, rel, io.MultiWriter(f, h), m.opts.MaxFileSize); err != nil {
		return 0, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return 0, fmt.Errorf("%s from %s does not match %s (expected sha256 %s, got %s): not kept; the bundle on the server is corrupted or changing",
			rel, m, SumsFile, sum, got)
	}
	if err = f.Chmod(mode); err != nil {
		return 0, fmt.Errorf("setting the mode of %s in the mirror: %w", rel, err)
	}
	if err = f.Sync(); err != nil {
		return 0, fmt.Errorf("writing %s in the mirror: %w", rel, err)
	}
	if err = f.Close(); err != nil {
		return 0, fmt.Errorf("writing %s in the mirror: %w", rel, err)
	}
	if err = root.Rename(tmp, rel); err != nil {
		return 0, fmt.Errorf("renaming %s into place in the mirror: %w", rel, err)
	}
	return n, nil
}

// fetch GETs one bundle path into w, at most limit bytes. Its errors name the
// URL without credentials and the HTTP status.
func (m *Mirror) fetch(ctx context.Context, rel string, w io.Writer, limit int64) (int64, error) {
	u := m.base.JoinPath(rel)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stalled atomic.Bool
	idle := time.AfterFunc(m.opts.IdleTimeout, func() {
		stalled.Store(true)
		cancel()
	})
	defer idle.Stop()
	fail := func(err error) error {
		if stalled.Load() {
			return fmt.Errorf("fetching %s: nothing received for %s", u, m.opts.IdleTimeout)
		}
		// url.Error quotes the request URL; ours has no credentials, but a
		// redirect's may, so only the cause is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("fetching %s: %w", u, err)
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, fail(err)
	}
	if m.user != nil {
		password, _ := m.user.Password()
		req.SetBasicAuth(m.user.Username(), password)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, fail(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fetching %s: HTTP %s", u, resp.Status)
	}
	if resp.ContentLength > limit {
		return 0, fmt.Errorf("fetching %s: %d bytes is more than the limit of %d", u, resp.ContentLength, limit)
	}
	n, err := io.Copy(w, &idleReader{r: io.LimitReader(resp.Body, limit+1), timer: idle, d: m.opts.IdleTimeout})
	if err != nil {
		return n, fail(err)
	}
	if n > limit {
		return n, fmt.Errorf("fetching %s: more than the limit of %d bytes", u, limit)
	}
	return n, nil
}

// idleReader pushes a deadline back whenever data arrives.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.timer.Reset(ir.d)
	}
	return n, err
}

// fileMode is 0755 for binaries (bin/*) and 0644 for everything else.
func fileMode(rel string) fs.FileMode {
	if path.Base(path.Dir(rel)) == "bin" {
		return 0o755
	}
	return 0o644
}

func hashFile(root *os.Root, rel string) (string, error) {
	f, err := root.Open(rel)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeIfChanged writes an index file atomically unless it already holds data.
func writeIfChanged(root *os.Root, name string, data []byte) (err error) {
	if old, err := root.ReadFile(name); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := "." + name + tmpMarker + rand.Text()
	defer func() {
		if err != nil {
			_ = root.Remove(tmp)
		}
	}()
	if err = root.WriteFile(tmp, data, 0o644); err != nil { // index files are public, read by ansible-playbook
		return fmt.Errorf("writing %s in the mirror: %w", name, err)
	}
	if err = root.Chmod(tmp, 0o644); err != nil { // whatever the umask
		return fmt.Errorf("writing %s in the mirror: %w", name, err)
	}
	if err = root.Rename(tmp, name); err != nil {
		return fmt.Errorf("renaming %s into place in the mirror: %w", name, err)
	}
	return nil
}

// removeTemporaries deletes temporary files a crashed or cancelled mirror
// left; the caller holds the directory's lock, so none is in use.
func removeTemporaries(root *os.Root) {
	_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), ".") && strings.Contains(d.Name(), tmpMarker) {
			_ = root.Remove(p)
		}
		return nil
	})
}
