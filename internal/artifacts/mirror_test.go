package artifacts

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// bundleFiles is a small bundle: two Karmada versions, one of each other
// component. The contents stand in for binaries.
func bundleFiles() map[string]string {
	return map[string]string{
		"karmada/v1.18.1/bin/karmadactl":        "karmadactl v1.18.1",
		"karmada/v1.18.1/bin/karmada-scheduler": "karmada-scheduler v1.18.1",
		"karmada/v1.18.1/crds.tar.gz":           "crds v1.18.1",
		"karmada/v1.17.1/bin/karmadactl":        "karmadactl v1.17.1",
		"karmada/v1.17.1/crds.tar.gz":           "crds v1.17.1",
		"kubernetes/v1.35.4/bin/kube-apiserver": "kube-apiserver v1.35.4",
		"etcd/v3.6.6/bin/etcd":                  "etcd v3.6.6",
	}
}

const testManifest = `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}` + "\n"

// sumsOf is SHA256SUMS of files, as sha256sum writes it.
func sumsOf(files map[string]string) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		sum := sha256.Sum256([]byte(files[p]))
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), p)
	}
	return b.String()
}

// bundleServer serves a bundle under /kao/ and counts requests per path.
type bundleServer struct {
	*httptest.Server
	// files maps a bundle path (manifest.json and SHA256SUMS included) to what is served.
	files map[string]string
	// user and password, when set, are the basic auth every request needs.
	user, password string
	// handle, when set, answers a bundle path instead of files; false falls through.
	handle func(w http.ResponseWriter, r *http.Request, rel string) bool

	mu   sync.Mutex
	hits map[string]int
}

