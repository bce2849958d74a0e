package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kao-io/kao/internal/ociimage"
	"github.com/kao-io/kao/internal/testenv"
)

// karmadaPrograms are the Karmada images of the current version: the four
// components, the agent of Pull members and the four addons.
var karmadaPrograms = []string{
	"karmada-aggregated-apiserver", "karmada-controller-manager", "karmada-scheduler", "karmada-webhook",
	"karmada-agent", "karmada-descheduler", "karmada-metrics-adapter", "karmada-scheduler-estimator", "karmada-search",
}

// buildComponents runs `hack/image -components` with the given layer cache
// and returns the lines of digests.txt.
func buildComponents(t *testing.T, cache, out string) []string {
	t.Helper()
	cmd := exec.Command("go", "run", "./hack/image", "-components", "-registry", "registry.test:5000", "-cache", cache, "-out", out)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image -components: %v\n%s", err, b)
	}
	data, err := os.ReadFile(filepath.Join(out, "digests.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func TestComponentImages(t *testing.T) {
	if testing.Short() {
		t.Skip("image tests: skipped in -short mode (they compress the offline bundle's binaries)")
	}
	if _, err := exec.LookPath("skopeo"); err != nil {
		t.Fatal("image tests need skopeo: make deps installs it")
	}
	testenv.Lane(t)
	if b, err := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "artifacts.sh")).CombinedOutput(); err != nil {
		t.Fatalf("hack/artifacts.sh: %v\n%s", err, b)
	}
	artifacts := filepath.Join(testenv.RepoRoot(), "_out", "artifacts")
	if d := os.Getenv("KAO_ARTIFACTS_DIR"); d != "" {
		artifacts = d
	}
	var pins struct{ Karmada, Kubernetes, Etcd string }
	readJSON(t, filepath.Join(artifacts, "manifest.json"), &pins)
	sums := map[string]string{}
	data, err := os.ReadFile(filepath.Join(artifacts, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			sums[f[1]] = f[0]
		}
	}
	var previous string
	entries, _ := os.ReadDir(filepath.Join(artifacts, "karmada"))
	for _, e := range entries {
		if e.Name() != pins.Karmada {
			previous = e.Name()
		}
	}

	// The first build uses the machine's layer cache, which test/e2e's
	// Containerized tests fill with the same images; the second a cache of
	// its own, so that a build from nothing gives the same digests.
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out1")
	first := buildComponents(t, ociimage.DefaultCache(), out)
	archive := filepath.Join(out, "karmada-images.oci.tar")

	t.Run("the same bundle gives the same images", func(t *testing.T) {
		if again := buildComponents(t, filepath.Join(tmp, "cache2"), filepath.Join(tmp, "out2")); !slices.Equal(first, again) {
			t.Fatalf("two builds:\n%s\n%s", strings.Join(first, "\n"), strings.Join(again, "\n"))
		}
	})

	// Each image: the name kao's role karmada_workloads gives it, the
	// bundle's program at upstream's path, and the entry point.
	type want struct{ ref, program, path string }
	wants := []want{
		{"kube-apiserver:" + pins.Kubernetes, "kubernetes/" + pins.Kubernetes + "/bin/kube-apiserver", "/usr/local/bin/kube-apiserver"},
		{"kube-controller-manager:" + pins.Kubernetes, "kubernetes/" + pins.Kubernetes + "/bin/kube-controller-manager", "/usr/local/bin/kube-controller-manager"},
		{"etcd:" + strings.TrimPrefix(pins.Etcd, "v") + "-0", "etcd/" + pins.Etcd + "/bin/etcd", "/usr/local/bin/etcd"},
	}
	for _, p := range karmadaPrograms {
		wants = append(wants, want{"karmada/" + p + ":" + pins.Karmada, "karmada/" + pins.Karmada + "/bin/" + p, "/bin/" + p})
	}
	if previous == "" {
		t.Fatal("the bundle holds no previous Karmada version")
	}
	for _, p := range karmadaPrograms[:4] {
		wants = append(wants, want{"karmada/" + p + ":" + previous, "karmada/" + previous + "/bin/" + p, "/bin/" + p})
	}
	listed, err := os.ReadFile(filepath.Join(out, "images.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, w := range wants {
		refs = append(refs, w.ref)
	}
	got := strings.Fields(string(listed))
	slices.Sort(got)
	slices.Sort(refs)
	if !slices.Equal(got, refs) {
		t.Fatalf("images.txt:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(refs, "\n"))
	}

	for _, w := range wants {
		t.Run(w.ref, func(t *testing.T) {
			// skopeo picks the image by its name in the index, as the
			// documented push does.
			dirName := strings.NewReplacer("/", "_", ":", "_").Replace(w.ref)
			layout := filepath.Join(tmp, "layout", dirName)
			if err := os.MkdirAll(layout, 0o755); err != nil {
				t.Fatal(err)
			}
			if b, err := exec.Command("skopeo", "copy", "--quiet", "oci-archive:"+archive+":"+w.ref, "oci:"+layout+":x").CombinedOutput(); err != nil {
				t.Fatalf("skopeo copy: %v\n%s", err, b)
			}
			cfgJSON, err := exec.Command("skopeo", "inspect", "--config", "oci:"+layout+":x").Output()
			if err != nil {
				t.Fatalf("skopeo inspect: %v", err)
			}
			var cfg struct {
				Config struct {
					User       string
					Entrypoint []string
					Env        []string
				} `json:"config"`
			}
			if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
				t.Fatal(err)
			}
			// Upstream's images run as root too; kao's pods do not ask for
			// another user.
			if cfg.Config.User != "0:0" || !slices.Equal(cfg.Config.Entrypoint, []string{w.path}) {
				t.Errorf("config: %s", cfgJSON)
			}
			root := filepath.Join(tmp, "root", dirName)
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			var index struct{ Manifests []struct{ Digest string } }
			var manifest struct{ Layers []struct{ Digest string } }
			readJSON(t, filepath.Join(layout, "index.json"), &index)
			readJSON(t, blob(layout, index.Manifests[0].Digest), &manifest)
			for _, l := range manifest.Layers {
				if b, err := exec.Command("tar", "-xzf", blob(layout, l.Digest), "-C", root).CombinedOutput(); err != nil {
					t.Fatalf("tar: %v\n%s", err, b)
				}
			}
			program, err := os.ReadFile(filepath.Join(root, w.path))
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(program); hex.EncodeToString(sum[:]) != sums[w.program] {
				t.Errorf("%s is not the bundle's %s", w.path, w.program)
			}
			if strings.HasPrefix(w.ref, "karmada/") {
				// CronFederatedHPA's time zones: Go reads ZONEINFO.
				if !slices.Contains(cfg.Config.Env, "ZONEINFO=/usr/share/zoneinfo.zip") {
					t.Errorf("env %q names no time zone database", cfg.Config.Env)
				}
				if info, err := os.Stat(filepath.Join(root, "usr/share/zoneinfo.zip")); err != nil || info.Size() == 0 {
					t.Errorf("the time zone database: %v", err)
				}
			}
			if info, err := os.Stat(filepath.Join(root, "tmp")); err != nil || info.Mode()&os.ModeSticky == 0 {
				t.Errorf("/tmp: %v", err)
			}
		})
	}
}
