// Package probe asks an installed control plane how it is: etcd member
// health and leadership, and karmada-apiserver's readiness. The operator's
// conditions come from these answers, never from a playbook's exit code.
package probe

import (
	"context"
	"crypto/tls"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdTimeout bounds one member's answer: a member that takes longer is as
// good as down for a control plane.
const etcdTimeout = 3 * time.Second

// EtcdMember is one member as a probe saw it.
type EtcdMember struct {
	// Name is the member's name (the host name in Binary mode).
	Name string
	// Endpoint is the client URL probed.
	Endpoint string
	// ID is the member ID in hex, when the member answered.
	ID string
	// Healthy is true when the member answered a status request in time.
	Healthy bool
	// Leader is true for the member the cluster reports as leader.
	Leader bool
	// Message says why an unhealthy member is unhealthy.
	Message string
}

// EtcdHealth is the state of an etcd cluster.
type EtcdHealth struct {
	Members []EtcdMember
	Healthy int
	Leader  string
}

// HasQuorum tells whether a majority of members answered.
func (h EtcdHealth) HasQuorum() bool { return h.Healthy > len(h.Members)/2 }

// Summary is healthy/total, for example 2/3.
func (h EtcdHealth) Summary() string { return fmt.Sprintf("%d/%d", h.Healthy, len(h.Members)) }

// Problems lists the unhealthy members and why, in one line.
func (h EtcdHealth) Problems() string {
	parts := []string{}
	for _, m := range h.Members {
		if !m.Healthy {
			parts = append(parts, m.Name+": "+m.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// EtcdProber reports the health of etcd members.
type EtcdProber interface {
	Etcd(ctx context.Context, members map[string]string, tlsConfig *tls.Config) EtcdHealth
}

// Etcd is the real EtcdProber: it asks each member for its status over TLS.
type Etcd struct{}

// Etcd probes every member (name → client URL) in parallel.
func (Etcd) Etcd(ctx context.Context, members map[string]string, tlsConfig *tls.Config) EtcdHealth {
	names := make([]string, 0, len(members))
	for n := range members {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]EtcdMember, len(names))
	leaders := make([]uint64, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], leaders[i] = statusOf(ctx, name, members[name], tlsConfig)
		}()
	}
	wg.Wait()
	h := EtcdHealth{Members: out}
	leaderID := uint64(0)
	for i, m := range out {
		if m.Healthy {
			h.Healthy++
			if leaderID == 0 {
				leaderID = leaders[i]
			}
		}
	}
	for i := range h.Members {
		if leaderID != 0 && h.Members[i].ID == fmt.Sprintf("%x", leaderID) {
			h.Members[i].Leader = true
			h.Leader = h.Members[i].Name
		}
	}
	return h
}

// statusOf asks one member for its status; it returns the member and the
// leader ID the member reports.
func statusOf(ctx context.Context, name, endpoint string, tlsConfig *tls.Config) (EtcdMember, uint64) {
	m := EtcdMember{Name: name, Endpoint: endpoint}
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: etcdTimeout,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
		Context:     ctx,
	})
	if err != nil {
		m.Message = err.Error()
		return m, 0
	}
	defer func() { _ = cli.Close() }()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		m.Message = describeEtcdError(err)
		return m, 0
	}
	m.Healthy = true
	m.ID = fmt.Sprintf("%x", st.Header.MemberId)
	if len(st.Errors) > 0 {
		m.Healthy = false
		m.Message = strings.Join(st.Errors, "; ")
	}
	return m, st.Leader
}

func describeEtcdError(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "context deadline exceeded") {
		return fmt.Sprintf("no answer within %s", etcdTimeout)
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}