func newBundleServer(t *testing.T, tlsServer bool) *bundleServer {
	t.Helper()
	files := bundleFiles()
	s := &bundleServer{files: files, hits: map[string]int{}}
	files[SumsFile] = sumsOf(files)
	files[ManifestFile] = testManifest
	h := http.HandlerFunc(s.serve)
	if tlsServer {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *bundleServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	rel := strings.TrimPrefix(r.URL.Path, "/kao/")
	s.hits[rel]++
	handle, files := s.handle, s.files
	s.mu.Unlock()
	if s.user != "" {
		if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.password {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
	}
	if handle != nil && handle(w, r, rel) {
		return
	}
	data, ok := files[rel]
	if !ok || !strings.HasPrefix(r.URL.Path, "/kao/") {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(data))
}

// requests returns the requests per bundle path since the last call.
func (s *bundleServer) requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.hits
	s.hits = map[string]int{}
	return out
}

// setFile changes what the server answers for a bundle path.
func (s *bundleServer) setFile(rel, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[rel] = data
}

func needs(comps ...Component) func(*Index) ([]Component, error) {
	return func(*Index) ([]Component, error) { return comps, nil }
}

// defaultNeeds are the components of the manifest's default versions.
var defaultNeeds = []Component{{"karmada", "v1.18.1"}, {"kubernetes", "v1.35.4"}, {"etcd", "v3.6.6"}}

func sync1(t *testing.T, rawURL, cacheRoot string, o Options, comps ...Component) (*Mirror, *Result, error) {
	t.Helper()
	m, err := New(rawURL, cacheRoot, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Sync(context.Background(), needs(comps...))
	return m, res, err
}

// tree lists the files under dir with their modes.
func tree(t *testing.T, dir string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = info.Mode()
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

func TestArtifactsSyncMirrorsOnlyTheNeededVersions(t *testing.T) {
	srv := newBundleServer(t, false)
	m, res, err := sync1(t, srv.URL+"/kao", t.TempDir(), Options{}, defaultNeeds...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{
		ManifestFile:                            0o644,
		SumsFile:                                0o644,
		"karmada/v1.18.1/bin/karmadactl":        0o755,
		"karmada/v1.18.1/bin/karmada-scheduler": 0o755,
		"karmada/v1.18.1/crds.tar.gz":           0o644,
		"kubernetes/v1.35.4/bin/kube-apiserver": 0o755,
		"etcd/v3.6.6/bin/etcd":                  0o755,
	}
	got := tree(t, m.Dir())
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mirror holds\n%v\nwant\n%v", got, want)
	}
	for rel := range want {
		data, err := os.ReadFile(filepath.Join(m.Dir(), rel))
		if err != nil || string(data) != srv.files[rel] {
			t.Errorf("%s holds %q (%v), want %q", rel, data, err, srv.files[rel])
		}
	}
	for rel, n := range srv.requests() {
		if _, ok := want[rel]; !ok || n != 1 {
			t.Errorf("%s was requested %d times; want only the needed files, once", rel, n)
		}
	}
	if *res != (Result{Files: 5, Downloaded: 5, Bytes: res.Bytes, IndexFetched: true}) || res.Bytes == 0 {
		t.Errorf("result %+v", res)
	}
}

func TestArtifactsSyncAgainDownloadsNothing(t *testing.T) {
	tests := []struct {
		// name says what the second mirror finds.
		name string
		// freshFor is Options.FreshFor of both mirrors.
		freshFor time.Duration
		// between runs between the two mirrors, given the mirror directory.
		between func(t *testing.T, dir string)
		// wantRequests are the requests of the second mirror.
		wantRequests map[string]int
		// wantDownloaded is how many files the second mirror fetched.
		wantDownloaded int
	}{
		{
			name:     "within FreshFor: no request at all",
			freshFor: time.Hour,
		},
		{
			name:         "FreshFor off: only the two index files",
			freshFor:     -1,
			wantRequests: map[string]int{ManifestFile: 1, SumsFile: 1},
		},
		{
			name:     "a new operator process: files are hashed again, not fetched",
			freshFor: time.Hour,
			between: func(_ *testing.T, dir string) {
				states.Delete(dir)
			},
			wantRequests: map[string]int{ManifestFile: 1, SumsFile: 1},
		},
		{
			name:     "a mirrored file changed on disk: only it is fetched again",
			freshFor: time.Hour,
			between: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, "etcd/v3.6.6/bin/etcd"), []byte("tampered"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			wantRequests:   map[string]int{"etcd/v3.6.6/bin/etcd": 1},
			wantDownloaded: 1,
		},
		{
			name:     "a mirrored binary lost its mode: it is fixed, not fetched",
			freshFor: time.Hour,
			between: func(t *testing.T, dir string) {
				if err := os.Chmod(filepath.Join(dir, "etcd/v3.6.6/bin/etcd"), 0o600); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newBundleServer(t, false)
			root := t.TempDir()
			m, _, err := sync1(t, srv.URL+"/kao", root, Options{FreshFor: tt.freshFor}, defaultNeeds...)
			if err != nil {
				t.Fatal(err)
			}
			srv.requests()
			if tt.between != nil {
				tt.between(t, m.Dir())
			}
			_, res, err := sync1(t, srv.URL+"/kao", root, Options{FreshFor: tt.freshFor}, defaultNeeds...)
			if err != nil {
				t.Fatal(err)
			}
			if got := srv.requests(); fmt.Sprint(got) != fmt.Sprint(tt.wantRequests) {
				t.Errorf("second mirror requested %v, want %v", got, tt.wantRequests)
			}
			if res.Files != 5 || res.Downloaded != tt.wantDownloaded {
				t.Errorf("result %+v", res)
			}
			etcd := filepath.Join(m.Dir(), "etcd/v3.6.6/bin/etcd")
			data, err := os.ReadFile(etcd)
			if err != nil || string(data) != "etcd v3.6.6" {
				t.Errorf("etcd holds %q (%v)", data, err)
			}
			if fi, err := os.Stat(etcd); err != nil || fi.Mode() != 0o755 {
				t.Errorf("etcd: %v %v", fi.Mode(), err)
			}
		})
	}
}

func TestArtifactsSyncAsksAgainForAComponentTheFreshMirrorLacks(t *testing.T) {
	srv := newBundleServer(t, false)
	root := t.TempDir()
	if _, _, err := sync1(t, srv.URL+"/kao", root, Options{FreshFor: time.Hour}, defaultNeeds...); err != nil {
		t.Fatal(err)
	}
	srv.requests()
	if _, _, err := sync1(t, srv.URL+"/kao", root, Options{FreshFor: time.Hour}, Component{"karmada", "v1.17.1"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ManifestFile: 1, SumsFile: 1, "karmada/v1.17.1/bin/karmadactl": 1, "karmada/v1.17.1/crds.tar.gz": 1}
	if got := srv.requests(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requested %v, want %v", got, want)
	}
}

func TestArtifactsSyncRejectsACorruptedFile(t *testing.T) {
	srv := newBundleServer(t, false)
	srv.setFile("karmada/v1.18.1/bin/karmadactl", "karmadactl with a flipped bit")
	m, _, err := sync1(t, srv.URL+"/kao", t.TempDir(), Options{}, defaultNeeds...)
	for _, want := range []string{"karmada/v1.18.1/bin/karmadactl", "does not match SHA256SUMS", "not kept"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("want an error containing %q, got %v", want, err)
		}
	}
	for rel := range tree(t, m.Dir()) {
		if strings.Contains(rel, "karmadactl") || strings.Contains(rel, tmpMarker) || rel == SumsFile {
			t.Errorf("%s is left in the mirror", rel)
		}
	}
}

func TestArtifactsSyncRefusesPathsOutsideTheBundle(t *testing.T) {
	const sum = "0000000000000000000000000000000000000000000000000000000000000000"
	tests := []struct {
		// line is the offending SHA256SUMS line's path.
		path string
	}{
		{"../evil"},
		{"/tmp/evil"},
		{"karmada/v1.18.1/../../../evil"},
		{"karmada/v1.18.1/bin/../../../../evil"},
		{"karmada/v1.18.1/bin/.hidden"},
		{"./karmada/v1.18.1/bin/evil"},
		{"karmada/v1.18.1//bin/evil"},
		{`karmada\v1.18.1\bin\evil`},
		{"karmada/v1.18.1/bin/"},
		{SumsFile},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			srv := newBundleServer(t, false)
			srv.setFile(SumsFile, srv.files[SumsFile]+sum+"  "+tt.path+"\n")
			sandbox := t.TempDir()
			_, _, err := sync1(t, srv.URL+"/kao", filepath.Join(sandbox, "cache"), Options{}, defaultNeeds...)
			if err == nil || !strings.Contains(err.Error(), "SHA256SUMS line 8") {
				t.Fatalf("want an error about SHA256SUMS line 8, got %v", err)
			}
			for rel := range tree(t, sandbox) {
				t.Errorf("%s was written", rel)
			}
			for rel := range srv.requests() {
				if rel != ManifestFile && rel != SumsFile {
					t.Errorf("%s was requested", rel)
				}
			}
		})
	}
}

func TestArtifactsSyncErrorsNameTheFileAndStatus(t *testing.T) {
	tests := []struct {
		// name says what goes wrong.
		name string
		// handle answers instead of the bundle; see bundleServer.handle.
		handle func(w http.ResponseWriter, r *http.Request, rel string) bool
		// comps are the components asked for.
		comps []Component
		// opts are the mirror's options.
		opts Options
		// want are parts of the error.
		want []string
	}{
		{
			name: "a needed file is missing",
			handle: func(w http.ResponseWriter, r *http.Request, rel string) bool {
				if rel == "karmada/v1.18.1/bin/karmadactl" {
					http.NotFound(w, r)
					return true
				}
				return false
			},
			comps: defaultNeeds,
			want:  []string{"fetching http://127.0.0.1:", "/kao/karmada/v1.18.1/bin/karmadactl: HTTP 404 Not Found"},
		},
		{
			name: "the server has no bundle at that path",
			handle: func(w http.ResponseWriter, r *http.Request, _ string) bool {
				http.NotFound(w, r)
				return true
			},
			comps: defaultNeeds,
			want:  []string{"/kao/manifest.json: HTTP 404 Not Found"},
		},
		{
			name:  "a version the bundle does not list",
			comps: []Component{{"karmada", "v1.19.0"}},
			want:  []string{"SHA256SUMS of http://127.0.0.1:", "lists no file under karmada/v1.19.0/"},
		},
		{
			name:  "a component name that is a path",
			comps: []Component{{"karmada/../..", "v1.18.1"}},
			want:  []string{"is not a plain directory name"},
		},
		{
			name:  "a file larger than the limit",
			comps: defaultNeeds,
			opts:  Options{MaxFileSize: 10},
			want:  []string{"/kao/karmada/v1.18.1/bin/karmada-scheduler: 25 bytes is more than the limit of 10"},
		},
		{
			name: "a server that stops sending",
			handle: func(w http.ResponseWriter, r *http.Request, rel string) bool {
				if rel != "etcd/v3.6.6/bin/etcd" {
					return false
				}
				w.Header().Set("Content-Length", "1000")
				_, _ = w.Write([]byte("etcd"))
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return true
			},
			comps: defaultNeeds,
			opts:  Options{IdleTimeout: 200 * time.Millisecond},
			want:  []string{"/kao/etcd/v3.6.6/bin/etcd: nothing received for 200ms"},
		},
		{
			name: "a redirect to another host",
			handle: func(w http.ResponseWriter, r *http.Request, rel string) bool {
				if rel != ManifestFile {
					return false
				}
				http.Redirect(w, r, "http://elsewhere.invalid/kao/manifest.json", http.StatusFound)
				return true
			},
			comps: defaultNeeds,
			want:  []string{"/kao/manifest.json: refusing a redirect to http://elsewhere.invalid"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newBundleServer(t, false)
			srv.handle = tt.handle
			m, _, err := sync1(t, srv.URL+"/kao", t.TempDir(), tt.opts, tt.comps...)
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("want an error containing %q, got %v", want, err)
				}
			}
			for rel := range tree(t, m.Dir()) {
				if strings.Contains(rel, tmpMarker) {
					t.Errorf("%s is left in the mirror", rel)
				}
			}
		})
	}
}

