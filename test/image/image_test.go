// Package image tests `make image`: the operator image is the same bytes when
// built twice from the same inputs, and what it holds runs as the image
// declares, as the non-root user on a read-only root file system.
package image

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kao-io/kao/internal/ociimage"
	"github.com/kao-io/kao/internal/testenv"
)

const name = "registry.test/kao/kao-manager:test"

// build runs hack/image into out with the given layer cache and returns the
// digest it reports.
func build(t *testing.T, cache, out string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("go", "run", "./hack/image", "-name", name, "-cache", cache, "-out", out)
	cmd.Dir = testenv.RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	digest, err := os.ReadFile(filepath.Join(out, "kao-manager.digest"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s in %s", strings.TrimSpace(string(digest)), time.Since(start).Round(time.Second))
	return strings.TrimSpace(string(digest))
}

func requirePrerequisites(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("image tests: skipped in -short mode (they run mmdebstrap and compress the offline bundle)")
	}
	if os.Getuid() != 0 {
		t.Fatal("image tests need root: mmdebstrap builds the Debian layer in a chroot")
	}
	for _, tool := range []string{"mmdebstrap", "skopeo", "unshare", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("image tests need %s: make deps installs it", tool)
		}
	}
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "artifacts.sh"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/artifacts.sh: %v\n%s", err, b)
	}
}

