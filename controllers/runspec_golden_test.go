package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

// updateGolden rewrites testdata/runspec/*.golden.json from the current
// output: go test ./controllers/ -short -run RunSpecGolden -update
var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// runSpecCase is one run assembled from a sample CR.
type runSpecCase struct {
	name, sample, playbook string
	// change edits the sample before the run is assembled; it returns the
	// upgrade's inventory groups, if any.
	change func(t *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string
}

const (
	binarySample        = "kao_v1alpha1_karmadadeployment_binary.yaml"
	containerizedSample = "kao_v1alpha1_karmadadeployment_containerized.yaml"
)

// TestRunSpecGolden pins what every playbook's run of a KarmadaDeployment
// gets from the sample CRs in config/samples: the inventory, extra vars,
// groups, secret files (by checksum), redaction, roles path, fact cache and
// limits. It is the proof that moving the run pipeline around changes no run.
func TestRunSpecGolden(t *testing.T) {
	cases := []runSpecCase{
		{name: "binary-install", sample: binarySample, playbook: installPlaybook},
		{name: "binary-members", sample: binarySample, playbook: membersPlaybook},
		{name: "binary-upgrade", sample: binarySample, playbook: upgradePlaybook, change: olderControlPlane},
		{name: "binary-uninstall", sample: binarySample, playbook: uninstallPlaybook, change: deleting},
		{name: "containerized-install", sample: containerizedSample, playbook: installPlaybook},
		{name: "containerized-uninstall", sample: containerizedSample, playbook: uninstallPlaybook, change: deleting},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kd := sampleDeployment(t, c.sample)
			var groups map[string][]string
			if c.change != nil {
				groups = c.change(t, kd)
			}
			in := fixedInputs(kd)
			in.upgradeGroups = groups
			r := assembleForGolden(t, kd, in, c.playbook)
			compareGolden(t, c.name, r.encode(t))
		})
	}
}

// TestRestoreRunSpecGolden pins the etcd restore's run of the binary sample
// with the EtcdRestore sample: the deployment's run without its members,
// plus the snapshot and the restore's identity.
func TestRestoreRunSpecGolden(t *testing.T) {
	kd := sampleDeployment(t, binarySample)
	kd.Spec.Members, kd.Status.Members = nil, nil
	in := fixedInputs(kd)
	r := assembleForGolden(t, kd, in, etcdRestorePlaybook)
	er := &kaov1.EtcdRestore{}
	readSample(t, "kao_v1alpha1_etcdrestore.yaml", er)
	er.Namespace, er.UID = kd.Namespace, types.UID("9a8b7c6d-aaaa-bbbb-cccc-ddddeeeeffff")
	snap := &kaov1.Snapshot{Name: "dc1-20261126-000000.db", SHA256: strings.Repeat("ab", 32)}
	for k, v := range restoreExtraVars(er, snap, filepath.Join(r.stateDir, "restores", "snapshot.db")) {
		r.spec.ExtraVars[k] = v
	}
	compareGolden(t, "binary-etcd-restore", r.encode(t))
}

// compareGolden compares a rendered run with testdata/runspec/NAME.golden.json
// (or writes it, with -update).
func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "runspec", name+".golden.json")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("the run differs from %s:\n%s", path, lineDiff(string(want), string(got)))
	}
}

// sampleDeployment reads a KarmadaDeployment sample with a fixed namespace,
// UID and generation.
func sampleDeployment(t *testing.T, sample string) *kaov1.KarmadaDeployment {
	t.Helper()
	kd := &kaov1.KarmadaDeployment{}
	readSample(t, sample, kd)
	kd.Namespace, kd.UID, kd.Generation = "team-a", types.UID("0f0e0d0c-1111-2222-3333-444455556666"), 3
	return kd
}

// goldenRun is a run assembled for a golden file, with the temporary
// directories it names.
type goldenRun struct {
	spec                     runner.Spec
	runDir, stateDir, bundle string
}

