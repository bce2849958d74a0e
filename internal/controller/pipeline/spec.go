package pipeline

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/reason"
	"github.com/kao-io/kao/internal/inventory"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
)

// hostKubeconfigFile is where a run finds the host cluster's kubeconfig,
// under its secrets directory.
const hostKubeconfigFile = "host-cluster.kubeconfig"

// InventoryGroups lists the groups the runner sizes its forks and estimate by.
var InventoryGroups = []string{
	"all", "etcd", "karmada_apiserver", "karmada_control_plane", "host_cluster",
	"members", "members_join", "members_unjoin",
}

// RunParams name one run: its ID, its directory and its entry playbook.
type RunParams struct {
	ID, Dir, Playbook string
}

// AssembleRun turns a deployment and its inputs into a run, in three steps:
// the inventory (pure), the bundle it installs from (read from disk, or
// mirrored), and the spec (pure). A bad inventory is reported before a bad
// bundle.
func (g *Gatherer) AssembleRun(ctx context.Context, kd *kaov1.KarmadaDeployment, in *Inputs, p RunParams) (runner.Spec, error) {
	inv, err := inventoryFor(kd, in, p.Dir)
	if err != nil {
		return runner.Spec{}, err
	}
	a, err := g.runArtifacts(ctx, kd, p.Playbook)
	if err != nil {
		return runner.Spec{}, err
	}
	return buildRunSpec(kd, in, inv, a, g.Options, p)
}

// inventoryFor builds the run's inventory; member kubeconfigs and the host
// cluster's are named by their paths under the run's secrets directory.
func inventoryFor(kd *kaov1.KarmadaDeployment, in *Inputs, dir string) (*inventory.Inventory, error) {
	kubeconfigPath := func(member string) string {
		return filepath.Join(dir, runner.SecretsDir, "members", member+".kubeconfig")
	}
	opts := inventory.Options{MemberKubeconfigPath: kubeconfigPath, Upgrade: in.UpgradeGroups}
	if len(in.PKI) > 0 {
		opts.AgentCertificateNotAfter = func(member string) (time.Time, bool) { return in.PKI.NotAfter(pki.AgentClient(member)) }
	}
	if in.Host != nil {
		opts.HostClusterKubeconfigPath = filepath.Join(dir, runner.SecretsDir, hostKubeconfigFile)
		opts.APIEndpoint = kd.Status.Endpoint
	}
	inv, err := inventory.Build(kd, opts)
	if err != nil {
		return nil, reason.Missing("building the inventory: %v", err)
	}
	return inv, nil
}

// runArtifacts finds the bundle a run installs from. A Containerized control
// plane takes its images from the registry and only Karmada's CRDs from the
// bundle; its uninstall needs nothing of it (nil). An uninstall uses what an
// earlier run mirrored when it can: removing a control plane must not depend
// on the bundle's web server.
func (g *Gatherer) runArtifacts(ctx context.Context, kd *kaov1.KarmadaDeployment, playbook string) (*Artifacts, error) {
	if kd.Spec.Mode != kaov1.BinaryMode && playbook == UninstallPlaybook {
		return nil, nil
	}
	a, err := g.ObservedArtifacts(kd)
	if playbook != UninstallPlaybook || err != nil {
		a, err = g.FetchArtifacts(ctx, kd)
	}
	return a, err
}

// buildRunSpec assembles everything one run needs from what was gathered,
// without reading anything: the same deployment, inputs and settings always
// give the same run (testdata/runspec holds it for the samples).
func buildRunSpec(kd *kaov1.KarmadaDeployment, in *Inputs, inv *inventory.Inventory, a *Artifacts, o Options, p RunParams) (runner.Spec, error) {
	invJSON, err := inv.FileJSON()
	if err != nil {
		return runner.Spec{}, fmt.Errorf("encoding the inventory: %w", err)
	}
	extraVars := map[string]any{"kao_run_id": p.ID}
	if a != nil {
		for k, v := range a.extraVars() {
			extraVars[k] = v
		}
	}
	groups := map[string][]string{}
	for _, group := range append(slices.Clone(InventoryGroups), inventory.UpgradeGroups...) {
		groups[group] = inv.Hosts(group)
	}
	spec := runner.Spec{
		ID:            p.ID,
		Dir:           p.Dir,
		Playbook:      filepath.Join(o.PlaybookDir, p.Playbook),
		Inventory:     invJSON,
		Groups:        groups,
		ExtraVars:     extraVars,
		SSHPrivateKey: in.SSHKey,
		KnownHosts:    in.KnownHosts,
		RolesPath:     o.RolesPath,
		FactCacheDir:  FactsDir(o.StateDir, kd.UID),
		MaxForks:      o.MaxForks,
		Timeout:       o.RunTimeout,
		Redact:        in.secretValues(),
	}
	if kd.Spec.SSH != nil && kd.Spec.SSH.ConnectTimeoutSeconds > 0 {
		spec.SSHConnectTimeout = secondsDuration(kd.Spec.SSH.ConnectTimeoutSeconds)
	}
	for _, name := range SortedKeys(in.Kubeconfigs) {
		spec.Secrets = append(spec.Secrets, runner.File{Path: filepath.Join("members", name+".kubeconfig"), Data: in.Kubeconfigs[name]})
	}
	if in.Host != nil {
		spec.Secrets = append(spec.Secrets, runner.File{Path: hostKubeconfigFile, Data: in.Host.Kubeconfig})
	}
	if len(in.PKI) > 0 {
		for _, name := range SortedKeys(in.PKI) {
			spec.Secrets = append(spec.Secrets, runner.File{Path: filepath.Join("pki", name), Data: in.PKI[name]})
		}
		spec.ExtraVars["kao_pki_dir"] = UnsafeString(filepath.Join(p.Dir, runner.SecretsDir, "pki"))
	}
	return spec, nil
}
