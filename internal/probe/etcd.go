// Package probe asks an installed control plane how it is: etcd member
// health and leadership, and karmada-apiserver's readiness. The operator's
// conditions come from these answers, never from a playbook's exit code.
package probe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// etcdTimeout bounds one member's answer: a member that takes longer is as
// good as down for a control plane.
const etcdTimeout = 3 * time.Second

// forwardedEtcdTimeout bounds the answer of a member reached over a dialer
// (a port-forward to a Containerized member's pod): the connection first
// opens a stream through the host cluster's API server and the pod's
// kubelet, which on a loaded host cluster takes seconds of its own before
// etcd sees a byte.
const forwardedEtcdTimeout = 10 * time.Second

// timeoutFor is how long a member reached over via has to answer.
func timeoutFor(via Dialer) time.Duration {
	if via != nil {
		return forwardedEtcdTimeout
	}
	return etcdTimeout
}

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
	// Learner is true for a member that does not vote yet: it is catching
	// up with the leader (or never started), and it is not counted healthy.
	Learner bool
	// DBSize is the size of the member's database file in bytes, when it
	// answered.
	DBSize int64
	// Stopped is true for an unhealthy member whose host refused the
	// connection to its client port: the host is up and etcd is not
	// running there, so starting the service would bring the member back
	// (a run does). A member that does not answer at all may be on a dead
	// host, and is not Stopped.
	Stopped bool
	// Message says why an unhealthy member is unhealthy.
	Message string
}

// EtcdHealth is the state of an etcd cluster.
type EtcdHealth struct {
	Members []EtcdMember
	Healthy int
	Leader  string
}

// HasQuorum tells whether a majority of the voting members answered;
// learners do not vote.
func (h EtcdHealth) HasQuorum() bool {
	voters := 0
	for _, m := range h.Members {
		if !m.Learner {
			voters++
		}
	}
	return h.Healthy > voters/2
}

// AllStopped tells whether etcd runs on none of the members' hosts: every
// voter is Stopped (its host up, refusing the connection), so none answers,
// none is silent, and none runs without a quorum. Starting them, as a run
// does before anything else touches etcd, is then safe: no running member
// would be restarted or asked to change the membership meanwhile.
func (h EtcdHealth) AllStopped() bool {
	voters := 0
	for _, m := range h.Members {
		if m.Learner {
			continue
		}
		voters++
		if !m.Stopped {
			return false
		}
	}
	return voters > 0
}

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
	Etcd(ctx context.Context, members map[string]string, tlsConfig *tls.Config, dial Dialer) EtcdHealth
}

// Dialer opens the connection to an etcd member (addr is the host:port of
// its client URL) in place of the network: a port-forward through a host
// cluster's API server, to members whose names resolve only inside it. TLS
// still runs over it, verified against the member's name. Nil dials the
// network.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Etcd is the real EtcdProber: it asks each member for its status over TLS.
type Etcd struct{}

// Etcd probes every member (name → client URL) in parallel.
func (Etcd) Etcd(ctx context.Context, members map[string]string, tlsConfig *tls.Config, dial Dialer) EtcdHealth {
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
			out[i], leaders[i] = statusOf(ctx, name, members[name], tlsConfig, dial)
		}()
	}
	wg.Wait()
	out, leaders = addClusterMembers(ctx, out, leaders, tlsConfig, dial)
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