// assembleForGolden assembles a run the way the controllers do, with a test
// bundle and fixed settings.
func assembleForGolden(t *testing.T, kd *kaov1.KarmadaDeployment, in *runInputs, playbook string) *goldenRun {
	t.Helper()
	bundleDir := testenv.WriteBundle(t, `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}`,
		"karmada/v1.18.1", "kubernetes/v1.35.4", "etcd/v3.6.6")
	if err := os.WriteFile(filepath.Join(bundleDir, "karmada", "v1.18.1", "crds.tar.gz"), []byte("crds"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	g := &gatherer{Options: Options{
		StateDir: stateDir, PlaybookDir: "/opt/kao/playbooks", RolesPath: []string{"/opt/kao/roles"},
		ArtifactsDir: bundleDir, MaxForks: 25, RunTimeout: defaultRunTimeout,
	}}
	const runID = "20261126-010203-abcdef"
	dir := filepath.Join(runsDir(stateDir, kd.UID), runID)
	spec, err := g.assembleRun(context.Background(), kd, in, runParams{id: runID, dir: dir, playbook: playbook})
	if err != nil {
		t.Fatalf("building the run: %v", err)
	}
	return &goldenRun{spec: spec, runDir: dir, stateDir: stateDir, bundle: bundleDir}
}

// encode writes what reaches Ansible, with the temporary directories
// replaced by $RUN, $STATE and $BUNDLE.
func (r *goldenRun) encode(t *testing.T) []byte {
	return encodeRunSpec(t, r.spec, map[string]string{r.runDir: "$RUN", r.stateDir: "$STATE", r.bundle: "$BUNDLE"})
}

// readSample reads a CR from config/samples.
func readSample(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// fixedInputs stands for the Secrets a run reads: fixed bytes in place of
// the key, known_hosts, kubeconfigs and PKI, so the goldens never change
// with time or randomness.
func fixedInputs(kd *kaov1.KarmadaDeployment) *runInputs {
	in := &runInputs{
		sshKey:      []byte("ssh private key placeholder\n"),
		knownHosts:  []byte("192.0.2.11 ssh-ed25519 AAAAplaceholder\n"),
		kubeconfigs: map[string][]byte{},
		pki: pki.Bundle{
			"ca.crt": []byte("ca certificate"), "ca.key": []byte("ca key"),
			"admin-client.crt": []byte("admin certificate"), "admin-client.key": []byte("admin key"),
		},
	}
	for _, m := range kd.Spec.Members {
		in.kubeconfigs[m.Name] = []byte("minimal kubeconfig of " + m.Name)
		in.kubeconfigSecrets = append(in.kubeconfigSecrets, []byte("token of "+m.Name))
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		in.host = &hostCluster{kubeconfig: []byte("host cluster kubeconfig"), secrets: [][]byte{[]byte("host token")}}
		kd.Status.Endpoint = "198.51.100.7:31443"
	}
	return in
}

// olderControlPlane makes the sample's control plane run Karmada v1.17.1
// everywhere, so moving to the spec's v1.18.1 is an upgrade.
func olderControlPlane(t *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string {
	t.Helper()
	kd.Status.Version = "v1.17.1"
	for _, c := range upgradeOrder {
		v := "v1.17.1"
		if c.family == kubernetesFamily {
			v = "v1.35.4"
		}
		st := kaov1.ComponentStatus{Name: c.name, Version: v}
		for _, h := range componentHostNames(kd, c.name) {
			st.Instances = append(st.Instances, kaov1.ComponentInstance{Host: h, Version: v})
		}
		kd.Status.Components = append(kd.Status.Components, st)
	}
	plan, err := planUpgrade(kd, targetVersions(kd, &artifacts{karmada: "v1.18.1", kubernetes: "v1.35.4", etcd: "v3.6.6"}))
	if err != nil || plan == nil {
		t.Fatalf("planning the upgrade: %v, %v", plan, err)
	}
	return plan.inventoryGroups()
}

// deleting marks the sample as being deleted, as an uninstall run sees it.
func deleting(_ *testing.T, kd *kaov1.KarmadaDeployment) map[string][]string {
	now := metav1.Now()
	kd.DeletionTimestamp = &now
	return nil
}

// encodeRunSpec writes the parts of a run that reach Ansible as indented
// JSON; secret files appear as their paths and checksums, never their bytes.
func encodeRunSpec(t *testing.T, spec runner.Spec, paths map[string]string) []byte {
	t.Helper()
	type secretFile struct{ Path, SHA256 string }
	var inv any
	if err := json.Unmarshal(spec.Inventory, &inv); err != nil {
		t.Fatalf("the inventory is not JSON: %v", err)
	}
	secrets := []secretFile{}
	for _, f := range spec.Secrets {
		sum := sha256.Sum256(f.Data)
		secrets = append(secrets, secretFile{Path: f.Path, SHA256: hex.EncodeToString(sum[:])})
	}
	out, err := json.MarshalIndent(map[string]any{
		"id": spec.ID, "dir": spec.Dir, "playbook": spec.Playbook, "inventory": inv, "groups": spec.Groups,
		"extraVars": spec.ExtraVars, "secrets": secrets, "redactedValues": len(spec.Redact),
		"sshPrivateKeySHA256": sha(spec.SSHPrivateKey), "knownHostsSHA256": sha(spec.KnownHosts),
		"rolesPath": spec.RolesPath, "factCacheDir": spec.FactCacheDir, "maxForks": spec.MaxForks,
		"timeout": spec.Timeout.String(), "sshConnectTimeout": spec.SSHConnectTimeout.String(),
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	// The longest first: the run directory lies under the state directory.
	for len(paths) > 0 {
		longest := ""
		for from := range paths {
			if len(from) > len(longest) {
				longest = from
			}
		}
		s = strings.ReplaceAll(s, longest, paths[longest])
		delete(paths, longest)
	}
	return []byte(s + "\n")
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// lineDiff lists the lines that differ, for a readable failure.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			b.WriteString("- " + wl + "\n+ " + gl + "\n")
		}
	}
	return b.String()
}
