package probe

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kao-io/kao/internal/testenv"
)

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs the real etcd built by `make tools` on loopback and returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	url, _ := startMember(t, "m1", peer, "m1="+peer)
	return url
}

// startMember runs member name of the cluster initialCluster (name=peer-URL
// pairs) and returns its client URL and a function that kills it.
func startMember(t *testing.T, name, peer, initialCluster string) (string, func()) {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := exec.Command(filepath.Join(assets, "etcd"), "--name="+name, "--data-dir="+t.TempDir(),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster="+initialCluster)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	t.Cleanup(kill)
	return client, kill
}

func TestEtcdProbeReportsHealthLeaderAndQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd binary from make tools")
	}
	url := startEtcd(t)
	deadline := time.Now().Add(20 * time.Second)
	var h EtcdHealth
	for time.Now().Before(deadline) {
		h = Etcd{}.Etcd(context.Background(), map[string]string{"m1": url, "gone": "http://127.0.0.1:1"}, nil, nil)
		if h.Healthy == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if h.Healthy != 1 || h.Summary() != "1/2" {
		t.Fatalf("want m1 healthy and gone unhealthy, got %+v", h)
	}
	if h.Leader != "m1" || !h.Members[1].Leader || h.Members[1].ID == "" {
		t.Errorf("m1 leads a one-member cluster, got %+v", h)
	}
	if h.HasQuorum() {
		t.Error("1 of 2 members is no quorum")
	}
	if !strings.HasPrefix(h.Problems(), "gone: ") || h.Members[0].Healthy {
		t.Errorf("the dead member must be named with a reason: %q", h.Problems())
	}
	if one := (Etcd{}).Etcd(context.Background(), map[string]string{"m1": url}, nil, nil); !one.HasQuorum() || one.Problems() != "" {
		t.Errorf("a healthy single member has quorum and no problems: %+v", one)
	}
}

func TestEtcdProbeListsMembersTheSpecDoesNot(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the etcd binary from make tools")
	}
	url := startEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A learner added for a host that never started: the member list has
	// it, the caller's set of hosts does not.
	added, err := cli.MemberAddAsLearner(ctx, []string{fmt.Sprintf("http://127.0.0.1:%d", freePort(t))})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%x", added.Member.ID)
	h := Etcd{}.Etcd(ctx, map[string]string{"m1": url, "new": "http://127.0.0.1:1"}, nil, nil)
	var names []string
	for _, m := range h.Members {
		names = append(names, m.Name)
	}
	if want := []string{"m1", "new", "unstarted-" + id}; !slices.Equal(names, want) {
		t.Fatalf("members %v, want %v: %+v", names, want, h)
	}
	if h.Summary() != "1/3" || h.Leader != "m1" || h.HasQuorum() {
		t.Errorf("one healthy member of three, m1 leading, no quorum of the two voters: %+v", h)
	}
	if alone := (Etcd{}).Etcd(ctx, map[string]string{"m1": url}, nil, nil); alone.Summary() != "1/2" || !alone.HasQuorum() {
		t.Errorf("m1 alone with a learner: the learner does not vote, m1 has quorum: %+v", alone)
	}
	if m := h.Members[2]; m.Healthy || !strings.Contains(m.Message, "learner") || !strings.Contains(m.Message, "never started") {
		t.Errorf("the unstarted learner: %+v", m)
	}
	if m := h.Members[1]; m.Healthy || !strings.HasPrefix(m.Message, "not a member of the cluster: ") {
		t.Errorf("a probed host the cluster does not list: %+v", m)
	}
}

// TestAMemberWithoutALeaderIsNotHealthy probes the surviving member of a
// two-member cluster whose other member died, as kao does when a spec names
// only the surviving host of a cluster that lost its quorum: the member
// answers, but has no leader, so it is not healthy and the cluster has no
// quorum: kao's runs wait (RunHeldQuorumLost).
func TestAMemberWithoutALeaderIsNotHealthy(t *testing.T) {
	p1, p2 := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)), fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cluster := "m1=" + p1 + ",m2=" + p2
	url, _ := startMember(t, "m1", p1, cluster)
	url2, kill2 := startMember(t, "m2", p2, cluster)
	probeUntil := func(what string, ok func(EtcdHealth) bool) EtcdHealth {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			h := Etcd{}.Etcd(context.Background(), map[string]string{"m1": url, "m2": url2}, nil, nil)
			if ok(h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v", what, h)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	probeUntil("both members healthy with a leader", func(h EtcdHealth) bool { return h.Healthy == 2 && h.Leader != "" })

	kill2()
	deadline := time.Now().Add(30 * time.Second)
	var h EtcdHealth
	for time.Now().Before(deadline) {
		h = Etcd{}.Etcd(context.Background(), map[string]string{"m1": url}, nil, nil)
		if len(h.Members) > 0 && strings.Contains(h.Members[0].Message, "no leader") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if h.Healthy != 0 || h.HasQuorum() || h.Leader != "" {
		t.Fatalf("a member that follows no leader counts as healthy: %+v", h)
	}
	// etcd says so itself in the status it answers with.
	if !strings.Contains(h.Members[0].Message, "no leader") {
		t.Errorf("the member's message does not say why: %+v", h)
	}
}

// TestAStoppedMemberIsToldFromASilentOne: a member whose host refuses the
// connection (up, etcd not running) is Stopped; a member whose host takes the
// connection and never answers (hung, or something else listening) is not.
// Only a cluster whose every voter is Stopped is AllStopped: a run may start
// it, as nothing of it runs.
func TestAStoppedMemberIsToldFromASilentOne(t *testing.T) {
	stopped := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }() // held open, never answered
		}
	}()
	silent := "http://" + l.Addr().String()
	h := Etcd{}.Etcd(context.Background(), map[string]string{"a-stopped": stopped, "b-silent": silent}, nil, nil)
	if len(h.Members) != 2 || h.Healthy != 0 {
		t.Fatalf("two unhealthy members, got %+v", h)
	}
	if m := h.Members[0]; !m.Stopped || !strings.Contains(m.Message, "etcd is not running") {
		t.Errorf("the member whose host refuses: %+v", m)
	}
	if m := h.Members[1]; m.Stopped || !strings.Contains(m.Message, "no answer within") {
		t.Errorf("the member whose host takes the connection and says nothing: %+v", m)
	}
	if h.HasQuorum() || h.AllStopped() {
		t.Errorf("one member stopped, one silent: neither quorum nor all stopped: %+v", h)
	}
	one := Etcd{}.Etcd(context.Background(), map[string]string{"a-stopped": stopped}, nil, nil)
	if one.HasQuorum() || !one.AllStopped() {
		t.Errorf("a single member stopped on an up host: all stopped: %+v", one)
	}
}
