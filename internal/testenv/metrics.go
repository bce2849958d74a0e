package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ServeMetrics starts controller-runtime's metrics server, the one a
// manager runs, on a free loopback port, serving the process's metrics
// registry (every in-process manager of a test binary reports into it).
// It returns the /metrics URL and a function that stops the server.
func ServeMetrics() (url string, stop func(), err error) {
	srv, err := metricsserver.NewServer(metricsserver.Options{BindAddress: "127.0.0.1:0"}, nil, nil)
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	bound, ok := srv.(interface{ GetBindAddr() string })
	if !ok {
		cancel()
		return "", nil, fmt.Errorf("the metrics server does not tell its address")
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if addr := bound.GetBindAddr(); addr != "" {
			return "http://" + addr + "/metrics", func() { cancel(); <-done }, nil
		}
		select {
		case err := <-done:
			cancel()
			return "", nil, fmt.Errorf("the metrics server stopped: %w", err)
		default:
		}
	}
	cancel()
	return "", nil, fmt.Errorf("the metrics server did not listen within 10s")
}

// Sample is one series of a scrape. A histogram gives two: name_sum and
// name_count.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples are a scrape's series.
type Samples []Sample

// Scrape reads a metrics endpoint in Prometheus' text format.
func Scrape(url string) (Samples, error) {
	resp, err := http.Get(url) //nolint:noctx // a test's own endpoint
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads metrics in Prometheus' text format.
func ParseMetrics(r io.Reader) (Samples, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out Samples
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out = append(out, Sample{name, labels, m.GetCounter().GetValue()})
			case dto.MetricType_GAUGE:
				out = append(out, Sample{name, labels, m.GetGauge().GetValue()})
			case dto.MetricType_HISTOGRAM:
				out = append(out, Sample{name + "_sum", labels, m.GetHistogram().GetSampleSum()},
					Sample{name + "_count", labels, float64(m.GetHistogram().GetSampleCount())})
			default:
				out = append(out, Sample{name, labels, m.GetUntyped().GetValue()})
			}
		}
	}
	return out, nil
}

// Match returns the series of a name whose labels include match.
func (s Samples) Match(name string, match map[string]string) Samples {
	var out Samples
next:
	for _, x := range s {
		if x.Name != name {
			continue
		}
		for k, v := range match {
			if x.Labels[k] != v {
				continue next
			}
		}
		out = append(out, x)
	}
	return out
}

// Sum adds the values of the series of a name whose labels include match;
// 0 when there are none.
func (s Samples) Sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, x := range s.Match(name, match) {
		total += x.Value
	}
	return total
}

// Dump lists the series of names starting with prefix, one per line, for
// a test's failure message.
func (s Samples) Dump(prefix string) string {
	var b strings.Builder
	for _, x := range s {
		if strings.HasPrefix(x.Name, prefix) {
			fmt.Fprintf(&b, "%s%v %g\n", x.Name, x.Labels, x.Value)
		}
	}
	return b.String()
}

// Labels is base with the label pairs kv (name, value, ...) added or
// replaced, for Match and Sum.
func Labels(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	for k, v := range base {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}
