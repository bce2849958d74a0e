package pipeline

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/testenv"
)

func TestCheckSSHKey(t *testing.T) {
	ref := kaov1.SecretKeyReference{Name: "dc-ssh", Key: "id"}
	good, _ := testenv.SSHMaterial(t)
	if err := checkSSHKey(good, "ns", ref); err != nil {
		t.Fatalf("a plain OpenSSH key was refused: %v", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(priv, "", []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	locked := pem.EncodeToMemory(block)
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"passphrase", "protected by a passphrase", locked},
		{"not a key", "does not hold an SSH private key", []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n-----END OPENSSH PRIVATE KEY-----\n")},
		{"a public key", "does not hold an SSH private key", []byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGVhc3QK host")},
	} {
		err := checkSSHKey(tc.data, "ns", ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ns/dc-ssh") {
			t.Errorf("%s: got %v, want an error saying %q and naming the Secret", tc.name, err, tc.want)
		} else if e, ok := reason.From(err); !ok || e.Reason != kaov1.PrerequisitesMissingReason {
			t.Errorf("%s: %T is not an input error (no PrerequisitesMissing condition)", tc.name, err)
		}
		if err != nil && strings.Contains(err.Error(), string(tc.data[:20])) {
			t.Errorf("%s: the message quotes the Secret's content: %v", tc.name, err)
		}
	}
}

func TestCheckKnownHosts(t *testing.T) {
	ref := kaov1.SecretKeyReference{Name: "dc-ssh", Key: "known_hosts"}
	hosts := []kaov1.Host{{Name: "node1", Address: "10.0.0.1"}, {Name: "node2", Address: "10.0.0.2", Port: 2222}}
	_, pinned := testenv.SSHMaterial(t, "10.0.0.1", "[10.0.0.2]:2222")
	if err := checkKnownHosts(pinned, hosts, "ns", ref, t.TempDir()); err != nil {
		t.Fatalf("known_hosts pinning both hosts was refused: %v", err)
	}
	// Hashed entries, as ssh-keyscan -H writes them, count too.
	_, hashed := testenv.SSHMaterial(t, knownhosts.HashHostname("10.0.0.1"), knownhosts.HashHostname("[10.0.0.2]:2222"))
	if err := checkKnownHosts(hashed, hosts, "ns", ref, t.TempDir()); err != nil {
		t.Fatalf("hashed known_hosts was refused: %v", err)
	}
	// node2 pinned on the wrong port is not pinned.
	_, partial := testenv.SSHMaterial(t, "10.0.0.1", "10.0.0.2")
	err := checkKnownHosts(partial, hosts, "ns", ref, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "node2") || strings.Contains(err.Error(), "node1 ") {
		t.Errorf("want node2 (port 2222) named as unpinned, got %v", err)
	}
	if err := checkKnownHosts([]byte("garbage line without a key\n"), hosts, "ns", ref, t.TempDir()); err == nil {
		t.Error("a known_hosts ssh cannot read was accepted")
	}
}

// TestCheckKnownHostsByName pins a host addressed by DNS name.
func TestCheckKnownHostsByName(t *testing.T) {
	ref := kaov1.SecretKeyReference{Name: "dc-ssh", Key: "known_hosts"}
	hosts := []kaov1.Host{{Name: "node3", Address: "node3.dc1.example"}}
	_, pinned := testenv.SSHMaterial(t, "node3.dc1.example")
	if err := checkKnownHosts(pinned, hosts, "ns", ref, t.TempDir()); err != nil {
		t.Fatalf("known_hosts pinning the host's name was refused: %v", err)
	}
	_, other := testenv.SSHMaterial(t, "node4.dc1.example")
	if err := checkKnownHosts(other, hosts, "ns", ref, t.TempDir()); err == nil || !strings.Contains(err.Error(), "node3") {
		t.Errorf("want node3 named as unpinned, got %v", err)
	}
}
