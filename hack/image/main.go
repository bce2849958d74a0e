// Command image builds kao's operator image as an OCI archive, offline and
// reproducibly (`make image`):
//
//	go run ./hack/image -name kao-manager:dev -out _out/image
//
// The image has three layers, bottom first:
//
//  1. Debian bookworm's essential packages with tini, python3, ansible-core,
//     python3-kubernetes and openssh-client, and of Debian's `ansible`
//     package only the two collections the roles use (kubernetes.core,
//     ansible.posix), built by mmdebstrap from the machine's own apt mirror
//     with SOURCE_DATE_EPOCH set (mmdebstrap's output is then the same bytes
//     for the same packages); the user kao (65532) is added;
//  2. kao: the manager and kao-inventory (static Go binaries), playbooks and
//     roles, and the state directory /var/lib/kao owned by kao;
//  3. the offline artifacts bundle (`make artifacts`) in /opt/kao/artifacts,
//     the manager's default --artifacts-dir.
//
// The base and bundle layers are cached under -cache, keyed by what makes
// them, so that a rebuild after a code change compresses only the kao layer.
// Every time stamp is fixed, so the same inputs give the same image digest.
// No Docker daemon, buildah or root-owned image store is involved.
//
// With -components it builds instead the images of the Karmada control
// plane that Containerized mode and Pull members run (`make images`): one
// one-layer image per program of the bundle, named and placed as upstream's
// images are, all in one archive (components.go).
//
//	go run ./hack/image -components -registry registry.dc1.example:5000 -out _out/images
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kao-io/kao/internal/ociimage"
)

// baseEpoch is the time stamp of every file of the Debian layer. It is
// fixed, not the commit time, so the layer stays the same across kao's
// commits and registries store it once.
const baseEpoch = 1764115200 // 2025-11-26T00:00:00Z

// basePackages are installed on top of Debian's essential set. tini is the
// container's first process: Ansible's workers and ssh leave orphans, which
// the kernel hands to process 1, and tini reaps them (the manager, as process
// 1, would leave them as zombies: Go waits only for its own children).
var basePackages = []string{"tini", "python3-minimal", "ansible-core", "python3-kubernetes", "openssh-client"}

// collections are the parts of Debian's ansible package the roles use (and
// the runs' event stream: kao's stdout callback extends ansible.posix's
// jsonl); the rest of its 300 MB of collections is left out.
var collections = []string{"kubernetes/core", "ansible/posix"}

// kaoUID is the user the image runs as: config/manager's runAsUser.
const kaoUID = 65532

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	nameFlag := flag.String("name", "kao-manager:dev", "Image name written into the archive: [registry/]repository:tag.")
	out := flag.String("out", filepath.Join(root, "_out", "image"), "Directory for the archive (<repository>.oci.tar), its digest and its Debian package list.")
	cache := flag.String("cache", ociimage.DefaultCache(), "Directory caching the Debian and bundle layers.")
	artifacts := flag.String("artifacts", firstNonEmpty(os.Getenv("KAO_ARTIFACTS_DIR"), filepath.Join(root, "_out", "artifacts")),
		"Offline bundle to include (make artifacts); $KAO_ARTIFACTS_DIR when set.")
	mirror := flag.String("mirror", "", "Debian mirror URL; the first of the machine's apt sources when empty.")
	security := flag.String("security-mirror", "", "Debian security mirror URL; the mirror's sibling .../debian-security when empty.")
	components := flag.Bool("components", false, "Build the Karmada control plane's images (Containerized mode, Pull members) from the bundle instead of the operator image, as one archive "+componentsArchive+" in -out.")
	registry := flag.String("registry", "registry.kao.local", "With -components: the registry the images are named under for containerd (ctr images import); the archive's index names them without it.")
	baseOnly := flag.Bool("base-only", false, "Only make sure the Debian layer is in -cache, and write no image: make check builds it beside the tools, while mmdebstrap mostly waits on downloads.")
	flag.Parse()
	if *baseOnly {
		if err := os.MkdirAll(*cache, 0o750); err != nil {
			return err
		}
		b := &builder{root: root, cache: *cache, mirror: *mirror, security: *security}
		b.removeStaleTemps()
		defer b.removeTemps()
		start := time.Now()
		if _, err := b.baseLayer(); err != nil {
			return err
		}
		log.Printf("the Debian layer is in %s (%s)", *cache, time.Since(start).Round(time.Second))
		return nil
	}
	if *components {
		if err := os.MkdirAll(*cache, 0o750); err != nil {
			return err
		}
		if err := os.MkdirAll(*out, 0o750); err != nil {
			return err
		}
		b := &builder{root: root, cache: *cache}
		b.removeStaleTemps()
		defer b.removeTemps()
		return b.buildComponents(*registry, *artifacts, *out)
	}
	name, err := ociimage.ParseReference(*nameFlag)
	if err != nil {
		return err
	}

	start := time.Now()
	for _, dir := range []string{*out, *cache} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	b := &builder{root: root, cache: *cache, mirror: *mirror, security: *security}
	b.removeStaleTemps()
	b.pruneUnused(7 * 24 * time.Hour)
	defer b.removeTemps()
	img, err := b.image(name, *artifacts)
	if err != nil {
		return err
	}
	archive := filepath.Join(*out, name.Repository()+".oci.tar")
	digest, err := ociimage.WriteArchive(archive, img)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, name.Repository()+".digest"), []byte(digest+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, name.Repository()+".packages"), b.packages, 0o600); err != nil {
		return err
	}
	log.Printf("wrote %s: %s %s in %s", archive, name, digest, time.Since(start).Round(time.Second))
	return nil
}