// addClusterMembers completes the probed members with the cluster's own
// member list, read from a healthy member: members that are not in the
// probed set (a host leaving the cluster, a member added but not started)
// are probed and added, learners are not counted healthy until they vote,
// and a probed endpoint the cluster does not list says so. Without a
// healthy member the probed set stays as it is.
func addClusterMembers(ctx context.Context, probed []EtcdMember, leaders []uint64, tlsConfig *tls.Config, dial Dialer) ([]EtcdMember, []uint64) {
	from := ""
	for _, m := range probed {
		if m.Healthy {
			from = m.Endpoint
			break
		}
	}
	if from == "" {
		return probed, leaders
	}
	list, err := memberList(ctx, from, tlsConfig, dial)
	if err != nil {
		return probed, leaders
	}
	byKey := map[string]int{} // member ID or client URL → index in probed
	for i, m := range probed {
		if m.ID != "" {
			byKey[m.ID] = i
		}
		byKey[m.Endpoint] = i
	}
	listed := make([]bool, len(probed))
	for _, lm := range list {
		id := fmt.Sprintf("%x", lm.ID)
		i, ok := byKey[id]
		for _, u := range lm.ClientURLs {
			if j, found := byKey[u]; !ok && found {
				i, ok = j, true
			}
		}
		if !ok {
			m, leader := EtcdMember{Name: lm.Name, ID: id}, uint64(0)
			switch {
			case lm.Name == "":
				m.Name = "unstarted-" + id
				m.Message = "added to the cluster but never started"
			case len(lm.ClientURLs) == 0:
				m.Message = "the cluster lists no client URL for it"
			default:
				m, leader = statusOf(ctx, lm.Name, lm.ClientURLs[0], tlsConfig, dial)
			}
			probed, leaders = append(probed, m), append(leaders, leader)
			listed = append(listed, true)
			i = len(probed) - 1
		}
		listed[i] = true
		if lm.IsLearner {
			probed[i].Learner = true
			probed[i].Healthy = false
			probed[i].Message = strings.TrimSuffix("a learner catching up with the leader; it does not vote yet; "+probed[i].Message, "; ")
		}
	}
	for i := range probed {
		if !listed[i] && !probed[i].Healthy {
			probed[i].Message = "not a member of the cluster: " + probed[i].Message
		}
	}
	order := make([]int, len(probed))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return probed[order[a]].Name < probed[order[b]].Name })
	members, ls := make([]EtcdMember, len(probed)), make([]uint64, len(probed))
	for k, i := range order {
		members[k], ls[k] = probed[i], leaders[i]
	}
	return members, ls
}

// memberList reads the cluster's member list from one member.
func memberList(ctx context.Context, endpoint string, tlsConfig *tls.Config, via Dialer) ([]*etcdserverpb.Member, error) {
	ctx, cancel := context.WithTimeout(ctx, timeoutFor(via))
	defer cancel()
	cli, err := dial(ctx, endpoint, tlsConfig, via)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	return resp.Members, nil
}

// dial connects to one member, within ctx, over via when it is set.
func dial(ctx context.Context, endpoint string, tlsConfig *tls.Config, via Dialer) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: timeoutFor(via),
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
		Context:     ctx,
		DialOptions: DialOptions(via),
	})
}

// DialOptions are the gRPC options that make an etcd client connect over
// via (none for the network).
func DialOptions(via Dialer) []grpc.DialOption {
	if via == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithContextDialer(via)}
}

// statusOf asks one member for its status; it returns the member and the
// leader ID the member reports.
func statusOf(ctx context.Context, name, endpoint string, tlsConfig *tls.Config, via Dialer) (EtcdMember, uint64) {
	m := EtcdMember{Name: name, Endpoint: endpoint}
	ctx, cancel := context.WithTimeout(ctx, timeoutFor(via))
	defer cancel()
	cli, err := dial(ctx, endpoint, tlsConfig, via)
	if err != nil {
		m.Message = err.Error()
		return m, 0
	}
	defer func() { _ = cli.Close() }()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		m.Message = describeEtcdError(err, timeoutFor(via))
		if m.Stopped = refused(endpoint, via); m.Stopped {
			m.Message = "etcd is not running: its host refused the connection to " + endpoint
		}
		return m, 0
	}
	m.Healthy = true
	m.ID = fmt.Sprintf("%x", st.Header.MemberId)
	m.DBSize = st.DbSize
	if len(st.Errors) > 0 {
		m.Healthy = false
		m.Message = strings.Join(st.Errors, "; ")
	}
	return m, st.Leader
}

// refusedTimeout bounds the connection attempt that tells a stopped member
// from a dead host.
const refusedTimeout = time.Second

// refused tells whether the host of a member's client URL refuses a TCP
// connection to it: the host answered, and nothing listens on the port.
// Members reached over a dialer (a port-forward) are never judged so: the
// forward's own errors say nothing of the host.
func refused(endpoint string, via Dialer) bool {
	if via != nil {
		return false
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return false
	}
	conn, err := net.DialTimeout("tcp", u.Host, refusedTimeout)
	if err == nil {
		_ = conn.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func describeEtcdError(err error, timeout time.Duration) string {
	msg := err.Error()
	if strings.Contains(msg, "context deadline exceeded") {
		return fmt.Sprintf("no answer within %s", timeout)
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}
