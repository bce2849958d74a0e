package artifacts

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The two index files at the root of every bundle.
const (
	// ManifestFile names the bundle's default versions.
	ManifestFile = "manifest.json"
	// SumsFile lists every file of the bundle with its sha256, in sha256sum's format.
	SumsFile = "SHA256SUMS"
)

// Bounds on what a server may send for the index files: a real manifest is
// under 100 bytes and a real SHA256SUMS a few KiB.
const (
	maxManifestSize = 64 << 10
	maxSumsSize     = 4 << 20
	maxPathLen      = 512
)

// Manifest is manifest.json of a bundle: the versions it holds by default.
type Manifest struct {
	// Karmada is the default Karmada version, vX.Y.Z.
	Karmada string `json:"karmada"`
	// Kubernetes is the default Kubernetes version (kube-apiserver, kube-controller-manager).
	Kubernetes string `json:"kubernetes"`
	// Etcd is the default etcd version.
	Etcd string `json:"etcd"`
}

// Component is one <name>/<version>/ directory of a bundle, for example
// karmada/v1.18.1/ with bin/ and crds.tar.gz.
type Component struct {
	// Name is kubernetes, etcd or karmada.
	Name string
	// Version is the directory under Name, vX.Y.Z.
	Version string
}

func (c Component) String() string { return c.Name + "/" + c.Version + "/" }

// segmentPattern is what one path segment of a bundle file may be: plain
// file names, no hidden files (the mirror's temporary files are hidden).
var segmentPattern = regexp.MustCompile(`^[A-Za-z0-9][-_.+A-Za-z0-9]*$`)

// sumsLine is one line of sha256sum's output: the hash, a space, then a
// space (text mode) or an asterisk (binary mode), then the path.
var sumsLine = regexp.MustCompile(`^([0-9a-f]{64}) [ *](.+)$`)

// Index is what a bundle says about itself: its manifest and its checksums.
type Index struct {
	// Manifest is the bundle's manifest.json.
	Manifest Manifest
	// sums maps a bundle path to its hex sha256.
	sums map[string]string
	// manifestRaw and sumsRaw are the index files as served, written to the
	// mirror unchanged so that roles read the same SHA256SUMS.
	manifestRaw, sumsRaw []byte
}

// Has reports whether SHA256SUMS lists at least one file under the
// component's bin/ directory.
func (ix *Index) Has(c Component) bool {
	prefix := c.String() + "bin/"
	for p := range ix.sums {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// files lists the paths under a component's directory, sorted.
func (ix *Index) files(c Component) []string {
	out := []string{}
	for p := range ix.sums {
		if strings.HasPrefix(p, c.String()) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// parseIndex checks and parses the two index files.
func parseIndex(manifest, sums []byte) (*Index, error) {
	ix := &Index{sums: map[string]string{}, manifestRaw: manifest, sumsRaw: sums}
	dec := json.NewDecoder(bytes.NewReader(manifest))
	if err := dec.Decode(&ix.Manifest); err != nil {
		return nil, fmt.Errorf("%s is malformed: %w", ManifestFile, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(sums))
	sc.Buffer(make([]byte, 0, 4096), maxPathLen+80)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := sumsLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s line %d is not `<sha256>  <path>`", SumsFile, n)
		}
		sum, p := m[1], m[2]
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", SumsFile, n, err)
		}
		if old, dup := ix.sums[p]; dup && old != sum {
			return nil, fmt.Errorf("%s line %d lists %s a second time with another sha256", SumsFile, n, p)
		}
		ix.sums[p] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", SumsFile, err)
	}
	return ix, nil
}

// checkPath accepts only plain relative paths that stay inside the bundle:
// no absolute paths, no "..", no "." or empty segments, no hidden files, no
// backslashes and not the index files themselves.
func checkPath(p string) error {
	if len(p) > maxPathLen {
		return fmt.Errorf("path of %d bytes is longer than %d", len(p), maxPathLen)
	}
	if strings.HasPrefix(p, "/") || !filepath.IsLocal(p) || path.Clean(p) != p {
		return fmt.Errorf("path %q leaves the bundle directory or is not clean", p)
	}
	for _, s := range strings.Split(p, "/") {
		if !segmentPattern.MatchString(s) {
			return fmt.Errorf("path %q has a segment that is not a plain file name", p)
		}
	}
	if p == ManifestFile || p == SumsFile {
		return fmt.Errorf("path %q is an index file", p)
	}
	return nil
}

// checkComponent accepts component names and versions that are single path segments.
func checkComponent(c Component) error {
	if !segmentPattern.MatchString(c.Name) || !segmentPattern.MatchString(c.Version) {
		return fmt.Errorf("component %q version %q is not a plain directory name", c.Name, c.Version)
	}
	return nil
}
