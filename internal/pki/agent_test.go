package pki

import (
	"crypto/x509"
	"errors"
	"maps"
	"slices"
	"testing"
)

// pullRequest is testRequest with pull-mode members, one of them named so
// that it ends like an etcd client certificate.
func pullRequest(members ...string) Request {
	r := testRequest()
	r.PullMembers = members
	return r
}

func TestAgentClientIdentity(t *testing.T) {
	b, _, changed := mustEnsure(t, nil, pullRequest("edge-1", "x-etcd-client"), testNow)
	for _, member := range []string{"edge-1", "x-etcd-client"} {
		name := AgentClient(member)
		if !slices.Contains(changed, name) {
			t.Errorf("changed %q does not name %s", changed, name)
		}
		if _, ok := b["karmada-agent-"+member+".crt"]; !ok {
			t.Fatalf("no karmada-agent-%s.crt in the bundle", member)
		}
		c := mustCert(t, b, name)
		if want := "system:karmada:agent:" + member; c.Subject.CommonName != want {
			t.Errorf("%s: CN %q, want %q", name, c.Subject.CommonName, want)
		}
		// The agents' group, and never system:masters: the agent gets only
		// its per-cluster RBAC.
		if !slices.Equal(c.Subject.Organization, []string{"system:karmada:agents"}) {
			t.Errorf("%s: O %q, want [system:karmada:agents]", name, c.Subject.Organization)
		}
		if c.IsCA || !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(c.DNSNames)+len(c.IPAddresses) != 0 {
			t.Errorf("%s: IsCA=%v ExtKeyUsage=%v SANs=%v %v, want a client certificate without SANs",
				name, c.IsCA, c.ExtKeyUsage, c.DNSNames, c.IPAddresses)
		}
		if err := verifyChain(c, mustCert(t, b, CA), x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("%s does not chain to the Karmada CA: %v", name, err)
		}
		if got := issuerOf(name); got != CA {
			t.Errorf("issuerOf(%q) = %q, want %q", name, got, CA)
		}
	}
	if err := b.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestAgentClientsFollowThePullMembers(t *testing.T) {
	first, _, _ := mustEnsure(t, nil, pullRequest("a", "b"), testNow)

	// Listing the same members again keeps everything byte for byte.
	again, _, changed := mustEnsure(t, first, pullRequest("b", "a"), testNow.Add(day))
	if len(changed) != 0 || !maps.EqualFunc(again, first, func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Errorf("re-ensuring the same members changed %q", changed)
	}

	// A new member gets a certificate; nothing else changes.
	added, _, changed := mustEnsure(t, first, pullRequest("a", "b", "c"), testNow.Add(day))
	if !slices.Equal(changed, []string{AgentClient("c")}) {
		t.Errorf("adding member c changed %q, want only %s", changed, AgentClient("c"))
	}
	if string(added[CertFile(AgentClient("a"))]) != string(first[CertFile(AgentClient("a"))]) {
		t.Error("adding member c re-issued the certificate of member a")
	}

	// A member that leaves the list loses its files, silently.
	removed, _, changed := mustEnsure(t, first, pullRequest("b"), testNow.Add(day))
	if len(changed) != 0 {
		t.Errorf("removing member a changed %q", changed)
	}
	for _, f := range []string{CertFile(AgentClient("a")), KeyFile(AgentClient("a"))} {
		if _, ok := removed[f]; ok {
			t.Errorf("%s is still in the bundle after member a left", f)
		}
	}

	// Without pull members the bundle is what it always was.
	plain, _, _ := mustEnsure(t, nil, testRequest(), testNow)
	for f := range plain {
		if _, ok := first[f]; !ok {
			t.Errorf("%s is missing from the bundle with pull members", f)
		}
	}
	if len(first) != len(plain)+4 {
		t.Errorf("pull members a and b added %d files, want 4", len(first)-len(plain))
	}
}

func TestEnsureRejectsInvalidPullMembers(t *testing.T) {
	tests := []struct {
		name    string   // what is wrong
		members []string // Request.PullMembers
	}{
		{name: "upper case", members: []string{"Edge"}},
		{name: "a dot", members: []string{"edge.dc1"}},
		{name: "a leading dash", members: []string{"-edge"}},
		{name: "empty", members: []string{""}},
		{name: "longer than 48 characters", members: []string{"m123456789012345678901234567890123456789012345678"}},
		{name: "listed twice", members: []string{"edge", "edge"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, _, err := Ensure(nil, pullRequest(tc.members...), testNow)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("Ensure with PullMembers %q: %v, want ErrInvalidRequest", tc.members, err)
			}
		})
	}
}