type builder struct {
	root, cache, mirror, security string
	mu                            sync.Mutex // guards temps
	// temps are files to remove once the archive is written.
	temps []string
	// packages lists the Debian layer's packages, "name version" lines.
	packages []byte
}

// tempPrefix starts the name of every temporary file in the cache.
const tempPrefix = "tmp-"

// removeStaleTemps removes temporary files an interrupted build left in the
// cache more than an hour ago (a build running beside this one may still be
// writing newer ones).
func (b *builder) removeStaleTemps() {
	stale, _ := filepath.Glob(filepath.Join(b.cache, tempPrefix+"*"))
	for _, f := range stale {
		if info, err := os.Stat(f); err == nil && time.Since(info.ModTime()) > time.Hour {
			_ = os.RemoveAll(f)
		}
	}
}

// pruneUnused removes cached layers no build has used for longer than age:
// each bundle layer is hundreds of megabytes, and every Debian update or
// bundle change makes a new one.
func (b *builder) pruneUnused(age time.Duration) {
	metas, _ := filepath.Glob(filepath.Join(b.cache, "*.json"))
	for _, m := range metas {
		if info, err := os.Stat(m); err == nil && time.Since(info.ModTime()) > age {
			stem := strings.TrimSuffix(m, ".json")
			for _, f := range []string{stem + ".tar.gz", stem + ".packages", m} {
				_ = os.Remove(f)
			}
		}
	}
}

// removeTemps removes the temporary files of this build.
func (b *builder) removeTemps() {
	for _, f := range b.temps {
		_ = os.Remove(f)
	}
}

// tempFile returns a new empty file in the cache, removed at the end.
func (b *builder) tempFile(what string) (string, error) {
	f, err := os.CreateTemp(b.cache, tempPrefix+what+"-")
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	b.temps = append(b.temps, f.Name())
	b.mu.Unlock()
	return f.Name(), f.Close()
}

func (b *builder) image(name ociimage.Reference, artifacts string) (ociimage.Image, error) {
	base, err := b.baseLayer()
	if err != nil {
		return ociimage.Image{}, err
	}
	created, revision, err := b.revision()
	if err != nil {
		return ociimage.Image{}, err
	}
	kao, err := b.kaoLayer(created)
	if err != nil {
		return ociimage.Image{}, err
	}
	bundle, err := b.bundleLayer(artifacts)
	if err != nil {
		return ociimage.Image{}, err
	}
	return ociimage.Image{
		Name:    name,
		Created: created,
		Layers:  []ociimage.Layer{base, kao, bundle},
		Config: ociimage.Config{
			User:       fmt.Sprintf("%d:%d", kaoUID, kaoUID),
			Entrypoint: []string{"/usr/bin/tini", "--", "/usr/local/bin/kao-manager"},
			WorkingDir: "/var/lib/kao",
			Env: []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"LANG=C.UTF-8",
				// The root file system is read-only: Python must not try
				// to write bytecode next to the roles' module_utils.
				"PYTHONDONTWRITEBYTECODE=1",
			},
			Labels: map[string]string{
				"org.opencontainers.image.title":       "kao",
				"org.opencontainers.image.description": "Karmada Ansible Operator: the manager, ansible-core, kao's playbooks and roles, and the offline artifacts bundle",
				"org.opencontainers.image.source":      "https://github.com/kao-io/kao",
				"org.opencontainers.image.revision":    revision,
				"org.opencontainers.image.version":     name.Tag,
			},
		},
	}, nil
}