func TestArtifactsSyncFollowsRedirectsOnTheSameHost(t *testing.T) {
	srv := newBundleServer(t, false)
	srv.handle = func(w http.ResponseWriter, r *http.Request, rel string) bool {
		if strings.HasPrefix(r.URL.Path, "/old/") {
			http.Redirect(w, r, "/kao/"+strings.TrimPrefix(r.URL.Path, "/old/"), http.StatusMovedPermanently)
			return true
		}
		return false
	}
	if _, _, err := sync1(t, srv.URL+"/old/", t.TempDir(), Options{}, defaultNeeds...); err != nil {
		t.Fatal(err)
	}
}

func TestArtifactsSyncNeverShowsCredentials(t *testing.T) {
	const user, password = "alice", "s3cret-pw"
	tests := []struct {
		// name says what goes wrong.
		name string
		// url returns the bundle URL given the server's address.
		url func(host string) string
		// handle answers instead of the bundle; see bundleServer.handle.
		handle func(w http.ResponseWriter, r *http.Request, rel string) bool
		// wantErr is part of the error; "" for success.
		wantErr string
	}{
		{
			name: "the right credentials",
			url:  func(host string) string { return "http://" + user + ":" + password + "@" + host + "/kao" },
		},
		{
			name:    "a wrong password",
			url:     func(host string) string { return "http://" + user + ":not-" + password + "@" + host + "/kao" },
			wantErr: "/kao/manifest.json: HTTP 401 Unauthorized",
		},
		{
			name: "a missing file",
			url:  func(host string) string { return "http://" + user + ":" + password + "@" + host + "/kao" },
			handle: func(w http.ResponseWriter, r *http.Request, rel string) bool {
				if rel == "etcd/v3.6.6/bin/etcd" {
					http.NotFound(w, r)
					return true
				}
				return false
			},
			wantErr: "/kao/etcd/v3.6.6/bin/etcd: HTTP 404 Not Found",
		},
		{
			name: "a redirect to another host with credentials",
			url:  func(host string) string { return "http://" + user + ":" + password + "@" + host + "/kao" },
			handle: func(w http.ResponseWriter, r *http.Request, _ string) bool {
				http.Redirect(w, r, "http://"+user+":"+password+"@elsewhere.invalid/kao", http.StatusFound)
				return true
			},
			wantErr: "refusing a redirect",
		},
		{
			name:    "nobody listening",
			url:     func(string) string { return "http://" + user + ":" + password + "@127.0.0.1:1/kao" },
			wantErr: "connection refused",
		},
		{
			name:    "a URL that does not parse",
			url:     func(host string) string { return "http://" + user + ":" + password + "@" + host + ":x:y/%zz" },
			wantErr: "not a valid URL",
		},
		{
			name: "a URL with a query",
			url: func(host string) string {
				return "http://" + user + ":" + password + "@" + host + "/kao?token=" + password
			},
			wantErr: "has a query",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newBundleServer(t, false)
			srv.user, srv.password, srv.handle = user, password, tt.handle
			root := t.TempDir()
			rawURL := tt.url(strings.TrimPrefix(srv.URL, "http://"))
			m, err := New(rawURL, root, Options{})
			dir, dirErr := CacheDir(root, rawURL, "")
			if err == nil {
				if dirErr != nil || dir != m.Dir() {
					t.Errorf("CacheDir returned %s, %v; the mirror is in %s", dir, dirErr, m.Dir())
				}
				if strings.Contains(m.Dir()+m.String(), user) || strings.Contains(m.Dir()+m.String(), password) {
					t.Errorf("the mirror %s at %s shows the credentials", m, m.Dir())
				}
				_, err = m.Sync(context.Background(), needs(defaultNeeds...))
			} else if dirErr == nil {
				t.Errorf("New failed (%v) but CacheDir did not", err)
			}
			if err != nil && (strings.Contains(err.Error(), user) || strings.Contains(err.Error(), password)) {
				t.Errorf("the error shows the credentials: %v", err)
			}
			if red := Redact(rawURL); strings.Contains(red, user) || strings.Contains(red, password) {
				t.Errorf("Redact returned %q", red)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
			}
		})
	}
}