func TestImage(t *testing.T) {
	requirePrerequisites(t)
	testenv.Lane(t)
	tmp := t.TempDir()
	// The first build uses the machine's layer cache, as `make image` does
	// (test/incluster's image build fills it too); the second a cache of
	// its own, empty but for the bundle layer.
	first, second := ociimage.DefaultCache(), filepath.Join(tmp, "cache2")
	digest := build(t, first, filepath.Join(tmp, "out1"))
	archive := filepath.Join(tmp, "out1", "kao-manager.oci.tar")

	t.Run("the same inputs give the same digest", func(t *testing.T) {
		// The second build makes the Debian layer again with mmdebstrap and
		// the kao layer again from a fresh go build; only the bundle layer
		// (1.2 GB to compress, the same code as the kao layer) is reused.
		// So a build from a fresh cache and one from a cache that many
		// builds used give the same bytes.
		if err := os.MkdirAll(second, 0o755); err != nil {
			t.Fatal(err)
		}
		bundles, _ := filepath.Glob(filepath.Join(first, "bundle-*"))
		for _, f := range bundles {
			if err := os.Symlink(f, filepath.Join(second, filepath.Base(f))); err != nil {
				t.Fatal(err)
			}
		}
		if again := build(t, second, filepath.Join(tmp, "out2")); again != digest {
			t.Fatalf("two builds of the same tree: %s and %s", digest, again)
		}
	})

	t.Run("the Debian packages are listed", func(t *testing.T) {
		list, err := os.ReadFile(filepath.Join(tmp, "out1", "kao-manager.packages"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"ansible-core ", "python3-kubernetes ", "openssh-client ", "tini "} {
			if !strings.Contains("\n"+string(list), "\n"+p) {
				t.Errorf("%s is not in the package list:\n%s", p, list)
			}
		}
	})

	t.Run("skopeo reads the archive", func(t *testing.T) {
		out, err := exec.Command("skopeo", "inspect", "--config", "oci-archive:"+archive).Output()
		if err != nil {
			t.Fatalf("skopeo inspect: %v", err)
		}
		var cfg struct {
			Config struct {
				User       string
				Entrypoint []string
			} `json:"config"`
			RootFS struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		}
		if err := json.Unmarshal(out, &cfg); err != nil {
			t.Fatal(err)
		}
		// config/manager runs the pod as 65532 with runAsNonRoot: a numeric
		// user is what lets the kubelet check it.
		if cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/usr/bin/tini -- /usr/local/bin/kao-manager" || len(cfg.RootFS.DiffIDs) != 3 {
			t.Fatalf("config: %s", out)
		}
		// skopeo copies it as a registry push would, into an OCI layout.
		if b, err := exec.Command("skopeo", "copy", "--quiet", "oci-archive:"+archive, "oci:"+filepath.Join(tmp, "layout")+":test").CombinedOutput(); err != nil {
			t.Fatalf("skopeo copy: %v\n%s", err, b)
		}
	})

	t.Run("it runs as kao on a read-only root", func(t *testing.T) {
		root := unpack(t, archive, filepath.Join(tmp, "root"))
		// What the manager needs at run time, as the user and with the
		// read-only root file system config/manager declares (and a
		// writable /tmp, its emptyDir).
		script := strings.Join([]string{
			"set -e",
			// /var/tmp is writable by everyone on a writable root.
			"if touch /var/tmp/x 2>/dev/null; then echo the root file system is writable; exit 1; fi",
			"test ! -e /etc/resolv.conf && test ! -e /etc/hostname || { echo the network files of the build machine are in the image; exit 1; }",
			"test \"$(id -u):$(id -g)\" = 65532:65532",
			"/usr/bin/tini -- /usr/local/bin/kao-manager --help 2>&1 | grep -q -- -playbook-dir",
			"/usr/local/bin/kao-inventory --help >/dev/null 2>&1",
			"test -f /opt/kao/playbooks/install.yml && test -d /opt/kao/roles/etcd/tasks",
			"test -f /opt/kao/artifacts/manifest.json && cd /opt/kao/artifacts && sha256sum --quiet -c SHA256SUMS",
			"ssh -V 2>&1 | grep -q OpenSSH",
			"export HOME=/var/lib/kao",
			"ansible-galaxy collection list 2>/dev/null | grep -q '^kubernetes.core '",
			"ansible-galaxy collection list 2>/dev/null | grep -q '^ansible.posix '",
			// A real run with the callback the manager reads.
			"printf -- '- hosts: localhost\\n  gather_facts: false\\n  tasks:\\n    - ansible.builtin.command: python3 -c \"import kubernetes\"\\n' > /tmp/p.yml",
			"ANSIBLE_STDOUT_CALLBACK=ansible.posix.jsonl ansible-playbook -c local -i localhost, /tmp/p.yml > /tmp/out.jsonl",
			"grep -q '\"stats\":{\"localhost\":{\"changed\":1,\"failures\":0,' /tmp/out.jsonl || { cat /tmp/out.jsonl; exit 1; }",
		}, "\n")
		// A mount namespace of its own: the mounts go with it. /dev and
		// /proc are what a container runtime provides, /var/lib/kao the
		// state volume (the user's home: Ansible's remote_tmp for local
		// tasks).
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			`set -e; mount --bind "$1" "$1"; mount -o remount,bind,ro "$1"; mount -t tmpfs tmpfs "$1/tmp"; `+
				`mount -t tmpfs -o uid=65532,gid=65532 tmpfs "$1/var/lib/kao"; `+
				`mount --rbind /dev "$1/dev"; mount -t proc proc "$1/proc"; `+
				`exec chroot --userspec=65532:65532 "$1" /bin/sh -c "$2"`, "sh", root, script)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("in the image: %v\n%s", err, b)
		}
	})
}

// unpack extracts the image's layers in order into dir and returns it. kao's
// layers hold no whiteouts, so extracting them in order is the image's root.
func unpack(t *testing.T, archive, dir string) string {
	t.Helper()
	layout := dir + ".layout"
	for _, d := range []string{dir, layout} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("tar", "-xf", archive, "-C", layout).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, b)
	}
	var index struct{ Manifests []struct{ Digest string } }
	var manifest struct{ Layers []struct{ Digest string } }
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	readJSON(t, blob(layout, index.Manifests[0].Digest), &manifest)
	for _, l := range manifest.Layers {
		if b, err := exec.Command("tar", "-xzf", blob(layout, l.Digest), "-C", dir).CombinedOutput(); err != nil {
			t.Fatalf("tar: %v\n%s", err, b)
		}
	}
	return dir
}

func blob(layout, digest string) string {
	return filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