// baseLayer returns the Debian layer, from the cache or built by mmdebstrap.
// Its cache key holds everything the layer is made from: the arguments, the
// state of the three suites (their InRelease files, which change with every
// point release and security update), mmdebstrap's version and the Go
// version that compresses it.
func (b *builder) baseLayer() (ociimage.Layer, error) {
	mirror, security, err := b.mirrors()
	if err != nil {
		return ociimage.Layer{}, err
	}
	suites := []string{
		"deb " + mirror + " bookworm main",
		"deb " + mirror + " bookworm-updates main",
		"deb " + security + " bookworm-security main",
	}
	args := []string{
		"--variant=essential",
		"--include=" + strings.Join(basePackages, ","),
		"--aptopt=APT::Install-Recommends \"false\"",
		// No device nodes: the container runtime provides /dev.
		"--skip=output/dev",
		// Documentation, manuals and translations are not needed to run.
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-include=/usr/share/doc/*/copyright",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
	}
	// Of Debian's ansible package only the collections the roles use: the
	// package's files are taken from its .deb (installing it would compile
	// and keep all 300 MB of them), then compiled to bytecode.
	dist := "/usr/lib/python3/dist-packages/ansible_collections"
	extract := []string{}
	for _, c := range collections {
		extract = append(extract, "."+dist+"/"+c)
	}
	args = append(args,
		`--customize-hook=cd "$1/tmp" && APT_CONFIG="$MMDEBSTRAP_APT_CONFIG" apt-get download -qq ansible >/dev/null && `+
			`dpkg-deb --fsys-tarfile ansible_*.deb | tar -x -C "$1" `+strings.Join(extract, " ")+` && rm ansible_*.deb && `+
			`chroot "$1" python3 -m compileall -q `+dist,
		fmt.Sprintf(`--customize-hook=echo "kao:x:%d:%d:kao operator:/var/lib/kao:/usr/sbin/nologin" >> "$1/etc/passwd"`, kaoUID, kaoUID),
		fmt.Sprintf(`--customize-hook=echo "kao:x:%d:" >> "$1/etc/group"`, kaoUID),
		// mmdebstrap copies the build machine's: not the image's business.
		`--customize-hook=rm -f "$1/etc/resolv.conf" "$1/etc/hostname"`,
		// The package list, for b.packages (KAO_PACKAGES_OUT is set below).
		`--customize-hook=chroot "$1" dpkg-query -W -f '${Package} ${Version}\n' > "$KAO_PACKAGES_OUT"`,
		"bookworm", "ROOTFS.tar",
	)
	args = append(args, suites...)
	state, err := suiteState(mirror, security)
	if err != nil {
		return ociimage.Layer{}, err
	}
	version, err := exec.Command("mmdebstrap", "--version").Output()
	if err != nil {
		return ociimage.Layer{}, fmt.Errorf("mmdebstrap (make deps installs it): %w", err)
	}
	key := digestOf(append([]string{"base-v2", strconv.Itoa(baseEpoch), runtime.Version(), ociimage.Compression, runtime.GOARCH, string(version), state}, args...)...)
	packagesFile := filepath.Join(b.cache, "base-"+key+".packages")
	layer, err := b.cached("base-"+key, func(dst string) (ociimage.Layer, error) {
		log.Printf("building the Debian layer with mmdebstrap from %s and %s (about a minute)", mirror, security)
		rootfs, err := b.tempFile("rootfs")
		if err != nil {
			return ociimage.Layer{}, err
		}
		packages, err := b.tempFile("packages")
		if err != nil {
			return ociimage.Layer{}, err
		}
		run := slices.Clone(args)
		run[slices.Index(run, "ROOTFS.tar")] = rootfs + ".tar"
		b.temps = append(b.temps, rootfs+".tar")
		cmd := exec.Command("mmdebstrap", append([]string{"--quiet"}, run...)...)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.Itoa(baseEpoch), "KAO_PACKAGES_OUT="+packages)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return ociimage.Layer{}, fmt.Errorf("building the Debian layer with mmdebstrap: %w", err)
		}
		if err := os.Rename(packages, packagesFile); err != nil {
			return ociimage.Layer{}, err
		}
		f, err := os.Open(rootfs + ".tar")
		if err != nil {
			return ociimage.Layer{}, err
		}
		defer func() { _ = f.Close() }()
		return ociimage.LayerFromTar(f, dst)
	})
	if err != nil {
		return ociimage.Layer{}, err
	}
	if b.packages, err = os.ReadFile(packagesFile); err != nil {
		return ociimage.Layer{}, fmt.Errorf("the Debian layer's package list: %w", err)
	}
	return layer, nil
}

// mirrors returns the Debian mirror and the security mirror.
func (b *builder) mirrors() (string, string, error) {
	mirror := strings.TrimSuffix(b.mirror, "/")
	if mirror == "" {
		var err error
		if mirror, err = aptMirror(); err != nil {
			return "", "", err
		}
	}
	security := strings.TrimSuffix(b.security, "/")
	if security == "" {
		security = strings.TrimSuffix(mirror, "/debian") + "/debian-security"
	}
	return mirror, security, nil
}

// suiteState returns the InRelease files of the three suites, which name
// the checksums of every package index: when a package the image holds is
// updated, they change.
func suiteState(mirror, security string) (string, error) {
	var state strings.Builder
	client := &http.Client{Timeout: time.Minute}
	for _, u := range []string{mirror + "/dists/bookworm/InRelease", mirror + "/dists/bookworm-updates/InRelease", security + "/dists/bookworm-security/InRelease"} {
		resp, err := client.Get(u)
		if err != nil {
			return "", fmt.Errorf("reading the state of the Debian mirror: %w", err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", u, err)
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("reading %s: %s", u, resp.Status)
		}
		state.Write(body)
	}
	return state.String(), nil
}

// kaoLayer builds the manager and kao-inventory and lays them out with the
// playbooks and roles.
func (b *builder) kaoLayer(mtime time.Time) (ociimage.Layer, error) {
	bin, err := os.MkdirTemp(b.cache, tempPrefix+"bin-")
	if err != nil {
		return ociimage.Layer{}, err
	}
	defer func() { _ = os.RemoveAll(bin) }()
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", bin+"/", "./cmd/manager", "./cmd/kao-inventory")
	build.Dir = b.root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return ociimage.Layer{}, fmt.Errorf("building the manager: %w", err)
	}
	entries := []ociimage.Entry{
		{Path: "/usr/local/bin/kao-manager", Mode: 0o755, Source: filepath.Join(bin, "manager")},
		{Path: "/usr/local/bin/kao-inventory", Mode: 0o755, Source: filepath.Join(bin, "kao-inventory")},
		{Path: "/var/lib/kao", Mode: fs.ModeDir | 0o750, UID: kaoUID, GID: kaoUID},
		// The mount point of the runtime's /dev (the Debian layer has no
		// device nodes).
		{Path: "/dev", Mode: fs.ModeDir | 0o755},
	}
	// Only what git tracks: no editor files or local run output.
	files, err := git(b.root, "ls-files", "-z", "--", "playbooks", "roles")
	if err != nil {
		return ociimage.Layer{}, err
	}
	for _, rel := range strings.Split(strings.TrimRight(files, "\x00"), "\x00") {
		src := filepath.Join(b.root, rel)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet committed
		}
		if err != nil {
			return ociimage.Layer{}, err
		}
		tree, err := ociimage.TreeEntries(src, "/opt/kao/"+filepath.ToSlash(rel))
		if err != nil {
			return ociimage.Layer{}, err
		}
		if info.IsDir() { // a submodule: not expected here
			return ociimage.Layer{}, fmt.Errorf("%s is a directory in git's index", rel)
		}
		entries = append(entries, tree...)
	}
	tmp, err := b.tempFile("kao-layer")
	if err != nil {
		return ociimage.Layer{}, err
	}
	return ociimage.LayerFromEntries(entries, mtime, tmp)
}

// bundleLayer returns the offline bundle's layer: the files SHA256SUMS
// lists (and it and manifest.json), cached by their names, checksums and
// modes.
func (b *builder) bundleLayer(artifacts string) (ociimage.Layer, error) {
	sums, err := os.ReadFile(filepath.Join(artifacts, "SHA256SUMS"))
	if err != nil {
		return ociimage.Layer{}, fmt.Errorf("reading the bundle (make artifacts builds it): %w", err)
	}
	files := []string{"SHA256SUMS", "manifest.json"}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			files = append(files, f[1])
		}
	}
	var entries []ociimage.Entry
	var key []string
	for _, rel := range files {
		src := filepath.Join(artifacts, filepath.FromSlash(rel))
		info, err := os.Stat(src)
		if err != nil {
			return ociimage.Layer{}, fmt.Errorf("the bundle names %s: %w", rel, err)
		}
		mode := fs.FileMode(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		entries = append(entries, ociimage.Entry{Path: "/opt/kao/artifacts/" + rel, Mode: mode, Source: src})
		key = append(key, rel, mode.String())
	}
	manifest, err := os.ReadFile(filepath.Join(artifacts, "manifest.json"))
	if err != nil {
		return ociimage.Layer{}, fmt.Errorf("reading the bundle (make artifacts builds it): %w", err)
	}
	k := digestOf(append([]string{"bundle-v2", strconv.Itoa(baseEpoch), runtime.Version(), ociimage.Compression, string(sums), string(manifest)}, key...)...)
	return b.cached("bundle-"+k, func(dst string) (ociimage.Layer, error) {
		log.Printf("compressing the offline bundle %s", artifacts)
		return ociimage.LayerFromEntries(entries, time.Unix(baseEpoch, 0), dst)
	})
}

// cached returns the layer stored under name in the cache, or makes it with
// make and stores it. A layer is stored as <name>.tar.gz and <name>.json.
func (b *builder) cached(name string, make func(dst string) (ociimage.Layer, error)) (ociimage.Layer, error) {
	file := filepath.Join(b.cache, name+".tar.gz")
	meta := filepath.Join(b.cache, name+".json")
	if data, err := os.ReadFile(meta); err == nil {
		var l ociimage.Layer
		if json.Unmarshal(data, &l) == nil {
			if info, err := os.Stat(file); err == nil && info.Size() == l.Size {
				l.File = file
				now := time.Now()
				_ = os.Chtimes(meta, now, now) // used: not pruned
				return l, nil
			}
		}
	}
	tmp, err := b.tempFile(name)
	if err != nil {
		return ociimage.Layer{}, err
	}
	l, err := make(tmp)
	if err != nil {
		return ociimage.Layer{}, err
	}
	if err := os.Rename(tmp, file); err != nil {
		return ociimage.Layer{}, err
	}
	l.File = file
	data, err := json.Marshal(l)
	if err != nil {
		return ociimage.Layer{}, err
	}
	return l, os.WriteFile(meta, data, 0o600)
}

// revision returns the commit time (the image's creation time, so that the
// same commit gives the same image) and the commit, "-dirty" when the work
// tree differs from it.
func (b *builder) revision() (time.Time, string, error) {
	out, err := git(b.root, "log", "-1", "--format=%ct %H")
	if err != nil {
		return time.Time{}, "", err
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		return time.Time{}, "", fmt.Errorf("git log: unexpected output %q", out)
	}
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return time.Time{}, "", err
	}
	rev := f[1]
	if status, err := git(b.root, "status", "--porcelain"); err != nil {
		return time.Time{}, "", err
	} else if status != "" {
		rev += "-dirty"
	}
	return time.Unix(sec, 0), rev, nil
}

// aptMirror returns the first Debian mirror of the machine's apt sources.
func aptMirror() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 2 && fields[0] == "deb":
				u := fields[1]
				if strings.HasPrefix(u, "[") { // deb [options] URL
					for _, x := range fields[1:] {
						if strings.HasPrefix(x, "http") {
							u = x
							break
						}
					}
				}
				if strings.HasSuffix(strings.TrimSuffix(u, "/"), "/debian") {
					return strings.TrimSuffix(u, "/"), nil
				}
			case len(fields) >= 2 && fields[0] == "URIs:":
				if u := strings.TrimSuffix(fields[1], "/"); strings.HasSuffix(u, "/debian") {
					return u, nil
				}
			}
		}
	}
	return "", errors.New("no Debian mirror in /etc/apt/sources.list*: pass -mirror")
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

func digestOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func repoRoot() (string, error) {
	out, err := git(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("run from kao's repository: %w", err)
	}
	return out, nil
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
