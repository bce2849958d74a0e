package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Watch timing. A watch ends after watchTimeout (the API server would end
// it anyway) and goes on from where it was; after an error the list and
// watch start again after a backoff that doubles up to watchBackoffMax.
const (
	watchTimeout    = 5 * time.Minute
	watchBackoffMin = time.Second
	watchBackoffMax = 30 * time.Second
	// watchDialTimeout bounds connecting, the TLS handshake and the
	// response headers of a watch; the stream itself has no deadline.
	watchDialTimeout = 10 * time.Second
)

// WatchClusters follows Karmada's Cluster objects through api until ctx
// ends, with one list and then a watch from the list's resourceVersion, as
// client-go's reflector does: a Cluster changes in Karmada and kao knows
// within the round trip of an event, at the cost of one open stream
// instead of a list every probe interval.
//
// changed receives every cluster, sorted by name, after each list and
// whenever what kao reads of one (joined, sync mode, ready, message)
// changes: Karmada rewrites a Cluster's status every few seconds (its
// resource summary, heartbeats), and none of that calls changed. When a
// list fails, changed receives its error: the clusters are unknown until a
// list succeeds again.
func WatchClusters(ctx context.Context, api API, changed func([]ClusterState, error)) {
	w := &clusterWatcher{api: api, changed: changed, client: watchClient(api)}
	backoff := watchBackoffMin
	for ctx.Err() == nil {
		rv, err := w.list(ctx)
		if err != nil {
			changed(nil, err)
		} else {
			backoff = watchBackoffMin
			for ctx.Err() == nil && err == nil {
				rv, err = w.watch(ctx, rv)
			}
			if ctx.Err() != nil {
				return
			}
			// An expired resourceVersion, a closed stream, the API server
			// restarting: list again, after a moment.
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// clusterWatcher holds a watch's state between events.
type clusterWatcher struct {
	api     API
	client  *http.Client
	changed func([]ClusterState, error)
	// clusters are the clusters as last delivered, by name.
	clusters map[string]ClusterState
}

func watchClient(api API) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:       api.TLS,
		DialContext:           (&net.Dialer{Timeout: watchDialTimeout}).DialContext,
		TLSHandshakeTimeout:   watchDialTimeout,
		ResponseHeaderTimeout: watchDialTimeout,
		DisableKeepAlives:     true,
	}}
}

// list reads every Cluster, delivers them and returns the list's
// resourceVersion.
func (w *clusterWatcher) list(ctx context.Context) (string, error) {
	l := clusterList{}
	if err := w.api.get(ctx, clustersPath, &l); err != nil {
		return "", err
	}
	w.clusters = map[string]ClusterState{}
	for i := range l.Items {
		c := l.Items[i].state()
		w.clusters[c.Name] = c
	}
	w.deliver()
	return l.Metadata.ResourceVersion, nil
}

// watchEvent is one event of a watch stream.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// errWatchExpired is a watch's resourceVersion too old for the API server:
// the next one starts from a new list.
var errWatchExpired = errors.New("the watch's resourceVersion expired")

// watch follows events from rv until the stream ends and returns the
// resourceVersion to go on from. A stream that ends at its timeout is no
// error.
func (w *clusterWatcher) watch(ctx context.Context, rv string) (string, error) {
	q := url.Values{}
	q.Set("watch", "true")
	q.Set("resourceVersion", rv)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", fmt.Sprint(int(watchTimeout.Seconds())))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.api.URL+clustersPath+"?"+q.Encode(), nil)
	if err != nil {
		return rv, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return rv, fmt.Errorf("%s", shorten(err.Error()))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusGone {
			return rv, errWatchExpired
		}
		return rv, fmt.Errorf("watching %s: HTTP %d: %s", clustersPath, resp.StatusCode, shorten(string(body)))
	}
	dec := json.NewDecoder(io.LimitReader(resp.Body, 1<<40))
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, fmt.Errorf("reading the watch of %s: %s", clustersPath, shorten(err.Error()))
		}
		switch ev.Type {
		case "ERROR":
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(ev.Object, &st)
			if st.Code == http.StatusGone {
				return rv, errWatchExpired
			}
			return rv, fmt.Errorf("watching %s: %d %s", clustersPath, st.Code, shorten(st.Message))
		case "ADDED", "MODIFIED", "DELETED", "BOOKMARK":
		default:
			continue
		}
		var obj clusterObject
		if err := json.Unmarshal(ev.Object, &obj); err != nil {
			return rv, fmt.Errorf("decoding a watch event of %s: %s", clustersPath, shorten(err.Error()))
		}
		if obj.Metadata.ResourceVersion != "" {
			rv = obj.Metadata.ResourceVersion
		}
		if ev.Type != "BOOKMARK" {
			w.apply(ev.Type, obj.state())
		}
	}
}

// apply records one event and delivers the clusters when it changed what
// kao reads.
func (w *clusterWatcher) apply(eventType string, c ClusterState) {
	old, had := w.clusters[c.Name]
	if eventType == "DELETED" {
		if !had {
			return
		}
		delete(w.clusters, c.Name)
	} else {
		if had && old == c {
			return
		}
		w.clusters[c.Name] = c
	}
	w.deliver()
}

func (w *clusterWatcher) deliver() {
	out := make([]ClusterState, 0, len(w.clusters))
	for _, c := range w.clusters {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ClusterState) int { return strings.Compare(a.Name, b.Name) })
	w.changed(out, nil)
}
