// Package readiness watches a set of karmada-apiservers the way a load balancer
// with health checks would: every interval it asks each one for /readyz over
// a new TLS connection and notes which answered "ok" and which serving
// certificate it presented. Tests use it to show that a rolling restart
// never left clients without an API server.
package readiness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Round is one probe of every server.
type Round struct {
	// At is when the round started.
	At time.Time
	// Ready lists, per server URL, whether it answered /readyz with "ok";
	// Errors says why not.
	Ready  map[string]bool
	Errors map[string]string
}

// Report is what a Prober saw.
type Report struct {
	// Rounds are every round, in order.
	Rounds []Round
	// Serials are the serial numbers of the serving certificates each server
	// presented, in the order first seen.
	Serials map[string][]*big.Int
}

// Fall and Rise are the load balancer's health check thresholds, HAProxy's
// defaults: a server is taken out of rotation after Fall failed checks in a
// row and put back after Rise passed checks in a row. A single failed check
// (a request that met an etcd connection closing as a member restarted, a
// check answered late on a loaded machine) does not take a server out, as it
// would not behind a real load balancer; a server that stopped or stayed
// unready does go out, within Fall rounds.
const (
	Fall = 3
	Rise = 2
)

// Outages are the rounds in which no server was in rotation, by the Fall and
// Rise rule; every server starts in rotation.
func (r Report) Outages() []Round {
	type health struct {
		out          bool
		fails, rises int
	}
	servers := map[string]*health{}
	var out []Round
	for _, round := range r.Rounds {
		any := false
		for u, ok := range round.Ready {
			h := servers[u]
			if h == nil {
				h = &health{}
				servers[u] = h
			}
			switch {
			case ok:
				h.fails, h.rises = 0, h.rises+1
				if h.out && h.rises >= Rise {
					h.out = false
				}
			default:
				h.fails, h.rises = h.fails+1, 0
				if h.fails >= Fall {
					h.out = true
				}
			}
			any = any || !h.out
		}
		if !any {
			out = append(out, round)
		}
	}
	return out
}

// Blips are the rounds in which no server answered ready, whether or not a
// load balancer would have taken them all out (Outages): a log shows them so
// that a run close to an outage is visible.
func (r Report) Blips() []Round {
	var out []Round
	for _, round := range r.Rounds {
		any := false
		for _, ok := range round.Ready {
			any = any || ok
		}
		if !any {
			out = append(out, round)
		}
	}
	return out
}

// NotReady counts, per server, the rounds in which it was not ready.
func (r Report) NotReady() map[string]int {
	out := map[string]int{}
	for _, round := range r.Rounds {
		for u, ok := range round.Ready {
			if !ok {
				out[u]++
			}
		}
	}
	return out
}

// LastSerial is the serial of the last serving certificate url presented.
func (r Report) LastSerial(url string) *big.Int {
	s := r.Serials[url]
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1]
}

// Causes counts, per server, why it was not ready: "refused" (nothing
// listened), "timeout" (no answer within CheckTimeout), "answered" (it
// answered, but not "ok") and "other".
func (r Report) Causes() map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, round := range r.Rounds {
		for u, msg := range round.Errors {
			if out[u] == nil {
				out[u] = map[string]int{}
			}
			out[u][cause(msg)]++
		}
	}
	return out
}

func cause(msg string) string {
	switch {
	case strings.Contains(msg, "connection refused"):
		return "refused"
	case strings.Contains(msg, "Client.Timeout") || strings.Contains(msg, "deadline exceeded"):
		return "timeout"
	case strings.HasPrefix(msg, "answered "):
		return "answered"
	default:
		return "other"
	}
}

// String sums the report up for a log.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rounds, %d without a ready server, %d without a server in rotation (fall %d, rise %d)",
		len(r.Rounds), len(r.Blips()), len(r.Outages()), Fall, Rise)
	causes := r.Causes()
	for u, n := range r.NotReady() {
		fmt.Fprintf(&b, "; %s not ready in %d rounds %v, %d serving certificates", u, n, causes[u], len(r.Serials[u]))
	}
	return b.String()
}

// CheckTimeout bounds one /readyz request, as a load balancer's health check
// timeout does (HAProxy's "timeout check", a cloud balancer's check timeout:
// seconds, not the probe interval). A server that is stopped or restarting
// refuses the connection or answers "not ready" at once, so an outage is seen
// within one round whatever this is; a server that is slow to answer on a
// loaded machine still serves its clients, and is not counted out for it
// unless it stays silent this long.
const CheckTimeout = 5 * time.Second

// Prober probes until Stop.
type Prober struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	report Report
}

// Start probes urls (https://host:port, no path) every interval. The client
// certificate and the CA pool authenticate the requests; each request uses a
// new connection, as a health-checking load balancer does, so that a server
// that restarted is seen at once.
func Start(urls []string, client tls.Certificate, roots *x509.CertPool, interval time.Duration) *Prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prober{cancel: cancel, done: make(chan struct{}), report: Report{Serials: map[string][]*big.Int{}}}
	transport := &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{client}, MinVersion: tls.VersionTLS12},
	}
	c := &http.Client{Transport: transport, Timeout: max(CheckTimeout, interval*5)}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			p.round(ctx, c, urls)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// round probes every server at once and records the result.
func (p *Prober) round(ctx context.Context, c *http.Client, urls []string) {
	r := Round{At: time.Now(), Ready: map[string]bool{}, Errors: map[string]string{}}
	type answer struct {
		url    string
		ok     bool
		err    string
		serial *big.Int
	}
	answers := make(chan answer, len(urls))
	for _, u := range urls {
		go func() {
			a := answer{url: u}
			defer func() { answers <- a }()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/readyz", nil)
			if err != nil {
				a.err = err.Error()
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				a.err = err.Error()
				return
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
				a.serial = resp.TLS.PeerCertificates[0].SerialNumber
			}
			a.ok = resp.StatusCode == http.StatusOK && string(body) == "ok"
			if !a.ok {
				a.err = fmt.Sprintf("answered %s: %.200s", resp.Status, body)
			}
		}()
	}
	for range urls {
		a := <-answers
		r.Ready[a.url] = a.ok
		if a.err != "" {
			r.Errors[a.url] = a.err
		}
		if a.serial != nil {
			p.mu.Lock()
			seen := p.report.Serials[a.url]
			if len(seen) == 0 || seen[len(seen)-1].Cmp(a.serial) != 0 {
				p.report.Serials[a.url] = append(seen, a.serial)
			}
			p.mu.Unlock()
		}
	}
	if ctx.Err() != nil {
		return // a round cut short by Stop says nothing about the servers
	}
	p.mu.Lock()
	p.report.Rounds = append(p.report.Rounds, r)
	p.mu.Unlock()
}

// Snapshot returns what the prober saw so far.
func (p *Prober) Snapshot() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Report{Rounds: append([]Round(nil), p.report.Rounds...), Serials: map[string][]*big.Int{}}
	for u, s := range p.report.Serials {
		out.Serials[u] = append([]*big.Int(nil), s...)
	}
	return out
}

// Stop ends probing and returns the report.
func (p *Prober) Stop() Report {
	p.cancel()
	<-p.done
	return p.Snapshot()
}
