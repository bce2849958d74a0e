package main

import (
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kao-io/kao/internal/ociimage"
)

// componentImage is one image of the Karmada control plane that
// Containerized mode (and a Pull member's karmada-agent) runs: the programs
// of one bundle directory, named the way upstream names the image and
// placed where upstream's image has them, so that kao's commands (and a
// user's own manifests written for upstream's images) run unchanged.
type componentImage struct {
	// repository under the registry, e.g. "karmada/karmada-scheduler".
	repository string
	// tag, e.g. "v1.18.1", or "3.6.6-0" for etcd.
	tag string
	// dir holds the programs in the image, e.g. "/bin".
	dir string
	// programs are the bundle's files (relative to it) copied into dir.
	programs []string
	// user the container runs as ("uid:gid"), the same as upstream's.
	user string
	// zoneinfo: the image carries Go's time zone database (upstream's
	// Karmada images install Alpine's tzdata for CronFederatedHPA's time
	// zones).
	zoneinfo bool
}

// zoneinfoPath is where an image with zoneinfo has Go's time zone database;
// its ZONEINFO variable names it, which Go's time package reads.
const zoneinfoPath = "/usr/share/zoneinfo.zip"

// ref is the image's name under a registry: what images.txt lists and what
// `skopeo copy oci-archive:FILE:REF` picks.
func (c componentImage) ref() string { return c.repository + ":" + c.tag }

// etcdTagSuffix follows registry.k8s.io's etcd tags (3.6.6-0), the suffix
// kao's role karmada_workloads appends.
const etcdTagSuffix = "-0"

// componentImages lists the images the bundle in artifacts can make: for
// every version it holds, Kubernetes' kube-apiserver and
// kube-controller-manager, etcd (with etcdctl and etcdutl, as upstream's),
// and every Karmada program but karmadactl. A version whose bundle directory
// lacks a program (the previous Karmada version holds only the four
// components kao upgrades from) has no image of it.
func componentImages(artifacts string) ([]componentImage, error) {
	var out []componentImage
	versions := func(project string) ([]string, error) {
		entries, err := os.ReadDir(filepath.Join(artifacts, project))
		if err != nil {
			return nil, fmt.Errorf("reading the bundle (make artifacts builds it): %w", err)
		}
		var vs []string
		for _, e := range entries {
			if e.IsDir() {
				vs = append(vs, e.Name())
			}
		}
		sort.Strings(vs)
		return vs, nil
	}
	programs := func(project, version string) ([]string, error) {
		entries, err := os.ReadDir(filepath.Join(artifacts, project, version, "bin"))
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names, nil
	}
	kube, err := versions("kubernetes")
	if err != nil {
		return nil, err
	}
	for _, v := range kube {
		for _, p := range []string{"kube-apiserver", "kube-controller-manager"} {
			out = append(out, componentImage{repository: p, tag: v, dir: "/usr/local/bin",
				programs: []string{path.Join("kubernetes", v, "bin", p)}, user: "0:0"})
		}
	}
	etcd, err := versions("etcd")
	if err != nil {
		return nil, err
	}
	for _, v := range etcd {
		img := componentImage{repository: "etcd", tag: strings.TrimPrefix(v, "v") + etcdTagSuffix, dir: "/usr/local/bin", user: "0:0"}
		for _, p := range []string{"etcd", "etcdctl", "etcdutl"} {
			img.programs = append(img.programs, path.Join("etcd", v, "bin", p))
		}
		out = append(out, img)
	}
	karmada, err := versions("karmada")
	if err != nil {
		return nil, err
	}
	for _, v := range karmada {
		names, err := programs("karmada", v)
		if err != nil {
			return nil, err
		}
		for _, p := range names {
			if p == "karmadactl" {
				continue
			}
			out = append(out, componentImage{repository: "karmada/" + p, tag: v, dir: "/bin",
				programs: []string{path.Join("karmada", v, "bin", p)}, user: "0:0", zoneinfo: true})
		}
	}
	return out, nil
}

// componentsArchive names the archive of every component image in -out.
const componentsArchive = "karmada-images.oci.tar"

