package probe

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
)

// cluster renders a Cluster as the API server sends it.
func cluster(name, rv, ready string) string {
	return fmt.Sprintf(`{"metadata":{"name":%q,"resourceVersion":%q},"spec":{"syncMode":"Push"},`+
		`"status":{"conditions":[{"type":"Ready","status":%q,"reason":"R","message":"m"}],"resourceSummary":{"rv":%q}}}`, name, rv, ready, rv)
}

// TestWatchClustersDeliversWhatChanges plays an API server: a list, a
// watch with events that matter and events that do not, an expired
// watch, and a second list. changed must see exactly the changes of what
// kao reads, in order.
func TestWatchClustersDeliversWhatChanges(t *testing.T) {
	var lists, watches atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != clustersPath {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("watch") != "true" {
			switch lists.Add(1) {
			case 1:
				_, _ = fmt.Fprintf(w, `{"metadata":{"resourceVersion":"10"},"items":[%s]}`, cluster("a", "9", "False"))
			default:
				_, _ = fmt.Fprintf(w, `{"metadata":{"resourceVersion":"30"},"items":[%s]}`, cluster("b", "20", "True"))
			}
			return
		}
		if r.URL.Query().Get("resourceVersion") != "10" || watches.Add(1) > 1 {
			// Only the first list's version is watched; later watches stay open.
			<-r.Context().Done()
			return
		}
		flusher := w.(http.Flusher)
		for _, ev := range []string{
			// Karmada rewrites the status: nothing kao reads changed.
			`{"type":"MODIFIED","object":` + cluster("a", "11", "False") + `}`,
			`{"type":"MODIFIED","object":` + cluster("a", "12", "True") + `}`,
			`{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"13"}}}`,
			`{"type":"ADDED","object":` + cluster("b", "14", "True") + `}`,
			`{"type":"DELETED","object":` + cluster("a", "15", "True") + `}`,
			`{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}}`,
		} {
			_, _ = fmt.Fprintln(w, ev)
			flusher.Flush()
		}
	}))
	defer srv.Close()
	api := API{URL: srv.URL, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig}

	type delivery struct {
		clusters []ClusterState
		err      error
	}
	got := make(chan delivery, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchClusters(ctx, api, func(cs []ClusterState, err error) { got <- delivery{cs, err} })
	}()
	notReady := ClusterState{Name: "a", SyncMode: "Push", Message: "R: m"}
	readyA := ClusterState{Name: "a", SyncMode: "Push", Ready: true}
	readyB := ClusterState{Name: "b", SyncMode: "Push", Ready: true}
	for i, want := range [][]ClusterState{
		{notReady},       // the list
		{readyA},         // a turned Ready; the status rewrite before was not delivered
		{readyA, readyB}, // b joined
		{readyB},         // a left
		{readyB},         // the watch expired: the second list
	} {
		select {
		case d := <-got:
			if d.err != nil || !reflect.DeepEqual(d.clusters, want) {
				t.Fatalf("delivery %d: %+v, %v; want %+v", i, d.clusters, d.err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d did not come", i)
		}
	}
	select {
	case d := <-got:
		t.Errorf("an extra delivery: %+v %v", d.clusters, d.err)
	case <-time.After(300 * time.Millisecond):
	}
	cancel()
	<-done
}

// TestWatchClustersReportsAFailedList checks that a list the API server
// refuses reaches changed as an error, and that the watch keeps trying.
func TestWatchClustersReportsAFailedList(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	defer srv.Close()
	api := API{URL: srv.URL, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 4)
	go WatchClusters(ctx, api, func(cs []ClusterState, err error) {
		if cs == nil && err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	})
	for i := range 2 {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatal("no error")
			}
		case <-ctx.Done():
			t.Fatalf("list %d: no error delivered", i)
		}
	}
}
