package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// WriteBundle lays out an artifacts bundle in a temporary directory: a
// manifest.json (none when manifest is empty) and an empty bin directory per
// component/version in dirs.
func WriteBundle(t testing.TB, manifest string, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	if manifest != "" {
		if err := os.WriteFile(filepath.Join(root, "manifest.json"), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d, "bin"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// SSHMaterial returns a real OpenSSH private key and a known_hosts line
// pinning a fresh host key for each address (port 22).
func SSHMaterial(t testing.TB, addresses ...string) (key, knownHosts []byte) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	hostPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ssh.NewPublicKey(hostPub)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, a := range addresses {
		lines = append(lines, knownhosts.Line([]string{a}, pub))
	}
	return pem.EncodeToMemory(block), []byte(strings.Join(lines, "\n") + "\n")
}

// ComponentImages builds the images of Karmada's components with `make
// images`' program (hack/image -components), named under registry, into a
// temporary directory, and returns the OCI archive that holds them all.
func ComponentImages(t testing.TB, registry string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./hack/image", "-components", "-registry", registry, "-out", out)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image -components: %v\n%s", err, b)
	}
	return filepath.Join(out, "karmada-images.oci.tar")
}