// buildComponents writes every component image the bundle in artifacts
// makes into one OCI archive in out, each named <registry>/<ref> for
// containerd and <ref> in the index (images.txt lists the refs, digests.txt
// the manifests' digests). Layers are cached by the programs' checksums, so
// a second build only writes the archive.
func (b *builder) buildComponents(registry, artifacts, out string) error {
	start := time.Now()
	sums, err := bundleSums(artifacts)
	if err != nil {
		return err
	}
	comps, err := componentImages(artifacts)
	if err != nil {
		return err
	}
	layers := make([]ociimage.Layer, len(comps))
	errs := make([]error, len(comps))
	// Two layers compress at once: gzip is the cost, one core each.
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.NumCPU(), 2) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				layers[i], errs[i] = b.componentLayer(comps[i], artifacts, sums)
			}
		}()
	}
	for i := range comps {
		work <- i
	}
	close(work)
	wg.Wait()
	imgs := make([]ociimage.Image, len(comps))
	for i, c := range comps {
		if errs[i] != nil {
			return errs[i]
		}
		name, err := ociimage.ParseReference(registry + "/" + c.ref())
		if err != nil {
			return fmt.Errorf("image name: %w", err)
		}
		entry := path.Join(c.dir, path.Base(c.programs[0]))
		env := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
		if c.zoneinfo {
			env = append(env, "ZONEINFO="+zoneinfoPath)
		}
		imgs[i] = ociimage.Image{
			Name:    name,
			RefName: c.ref(),
			Created: time.Unix(baseEpoch, 0),
			Layers:  []ociimage.Layer{layers[i]},
			Config: ociimage.Config{
				User:       c.user,
				Entrypoint: []string{entry},
				Env:        env,
				WorkingDir: "/",
				Labels: map[string]string{
					"org.opencontainers.image.title":   path.Base(c.repository),
					"org.opencontainers.image.version": c.tag,
					"org.opencontainers.image.source":  "https://github.com/kao-io/kao",
					"org.opencontainers.image.description": "kao's offline build of " + path.Base(c.repository) +
						" from the pinned binaries of its offline bundle",
				},
			},
		}
	}
	archive := filepath.Join(out, componentsArchive)
	digests, err := ociimage.WriteArchiveOf(archive, imgs)
	if err != nil {
		return err
	}
	var refs, lines strings.Builder
	for i, c := range comps {
		fmt.Fprintln(&refs, c.ref())
		fmt.Fprintf(&lines, "%s %s\n", c.ref(), digests[i])
	}
	if err := os.WriteFile(filepath.Join(out, "images.txt"), []byte(refs.String()), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "digests.txt"), []byte(lines.String()), 0o600); err != nil {
		return err
	}
	log.Printf("wrote %s: %d images named under %s in %s", archive, len(imgs), registry, time.Since(start).Round(time.Second))
	return nil
}

// componentLayer is c's one layer: /tmp and its programs, owned by root,
// cached under the programs' checksums.
func (b *builder) componentLayer(c componentImage, artifacts string, sums map[string]string) (ociimage.Layer, error) {
	entries := []ociimage.Entry{{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777}}
	key := []string{"component-v1", strconv.Itoa(baseEpoch), runtime.Version(), ociimage.Compression, c.dir}
	if c.zoneinfo {
		goroot, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return ociimage.Layer{}, fmt.Errorf("go env GOROOT: %w", err)
		}
		entries = append(entries, ociimage.Entry{Path: zoneinfoPath, Mode: 0o644,
			Source: filepath.Join(strings.TrimSpace(string(goroot)), "lib", "time", "zoneinfo.zip")})
		key = append(key, zoneinfoPath)
	}
	for _, p := range c.programs {
		sum, ok := sums[p]
		if !ok {
			return ociimage.Layer{}, fmt.Errorf("the bundle's SHA256SUMS does not list %s", p)
		}
		entries = append(entries, ociimage.Entry{Path: path.Join(c.dir, path.Base(p)), Mode: 0o755, Source: filepath.Join(artifacts, filepath.FromSlash(p))})
		key = append(key, p, sum)
	}
	return b.cached("component-"+digestOf(key...), func(dst string) (ociimage.Layer, error) {
		log.Printf("compressing %s", c.ref())
		return ociimage.LayerFromEntries(entries, time.Unix(baseEpoch, 0), dst)
	})
}

// bundleSums reads the bundle's SHA256SUMS: checksum by file.
func bundleSums(artifacts string) (map[string]string, error) {
	data, err := os.ReadFile(filepath.Join(artifacts, "SHA256SUMS"))
	if err != nil {
		return nil, fmt.Errorf("reading the bundle (make artifacts builds it): %w", err)
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			sums[f[1]] = f[0]
		}
	}
	return sums, nil
}
