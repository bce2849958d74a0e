package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kao-io/kao/test/hosts"
)

// TestRunFetchesItsFileFirst runs a playbook with a file to fetch from a
// real host over SSH (the host key pinned): the playbook finds the copy at
// the path its extra var gives, with the host's content and mode 0600, and
// the copy is gone with the run's secrets. A copy whose checksum is not the
// recorded one fails the run before ansible-playbook starts, saying so; a
// host key that is not the pinned one fails it too.
func TestRunFetchesItsFileFirst(t *testing.T) {
	dc := hosts.Start(t, 1)
	host := dc.Hosts()[0]
	content := "snapshot bytes " + t.Name()
	if _, err := dc.Run(context.Background(), host.Name, "mkdir -p /var/backups/kao && printf '%s' '"+content+"' > /var/backups/kao/dc1-20261127T000000Z.db"); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(content))
	want := hex.EncodeToString(sum[:])
	key, err := os.ReadFile(dc.PrivateKeyPath())
	if err != nil {
		t.Fatal(err)
	}
	known, err := os.ReadFile(dc.KnownHostsPath())
	if err != nil {
		t.Fatal(err)
	}
	fetchSpec := func(sha string, knownHosts []byte) Spec {
		spec := newSpec(t, "fetched.yml")
		spec.ExtraVars = map[string]any{"want_sha256": want}
		spec.Fetch = &Fetch{Var: "kao_fetched", Name: "dc1-20261127T000000Z.db", SHA256: sha,
			Address: host.Address, Port: host.Port, User: host.User, Directory: "/var/backups/kao",
			PrivateKey: key, KnownHosts: knownHosts}
		return spec
	}

	spec := fetchSpec(want, known)
	res, err := Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Succeeded {
		t.Fatalf("outcome %s: %s\n%s", res.Outcome, res.Message, res.Log)
	}
	if _, err := os.Stat(filepath.Join(spec.Dir, SecretsDir)); !os.IsNotExist(err) {
		t.Errorf("the run's secrets, the fetched copy among them, outlive the run: %v", err)
	}

	bad := fetchSpec(strings.Repeat("0", 64), known)
	res, err = Run(context.Background(), bad)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || !strings.Contains(res.Message, "not the recorded "+strings.Repeat("0", 64)) || !strings.Contains(res.Message, "before ansible-playbook started") {
		t.Errorf("a copy with another checksum: outcome %s, message %q; want Failed saying the checksum differs", res.Outcome, res.Message)
	}
	if strings.Contains(string(res.Log), "Read the fetched file") {
		t.Errorf("ansible-playbook ran after a bad copy:\n%s", res.Log)
	}

	// Another key pinned for the host: ssh refuses it.
	otherKey := filepath.Join(t.TempDir(), "other")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", otherKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	otherPub, err := os.ReadFile(otherKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	other := []byte(host.Address + " " + strings.Join(strings.Fields(string(otherPub))[:2], " ") + "\n")
	res, err = Run(context.Background(), fetchSpec(want, other))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != Failed || !strings.Contains(res.Message, "fetching "+host.Address+":/var/backups/kao/dc1-20261127T000000Z.db") {
		t.Errorf("a host key that is not pinned: outcome %s, message %q; want Failed naming the file", res.Outcome, res.Message)
	}
	if strings.Contains(res.Message, "PRIVATE KEY") {
		t.Errorf("the message quotes key material: %q", res.Message)
	}
}
