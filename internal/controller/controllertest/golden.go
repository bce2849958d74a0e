package controllertest

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

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	kaov1 "github.com/kao-io/kao/api/v1alpha1"
	"github.com/kao-io/kao/internal/controller/pipeline"
	"github.com/kao-io/kao/internal/pki"
	"github.com/kao-io/kao/internal/runner"
	"github.com/kao-io/kao/internal/testenv"
)

// updateGolden rewrites the package's testdata/runspec/*.golden.json from
// the current output: go test ./internal/controller/... -short -run RunSpecGolden -update
var updateGolden = flag.Bool("update", false, "rewrite the golden files")

// BinarySample is the sample KarmadaDeployment of Binary mode in config/samples.
const BinarySample = "kao_v1alpha1_karmadadeployment_binary.yaml"

// CompareGolden compares a rendered run with testdata/runspec/NAME.golden.json
// (or writes it, with -update).
func CompareGolden(t *testing.T, name string, got []byte) {
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

// SampleDeployment reads a KarmadaDeployment sample with a fixed namespace,
// UID and generation.
func SampleDeployment(t *testing.T, sample string) *kaov1.KarmadaDeployment {
	t.Helper()
	kd := &kaov1.KarmadaDeployment{}
	ReadSample(t, sample, kd)
	kd.Namespace, kd.UID, kd.Generation = "team-a", types.UID("0f0e0d0c-1111-2222-3333-444455556666"), 3
	return kd
}

// goldenRun is a run assembled for a golden file, with the temporary
// directories it names.
type goldenRun struct {
	Spec                     runner.Spec
	runDir, StateDir, bundle string
}

// AssembleForGolden assembles a run the way the controllers do, with a test
// bundle and fixed settings.
func AssembleForGolden(t *testing.T, kd *kaov1.KarmadaDeployment, in *pipeline.Inputs, playbook string) *goldenRun {
	t.Helper()
	bundleDir := testenv.WriteBundle(t, `{"karmada":"v1.18.1","kubernetes":"v1.35.4","etcd":"v3.6.6"}`,
		"karmada/v1.18.1", "kubernetes/v1.35.4", "etcd/v3.6.6")
	if err := os.WriteFile(filepath.Join(bundleDir, "karmada", "v1.18.1", "crds.tar.gz"), []byte("crds"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	g := &pipeline.Gatherer{Options: pipeline.Options{
		StateDir: stateDir, PlaybookDir: "/opt/kao/playbooks", RolesPath: []string{"/opt/kao/roles"},
		ArtifactsDir: bundleDir, MaxForks: 25, RunTimeout: pipeline.DefaultRunTimeout,
	}}
	const runID = "20261126-010203-abcdef"
	dir := filepath.Join(pipeline.RunsDir(stateDir, kd.UID), runID)
	spec, err := g.AssembleRun(context.Background(), kd, in, pipeline.RunParams{ID: runID, Dir: dir, Playbook: playbook})
	if err != nil {
		t.Fatalf("building the run: %v", err)
	}
	return &goldenRun{Spec: spec, runDir: dir, StateDir: stateDir, bundle: bundleDir}
}

// Encode writes what reaches Ansible, with the temporary directories
// replaced by $RUN, $STATE and $BUNDLE.
func (r *goldenRun) Encode(t *testing.T) []byte {
	return encodeRunSpec(t, r.Spec, map[string]string{r.runDir: "$RUN", r.StateDir: "$STATE", r.bundle: "$BUNDLE"})
}

// ReadSample reads a CR from config/samples.
func ReadSample(t *testing.T, name string, into any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// FixedInputs stands for the Secrets a run reads: fixed bytes in place of
// the key, known_hosts, kubeconfigs and PKI, so the goldens never change
// with time or randomness.
func FixedInputs(kd *kaov1.KarmadaDeployment) *pipeline.Inputs {
	in := &pipeline.Inputs{
		SSHKey:      []byte("ssh private key placeholder\n"),
		KnownHosts:  []byte("192.0.2.11 ssh-ed25519 AAAAplaceholder\n"),
		Kubeconfigs: map[string][]byte{},
		PKI: pki.Bundle{
			"ca.crt": []byte("ca certificate"), "ca.key": []byte("ca key"),
			"admin-client.crt": []byte("admin certificate"), "admin-client.key": []byte("admin key"),
		},
	}
	for _, m := range kd.Spec.Members {
		in.Kubeconfigs[m.Name] = []byte("minimal kubeconfig of " + m.Name)
		in.KubeconfigSecrets = append(in.KubeconfigSecrets, []byte("token of "+m.Name))
	}
	if kd.Spec.Mode == kaov1.ContainerizedMode {
		in.Host = &pipeline.HostCluster{Kubeconfig: []byte("host cluster kubeconfig"), Secrets: [][]byte{[]byte("host token")}}
		kd.Status.Endpoint = "198.51.100.7:31443"
	}
	return in
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
