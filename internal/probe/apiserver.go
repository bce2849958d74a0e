package probe

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// readyzTimeout bounds one API server's answer to /readyz.
const readyzTimeout = 5 * time.Second

// Endpoint is one instance of a component as a probe saw it.
type Endpoint struct {
	// Host is the host the instance runs on.
	Host string
	// URL is what was probed.
	URL string
	// Ready is true when the instance answered ok.
	Ready bool
	// Answered is true when the instance answered at all, ok or not (an API
	// server whose etcd lost its quorum answers /readyz with an error): it
	// runs, where a host that is down or a process that is gone does not
	// answer.
	Answered bool
	// Message says why an instance is not ready.
	Message string
}

// ReadyzProber asks HTTPS endpoints whether they are ready.
type ReadyzProber interface {
	Readyz(ctx context.Context, urls map[string]string, tlsConfig *tls.Config) []Endpoint
}

// Readyz is the real ReadyzProber: it GETs each URL (host → URL) in parallel
// and expects 200 with body "ok".
type Readyz struct{}

// Readyz probes every URL.
func (Readyz) Readyz(ctx context.Context, urls map[string]string, tlsConfig *tls.Config) []Endpoint {
	hosts := make([]string, 0, len(urls))
	for h := range urls {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	out := make([]Endpoint, len(hosts))
	httpClient := &http.Client{
		Timeout:   readyzTimeout,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true},
	}
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = readyz(ctx, httpClient, h, urls[h])
		}()
	}
	wg.Wait()
	return out
}

func readyz(ctx context.Context, c *http.Client, host, url string) Endpoint {
	e := Endpoint{Host: host, URL: url}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		e.Message = err.Error()
		return e
	}
	resp, err := c.Do(req)
	if err != nil {
		e.Message = shorten(err.Error())
		return e
	}
	defer func() { _ = resp.Body.Close() }()
	e.Answered = true
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		e.Message = shorten(fmt.Sprintf("HTTP %d: %s", resp.StatusCode, text))
		return e
	}
	e.Ready = true
	return e
}

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// VersionProber asks API servers which version they run.
type VersionProber interface {
	Versions(ctx context.Context, urls map[string]string, tlsConfig *tls.Config) map[string]string
}

// APIVersions is the real VersionProber.
type APIVersions struct{}

// Versions asks API servers (host → https://host:port/version) for the
// version they run, in parallel, and returns it by host: the gitVersion of
// their answer, as vX.Y.Z. A host that does not answer, or answers
// something else, is left out.
func (APIVersions) Versions(ctx context.Context, urls map[string]string, tlsConfig *tls.Config) map[string]string {
	httpClient := &http.Client{
		Timeout:   readyzTimeout,
		Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true},
	}
	var mu sync.Mutex
	out := map[string]string{}
	var wg sync.WaitGroup
	for h, u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v := serverVersion(ctx, httpClient, u); v != "" {
				mu.Lock()
				out[h] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// gitVersion is a release version as /version reports it, without build metadata.
var gitVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

func serverVersion(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := c.Do(req)
	if err != nil {
		return ""
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	info := struct {
		GitVersion string `json:"gitVersion"`
	}{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&info); err != nil || !gitVersion.MatchString(info.GitVersion) {
		return ""
	}
	return info.GitVersion
}
