// Package jobexec runs playbooks as Kubernetes Jobs: each run is a Job in
// its object's namespace, from the operator's own image, whose pod runs
// ansible-playbook with kao's runner and relays its events on stdout. The
// operator follows the pod's log with the same parser as an in-process run,
// and finds the Job again after a restart, so a run outlives the operator.
//
// What the pod needs (inventory, extra vars, the SSH key and known hosts,
// kubeconfigs, certificates, generated playbooks and roles, and where to
// fetch a restore's snapshot from) travels in a
// Secret of the run, owned by its Job and deleted when the run ends. The pod
// mounts no service account token.
package jobexec

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/kao-io/kao/internal/runner"
)

// request is what a run's pod reads from its Secret: the runner.Spec
// without what only the operator uses (progress callbacks, owner, meta).
type request struct {
	ID                string              `json:"id"`
	Dir               string              `json:"dir"`
	Playbook          string              `json:"playbook"`
	Inventory         []byte              `json:"inventory"`
	Groups            map[string][]string `json:"groups"`
	ExtraVars         map[string]any      `json:"extraVars"`
	SSHPrivateKey     []byte              `json:"sshPrivateKey,omitempty"`
	KnownHosts        []byte              `json:"knownHosts,omitempty"`
	SSHConnectTimeout time.Duration       `json:"sshConnectTimeout,omitempty"`
	Secrets           []runner.File       `json:"secrets,omitempty"`
	Files             []runner.File       `json:"files,omitempty"`
	RolesPath         []string            `json:"rolesPath,omitempty"`
	FactCacheDir      string              `json:"factCacheDir,omitempty"`
	MaxForks          int                 `json:"maxForks,omitempty"`
	Timeout           time.Duration       `json:"timeout,omitempty"`
	Redact            [][]byte            `json:"redact,omitempty"`
	Fetch             *runner.Fetch       `json:"fetch,omitempty"`
	Check             bool                `json:"check,omitempty"`
	Diff              bool                `json:"diff,omitempty"`
	Tags              []string            `json:"tags,omitempty"`
}

func requestOf(spec runner.Spec) request {
	return request{
		ID: spec.ID, Dir: spec.Dir, Playbook: spec.Playbook, Inventory: spec.Inventory, Groups: spec.Groups,
		ExtraVars: spec.ExtraVars, SSHPrivateKey: spec.SSHPrivateKey, KnownHosts: spec.KnownHosts,
		SSHConnectTimeout: spec.SSHConnectTimeout, Secrets: spec.Secrets, Files: spec.Files, RolesPath: spec.RolesPath,
		FactCacheDir: spec.FactCacheDir, MaxForks: spec.MaxForks, Timeout: spec.Timeout, Redact: spec.Redact,
		Fetch: spec.Fetch, Check: spec.Check, Diff: spec.Diff, Tags: spec.Tags,
	}
}

func (r request) spec() runner.Spec {
	return runner.Spec{
		ID: r.ID, Dir: r.Dir, Playbook: r.Playbook, Inventory: r.Inventory, Groups: r.Groups,
		ExtraVars: r.ExtraVars, SSHPrivateKey: r.SSHPrivateKey, KnownHosts: r.KnownHosts,
		SSHConnectTimeout: r.SSHConnectTimeout, Secrets: r.Secrets, Files: r.Files, RolesPath: r.RolesPath,
		FactCacheDir: r.FactCacheDir, MaxForks: r.MaxForks, Timeout: r.Timeout, Redact: r.Redact,
		Fetch: r.Fetch, Check: r.Check, Diff: r.Diff, Tags: r.Tags,
	}
}

// ReadRequest reads the run a pod is to run from the file its Secret is
// mounted as.
func ReadRequest(path string) (runner.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return runner.Spec{}, fmt.Errorf("reading the run's request: %w", err)
	}
	return ReadRequestData(data)
}

// ReadRequestData decodes a run's request.
func ReadRequestData(data []byte) (runner.Spec, error) {
	r := request{}
	if err := json.Unmarshal(data, &r); err != nil {
		return runner.Spec{}, fmt.Errorf("decoding the run's request: %w", err)
	}
	return r.spec(), nil
}

// ImageUID is the user (and group) kao's image runs as (hack/image), and
// so the run pods.
const ImageUID = 65532
