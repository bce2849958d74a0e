package pipeline

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/podforward"
	"github.com/kao-io/kao/internal/probe"
)

func TestManagedEtcdMembers(t *testing.T) {
	containerized := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
		Mode:        kaov1.ContainerizedMode,
		HostCluster: &kaov1.HostClusterSpec{InCluster: true, Namespace: "kd", DNSDomain: "dc1.local"},
		Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{Replicas: ptr.To(int32(3))}},
	}}
	want := map[string]string{
		"karmada-etcd-0": "https://karmada-etcd-0.karmada-etcd.kd.svc.dc1.local:2379",
		"karmada-etcd-1": "https://karmada-etcd-1.karmada-etcd.kd.svc.dc1.local:2379",
		"karmada-etcd-2": "https://karmada-etcd-2.karmada-etcd.kd.svc.dc1.local:2379",
	}
	if got := managedEtcdMembers(containerized); !maps.Equal(got, want) {
		t.Errorf("Containerized members %v, want %v", got, want)
	}
	binary := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
		Mode: kaov1.BinaryMode,
		Hosts: []kaov1.Host{{Name: "e1", Address: "10.0.0.1", Roles: []kaov1.HostRole{kaov1.EtcdRole}},
			{Name: "a1", Address: "10.0.0.2", Roles: []kaov1.HostRole{kaov1.APIServerRole}}},
	}}
	if got := managedEtcdMembers(binary); !maps.Equal(got, map[string]string{"e1": "https://10.0.0.1:2379"}) {
		t.Errorf("Binary members %v", got)
	}
}

func TestSnapshotCandidatesPreferHealthyFollowers(t *testing.T) {
	tests := []struct {
		// name says what the cluster looks like.
		name string
		// health is the probe's answer.
		health probe.EtcdHealth
		// want are the candidates in order; wantErr part of the error instead.
		want    []string
		wantErr string
	}{
		{
			name: "followers by name, then the leader",
			health: probe.EtcdHealth{Healthy: 3, Leader: "a", Members: []probe.EtcdMember{
				{Name: "a", Healthy: true, Leader: true}, {Name: "c", Healthy: true}, {Name: "b", Healthy: true}}},
			want: []string{"b", "c", "a"},
		},
		{
			name: "a dead follower is skipped",
			health: probe.EtcdHealth{Healthy: 2, Leader: "b", Members: []probe.EtcdMember{
				{Name: "a", Message: "refused"}, {Name: "b", Healthy: true, Leader: true}, {Name: "c", Healthy: true}}},
			want: []string{"c", "b"},
		},
		{
			name:   "a single member is its own leader",
			health: probe.EtcdHealth{Healthy: 1, Leader: "a", Members: []probe.EtcdMember{{Name: "a", Healthy: true, Leader: true}}},
			want:   []string{"a"},
		},
		{
			name: "without quorum nothing is snapshotted",
			health: probe.EtcdHealth{Healthy: 1, Members: []probe.EtcdMember{
				{Name: "a", Healthy: true}, {Name: "b", Message: "no answer within 3s"}, {Name: "c", Message: "refused"}}},
			wantErr: "no quorum (1/3 members answer): b: no answer within 3s; c: refused",
		},
		{
			name: "a majority without a live leader waits for the election",
			health: probe.EtcdHealth{Healthy: 2, Members: []probe.EtcdMember{
				{Name: "a", Message: "no answer within 3s"}, {Name: "b", Healthy: true}, {Name: "c", Healthy: true}}},
			wantErr: "etcd has no leader right now (2/3 members answer; an election is under way if the leader was lost): a: no answer within 3s",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := snapshotCandidates(tc.health)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want an error with %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			names := []string{}
			for _, m := range got {
				names = append(names, m.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("candidates %v, want %v", names, tc.want)
			}
		})
	}
}

// TestEtcdPodDialerForwardsOnlyToEtcdPods checks what a remote host
// cluster's etcd member list cannot make kao reach: only the client port of
// the deployment's etcd pods is forwarded, and nothing else asks the API
// server for a port-forward.
func TestEtcdPodDialerForwardsOnlyToEtcdPods(t *testing.T) {
	asked := make(chan string, 10)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- r.URL.Path
		http.Error(w, "no upgrades here", http.StatusForbidden)
	}))
	defer api.Close()
	kd := &kaov1.KarmadaDeployment{Spec: kaov1.KarmadaDeploymentSpec{
		Mode:        kaov1.ContainerizedMode,
		HostCluster: &kaov1.HostClusterSpec{Namespace: "kd", DNSDomain: "dc1.local"},
		Etcd:        kaov1.EtcdSpec{Managed: &kaov1.ManagedEtcd{Replicas: ptr.To(int32(3))}},
	}}
	pods, err := podforward.New(&rest.Config{Host: api.URL}, "kd")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Close() }()
	dial := etcdPodDialer(kd, pods)
	for _, addr := range []string{
		"karmada-etcd-0.karmada-etcd.kd.svc.dc1.local:2380",      // the peer port
		"karmada-apiserver-0.karmada-etcd.kd.svc.dc1.local:2379", // not an etcd pod
		"karmada-etcd-0.karmada-etcd.other.svc.dc1.local:2379",   // another namespace
		"karmada-etcd-x.karmada-etcd.kd.svc.dc1.local:2379",      // no ordinal
		"karmada-etcd-0.karmada-etcd.kd.svc.dc1.local.evil:2379", // another domain
		"10.0.0.1:2379", "karmada-etcd-0.karmada-etcd.kd.svc.dc1.local", // an address, no port
	} {
		if _, err := dial(t.Context(), addr); err == nil || !strings.Contains(err.Error(), "kao forwards only to") {
			t.Errorf("dialing %s: %v, want a refusal", addr, err)
		}
	}
	select {
	case p := <-asked:
		t.Fatalf("a refused address asked the API server for %s", p)
	default:
	}
	// A member beyond spec.etcd.managed.replicas (etcd scaling down) is an
	// etcd pod: its port-forward is asked for, and the API server's refusal
	// is the error.
	if _, err := dial(t.Context(), "karmada-etcd-4.karmada-etcd.kd.svc.dc1.local:2379"); err == nil || !strings.Contains(err.Error(), "pod kd/karmada-etcd-4") {
		t.Errorf("dialing member 4: %v, want the API server's refusal", err)
	}
	if p := <-asked; p != "/api/v1/namespaces/kd/pods/karmada-etcd-4/portforward" {
		t.Errorf("the port-forward asked for %s", p)
	}
}