func TestArtifactsSyncOverTLS(t *testing.T) {
	srv := newBundleServer(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	if _, _, err := sync1(t, srv.URL+"/kao", t.TempDir(), Options{RootCAs: roots}, defaultNeeds...); err != nil {
		t.Fatal(err)
	}
	_, _, err := sync1(t, srv.URL+"/kao", t.TempDir(), Options{}, defaultNeeds...)
	if err == nil || !strings.Contains(err.Error(), "/kao/manifest.json: tls: failed to verify certificate") {
		t.Fatalf("a server the system roots do not know: want a certificate error, got %v", err)
	}
}

func TestArtifactsSyncOneAtATimePerDirectory(t *testing.T) {
	srv := newBundleServer(t, false)
	srv.handle = func(_ http.ResponseWriter, _ *http.Request, _ string) bool {
		time.Sleep(10 * time.Millisecond) // long enough for the syncs to overlap
		return false
	}
	root := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		// One Mirror per reconcile, as the controller makes them.
		m, err := New(srv.URL+"/kao", root, Options{FreshFor: -1})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Sync(context.Background(), needs(defaultNeeds...))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for rel, n := range srv.requests() {
		if rel != ManifestFile && rel != SumsFile && n != 1 {
			t.Errorf("%s was fetched %d times", rel, n)
		}
	}
}

func TestArtifactsSyncGivesUpWaitingWithItsContext(t *testing.T) {
	srv := newBundleServer(t, false)
	m, err := New(srv.URL+"/kao", t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := stateFor(m.Dir())
	if err := st.lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer st.unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := m.Sync(ctx, needs(defaultNeeds...)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
}

func TestArtifactsCacheDir(t *testing.T) {
	a, err := CacheDir("/var/lib/kao/artifacts", "https://bundles.dc1:8443/kao/", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := CacheDir("/var/lib/kao/artifacts", "https://bob:pw@bundles.dc1:8443/kao", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := CacheDir("/var/lib/kao/artifacts", "https://bundles.dc1:8443/other/", "")
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := CacheDir("/var/lib/kao/artifacts", "https://bundles.dc1:8443/kao/", strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a == c || a == pinned || filepath.Dir(a) != "/var/lib/kao/artifacts" || len(filepath.Base(a)) != cacheKeyLen {
		t.Errorf("cache directories %s, %s (with credentials, no trailing slash), %s (another path), %s (pinned)", a, b, c, pinned)
	}
	for _, bad := range []string{"ftp://bundles.dc1/kao", "http:///kao", "https://bundles.dc1/kao#x", "mailto:x@y"} {
		if _, err := CacheDir("/var/lib/kao/artifacts", bad, ""); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}

func TestArtifactsParseIndex(t *testing.T) {
	const sum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	tests := []struct {
		// name says what the index files are like.
		name string
		// manifest and sums are the files.
		manifest, sums string
		// wantErr is part of the error; "" for success.
		wantErr string
	}{
		{name: "sha256sum text mode", manifest: testManifest, sums: sum + "  karmada/v1.18.1/bin/karmadactl\n"},
		{name: "sha256sum binary mode and blank lines", manifest: testManifest, sums: "\n" + sum + " *karmada/v1.18.1/bin/karmadactl\r\n\n"},
		{name: "a malformed manifest", manifest: `{"karmada":`, sums: "", wantErr: "manifest.json is malformed"},
		{name: "an upper-case hash", manifest: testManifest, sums: strings.ToUpper(sum) + "  karmada/v1.18.1/bin/karmadactl\n", wantErr: "line 1 is not"},
		{name: "a line without a path", manifest: testManifest, sums: sum + "\n", wantErr: "line 1 is not"},
		{
			name: "one path with two hashes", manifest: testManifest,
			sums:    sum + "  etcd/v3.6.6/bin/etcd\n" + strings.Repeat("0", 64) + "  etcd/v3.6.6/bin/etcd\n",
			wantErr: "line 2 lists etcd/v3.6.6/bin/etcd a second time",
		},
		{name: "a line longer than any path", manifest: testManifest, sums: sum + "  " + strings.Repeat("a", 4096) + "\n", wantErr: "SHA256SUMS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, err := parseIndex([]byte(tt.manifest), []byte(tt.sums))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error containing %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ix.Has(Component{"karmada", "v1.18.1"}) || ix.Has(Component{"karmada", "v1.18"}) || ix.Manifest.Etcd != "v3.6.6" {
				t.Errorf("parsed %+v", ix)
			}
		})
	}
}

// TestArtifactsSyncChecksThePinnedSums: with Options.SumsSHA256 the mirror
// takes nothing from a server whose SHA256SUMS is not the pinned one (a
// bundle replaced on the way over plain http, file checksums and all), and
// mirrors a matching one.
func TestArtifactsSyncChecksThePinnedSums(t *testing.T) {
	srv := newBundleServer(t, false)
	pin := sha256.Sum256([]byte(srv.files[SumsFile]))
	good := Options{SumsSHA256: hex.EncodeToString(pin[:]), FreshFor: -1}
	m, _, err := sync1(t, srv.URL+"/kao", t.TempDir(), good, defaultNeeds...)
	if err != nil {
		t.Fatalf("the pinned bundle was refused: %v", err)
	}
	if len(tree(t, m.Dir())) != 7 {
		t.Errorf("the pinned bundle was not mirrored: %v", tree(t, m.Dir()))
	}

	// Someone on the way swaps a binary and its line of SHA256SUMS.
	files := bundleFiles()
	files["etcd/v3.6.6/bin/etcd"] = "a program of someone else's"
	srv.setFile("etcd/v3.6.6/bin/etcd", files["etcd/v3.6.6/bin/etcd"])
	srv.setFile(SumsFile, sumsOf(files))
	root := t.TempDir()
	m, _, err = sync1(t, srv.URL+"/kao", root, good, defaultNeeds...)
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("a SHA256SUMS that is not the pinned one was taken: %v", err)
	}
	if got := tree(t, m.Dir()); len(got) != 0 {
		t.Errorf("the mirror took files from the unpinned bundle: %v", got)
	}
}
