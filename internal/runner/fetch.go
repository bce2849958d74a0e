package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kao-io/kao/internal/etcdsnapshot"
)

// Fetch is a file a run takes from a host over SSH before ansible-playbook
// starts: an etcd snapshot on a backup host, for a restore run whose
// process does not have it (a Job's pod). The copy goes among the run's
// secret files, which are removed when the run ends: a snapshot holds every
// Secret of the control plane.
type Fetch struct {
	// Var is the extra var that gets the copy's path.
	Var string `json:"var"`
	// Name is the file's name in Target's directory.
	Name string `json:"name"`
	// SHA256 is the checksum the copy must have: the run fails before
	// ansible-playbook starts otherwise.
	SHA256 string `json:"sha256"`
	// Address, Port, User and Directory say where the file is; they come
	// from validated API fields and are checked again before use.
	Address   string `json:"address"`
	Port      int    `json:"port"`
	User      string `json:"user"`
	Directory string `json:"directory"`
	// PrivateKey and KnownHosts are the SSH key and the host's pinned key.
	PrivateKey []byte `json:"privateKey"`
	KnownHosts []byte `json:"knownHosts"`
}

// fetchKey is the fetch's SSH key, to redact; nil without a fetch.
func fetchKey(f *Fetch) []byte {
	if f == nil {
		return nil
	}
	return f.PrivateKey
}

// fetchedDir is where fetched files go, under the run's secrets.
const fetchedDir = "fetched"

// fetchPath is where the run's fetched file is written.
func fetchPath(spec *Spec) string {
	return filepath.Join(spec.Dir, SecretsDir, fetchedDir, spec.Fetch.Name)
}

// withFetchVar returns the extra vars with the fetched file's path.
func withFetchVar(spec *Spec) map[string]any {
	out := make(map[string]any, len(spec.ExtraVars)+1)
	for k, v := range spec.ExtraVars {
		out[k] = v
	}
	out[spec.Fetch.Var] = fetchPath(spec)
	return out
}

// fetch copies the run's Fetch file into the run's secrets and checks its
// checksum. The error says what failed, never with key material.
func fetch(ctx context.Context, spec *Spec) error {
	f := spec.Fetch
	t := &etcdsnapshot.SSHTarget{Address: f.Address, Port: f.Port, User: f.User, Directory: f.Directory,
		PrivateKey: f.PrivateKey, KnownHosts: f.KnownHosts, TempDir: filepath.Join(spec.Dir, SecretsDir)}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("the backup host: %w", err)
	}
	local := fetchPath(spec)
	if err := os.MkdirAll(filepath.Dir(local), 0o700); err != nil {
		return fmt.Errorf("making the directory of fetched files: %w", err)
	}
	if err := t.Download(ctx, f.Name, local); err != nil {
		return fmt.Errorf("fetching %s: %w", t.Location(f.Name), err)
	}
	sum, _, err := etcdsnapshot.FileSHA256(local)
	if err != nil {
		return fmt.Errorf("reading the copy of %s: %w", t.Location(f.Name), err)
	}
	if sum != f.SHA256 {
		return fmt.Errorf("the copy of %s has sha256 %s, not the recorded %s: the run stopped before ansible-playbook started", t.Location(f.Name), sum, f.SHA256)
	}
	return nil
}
