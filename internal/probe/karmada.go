package probe

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// handshakeTimeout bounds one TLS handshake.
const handshakeTimeout = 5 * time.Second

// leaseGrace is how long past its expiry a lease still counts as held: the
// leader renews every few seconds, a probe may see it a moment late.
const leaseGrace = 10 * time.Second

// KarmadaProber looks at the parts of a control plane that are not HTTP
// /readyz endpoints: serving certificates, leader leases and APIServices.
type KarmadaProber interface {
	// Handshake completes a TLS handshake with every address (host →
	// host:port) and verifies the server's certificate for that host.
	Handshake(ctx context.Context, addrs map[string]string, tlsConfig *tls.Config) []Endpoint
	// Leases reads leader-election leases from an API server.
	Leases(ctx context.Context, api API, leases []LeaseRef, now time.Time) []LeaseState
	// APIService reads whether an APIService is Available.
	APIService(ctx context.Context, api API, name string) (available bool, message string)
	// Clusters lists Karmada's member clusters.
	Clusters(ctx context.Context, api API) ([]ClusterState, error)
}

// API is how a probe reaches karmada-apiserver: its base URL
// (https://host:port) and a client TLS configuration.
type API struct {
	URL string
	TLS *tls.Config
}

// LeaseRef names a leader-election lease.
type LeaseRef struct {
	Namespace, Name string
}

// LeaseState is what a lease says about its component.
type LeaseState struct {
	LeaseRef
	// Holder is the leader's identity, empty when no one holds the lease.
	Holder string
	// Held is true when the holder renewed the lease within its duration.
	Held bool
	// Read is true when the lease was read: then Held false means that no
	// instance renewed it, where a failed read tells nothing.
	Read bool
	// Message says why the lease is not held.
	Message string
}

// Karmada is the real KarmadaProber.
type Karmada struct{}

// Handshake dials every address in parallel and verifies its certificate.
func (Karmada) Handshake(ctx context.Context, addrs map[string]string, tlsConfig *tls.Config) []Endpoint {
	hosts := make([]string, 0, len(addrs))
	for h := range addrs {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	out := make([]Endpoint, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = handshake(ctx, h, addrs[h], tlsConfig)
		}()
	}
	wg.Wait()
	return out
}

func handshake(ctx context.Context, host, addr string, tlsConfig *tls.Config) Endpoint {
	e := Endpoint{Host: host, URL: addr}
	serverName, _, err := net.SplitHostPort(addr)
	if err != nil {
		e.Message = err.Error()
		return e
	}
	cfg := tlsConfig.Clone()
	cfg.ServerName = serverName
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		e.Message = shorten(err.Error())
		return e
	}
	_ = conn.Close()
	e.Ready, e.Answered = true, true
	return e
}

// Leases reads each lease and decides whether its holder is alive.
func (Karmada) Leases(ctx context.Context, api API, leases []LeaseRef, now time.Time) []LeaseState {
	out := make([]LeaseState, len(leases))
	for i, ref := range leases {
		st := LeaseState{LeaseRef: ref}
		l := coordinationv1.Lease{}
		path := fmt.Sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ref.Namespace, ref.Name)
		if err := api.get(ctx, path, &l); err != nil {
			st.Message = err.Error()
			out[i] = st
			continue
		}
		st.Read = true
		st.Held, st.Holder, st.Message = leaseHeld(l, now)
		out[i] = st
	}
	return out
}

// leaseHeld says whether a lease's holder renewed it recently enough.
func leaseHeld(l coordinationv1.Lease, now time.Time) (bool, string, string) {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return false, "", "no leader holds the lease"
	}
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false, holder, "the lease has no renew time"
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second + leaseGrace)
	if now.After(expires) {
		return false, holder, fmt.Sprintf("leader %s last renewed the lease %s ago", holder,
			now.Sub(l.Spec.RenewTime.Time).Round(time.Second))
	}
	return true, holder, ""
}

// APIService reads an APIService's Available condition.
func (Karmada) APIService(ctx context.Context, api API, name string) (bool, string) {
	s := apiService{}
	if err := api.get(ctx, "/apis/apiregistration.k8s.io/v1/apiservices/"+name, &s); err != nil {
		return false, err.Error()
	}
	for _, c := range s.Status.Conditions {
		if c.Type == "Available" {
			if c.Status == "True" {
				return true, ""
			}
			return false, shorten(fmt.Sprintf("APIService %s is not available: %s: %s", name, c.Reason, c.Message))
		}
	}
	return false, "APIService " + name + " reports no Available condition yet"
}

// apiService is the part of an apiregistration.k8s.io/v1 APIService a probe
// reads (the aggregator's Go types would pull in a whole module for it).
type apiService struct {
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	} `json:"status"`
}

// maxResponseBytes bounds what kao reads of one answer. A Cluster carries
// its member's API list and resource summary, some tens of kilobytes: a
// list of a few hundred members is megabytes.
const maxResponseBytes = 64 << 20

// get reads one object as JSON.
func (a API) get(ctx context.Context, path string, into any) error {
	ctx, cancel := context.WithTimeout(ctx, readyzTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: a.TLS, DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("%s", shorten(err.Error()))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("reading %s: %s", path, shorten(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, shorten(string(body)))
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("GET %s: %s", path, shorten(err.Error()))
	}
	return nil
}

// ClusterState is a member cluster as its Cluster object in Karmada says.
type ClusterState struct {
	Name     string
	SyncMode string
	ID       string
	// Ready is the Cluster's Ready condition.
	Ready bool
	// Message is the Ready condition's reason and message when not ready.
	Message string
}

// clusterObject is the part of a cluster.karmada.io/v1alpha1 Cluster a
// probe reads.
type clusterObject struct {
	Metadata struct {
		Name            string `json:"name"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		SyncMode string `json:"syncMode"`
		ID       string `json:"id"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type, Status, Reason, Message string
		} `json:"conditions"`
	} `json:"status"`
}

// state is what kao reads of a Cluster.
func (o *clusterObject) state() ClusterState {
	c := ClusterState{Name: o.Metadata.Name, SyncMode: o.Spec.SyncMode, ID: o.Spec.ID,
		Message: "Karmada reports no Ready condition yet"}
	for _, cond := range o.Status.Conditions {
		if cond.Type != "Ready" {
			continue
		}
		c.Ready = cond.Status == "True"
		c.Message = ""
		if !c.Ready {
			c.Message = shorten(strings.TrimSpace(cond.Reason + ": " + cond.Message))
		}
	}
	return c
}

// clusterList is the part of a ClusterList a probe reads.
type clusterList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []clusterObject `json:"items"`
}

// clustersPath is the Cluster API's collection.
const clustersPath = "/apis/cluster.karmada.io/v1alpha1/clusters"

// Clusters lists Karmada's member clusters through the Cluster API.
func (Karmada) Clusters(ctx context.Context, api API) ([]ClusterState, error) {
	l := clusterList{}
	if err := api.get(ctx, clustersPath, &l); err != nil {
		return nil, err
	}
	out := make([]ClusterState, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, l.Items[i].state())
	}
	return out, nil
}
