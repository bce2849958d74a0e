package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tree writes a small directory with a script, a file and a symlink.
func tree(t *testing.T, mode fs.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "roles", "etcd", "tasks"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "roles", "etcd", "tasks", "main.yml"), []byte("- name: x\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\n"), 0o700|mode&0o077); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("run.sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func layerOf(t *testing.T, src string) Layer {
	t.Helper()
	entries, err := TreeEntries(src, "/opt/kao")
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, Entry{Path: "/var/lib/kao", Mode: fs.ModeDir | 0o750, UID: 65532, GID: 65532},
		Entry{Path: "/etc/kao/version", Mode: 0o644, Data: []byte("dev\n")})
	l, err := LayerFromEntries(entries, time.Unix(1764115200, 0), filepath.Join(t.TempDir(), "layer.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLayerIsTheSameForTheSameContent(t *testing.T) {
	// Two checkouts with different umasks and different file times.
	a, b := tree(t, 0o600), tree(t, 0o644)
	old := time.Unix(1, 0)
	if err := os.Chtimes(filepath.Join(b, "run.sh"), old, old); err != nil {
		t.Fatal(err)
	}
	la, lb := layerOf(t, a), layerOf(t, b)
	if la.Digest != lb.Digest || la.DiffID != lb.DiffID || la.Size != lb.Size {
		t.Fatalf("same content, different layers: %+v and %+v", la, lb)
	}
	if err := os.WriteFile(filepath.Join(b, "run.sh"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if lc := layerOf(t, b); lc.DiffID == la.DiffID {
		t.Fatal("a changed file gave the same layer")
	}
}

func TestLayerEntries(t *testing.T) {
	l := layerOf(t, tree(t, 0o600))
	f, err := os.Open(l.File)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range readTar(t, zr) {
		h := e.hdr
		got = append(got, strings.Join([]string{h.Name, fs.FileMode(h.Mode).String(), strconv.Itoa(h.Uid), h.Linkname}, " "))
		if !h.ModTime.Equal(time.Unix(1764115200, 0)) {
			t.Errorf("%s: time %s", h.Name, h.ModTime)
		}
	}
	want := []string{
		"etc/ -rwxr-xr-x 0 ", "etc/kao/ -rwxr-xr-x 0 ", "etc/kao/version -rw-r--r-- 0 ",
		"opt/ -rwxr-xr-x 0 ", "opt/kao/ -rwxr-xr-x 0 ", "opt/kao/link -rwxrwxrwx 0 run.sh",
		"opt/kao/roles/ -rwxr-xr-x 0 ", "opt/kao/roles/etcd/ -rwxr-xr-x 0 ", "opt/kao/roles/etcd/tasks/ -rwxr-xr-x 0 ",
		"opt/kao/roles/etcd/tasks/main.yml -rw-r--r-- 0 ", "opt/kao/run.sh -rwxr-xr-x 0 ",
		"var/ -rwxr-xr-x 0 ", "var/lib/ -rwxr-xr-x 0 ", "var/lib/kao/ -rwxr-x--- 65532 ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLayerRefusesBadEntries(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "l")
	for name, entries := range map[string][]Entry{
		"relative":     {{Path: "opt/x", Mode: 0o644}},
		"twice":        {{Path: "/x", Mode: 0o644}, {Path: "/x/", Mode: 0o644}},
		"inside file":  {{Path: "/x", Mode: 0o644}, {Path: "/x/y", Mode: 0o644}},
		"root":         {{Path: "/", Mode: fs.ModeDir | 0o755}},
		"device":       {{Path: "/dev/null", Mode: fs.ModeDevice | 0o666}},
		"missing file": {{Path: "/x", Mode: 0o644, Source: filepath.Join(t.TempDir(), "none")}},
	} {
		if _, err := LayerFromEntries(entries, time.Unix(0, 0), dst); err == nil {
			t.Errorf("%s: no error", name)
		}
		if _, err := os.Stat(dst); !os.IsNotExist(err) {
			t.Errorf("%s: a failed layer left its file", name)
		}
	}
}

func TestArchive(t *testing.T) {
	l := layerOf(t, tree(t, 0o644))
	name, err := ParseReference("registry.test/kao/kao-manager:v1")
	if err != nil {
		t.Fatal(err)
	}
	img := Image{Name: name, Created: time.Unix(1764115200, 0), Layers: []Layer{l, l},
		Config: Config{User: "65532:65532", Entrypoint: []string{"/usr/local/bin/kao-manager"}}}
	dir := t.TempDir()
	d1, err := WriteArchive(filepath.Join(dir, "a.tar"), img)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := WriteArchive(filepath.Join(dir, "b.tar"), img)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.tar"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.tar"))
	if d1 != d2 || string(a) != string(b) {
		t.Fatal("the same image gave two archives")
	}
	files := map[string][]byte{}
	for _, e := range readTar(t, strings.NewReader(string(a))) {
		files[e.hdr.Name] = e.data
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	m := idx.Manifests[0]
	if m.Digest != d1 || m.Annotations[AnnotationRefName] != "v1" || m.Annotations[AnnotationContainerdName] != "registry.test/kao/kao-manager:v1" {
		t.Fatalf("index: %s", files["index.json"])
	}
	var man manifest
	if err := json.Unmarshal(files[blobPath(d1)], &man); err != nil {
		t.Fatal(err)
	}
	if len(man.Layers) != 2 {
		t.Fatalf("manifest %s", files[blobPath(d1)])
	}
	// Every blob the index reaches is in the archive under its digest.
	for _, d := range append([]descriptor{m, man.Config}, man.Layers...) {
		blob, ok := files[blobPath(d.Digest)]
		sum := sha256.Sum256(blob)
		if !ok || "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(blob)) != d.Size {
			t.Errorf("blob %s: present %v, size %d want %d", d.Digest, ok, len(blob), d.Size)
		}
	}
	if m.Platform == nil || m.Platform.OS != "linux" {
		t.Errorf("the index's manifest names no platform: %s", files["index.json"])
	}
	if _, err := WriteArchive(filepath.Join(dir, "c.tar"), Image{}); err == nil {
		t.Error("an image without a name was accepted")
	}
}

type tarEntry struct {
	hdr  *tar.Header
	data []byte
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{h, data})
	}
}

func TestParseReference(t *testing.T) {
	for in, want := range map[string][2]string{
		"kao-manager:dev":                         {"kao-manager:dev", "docker.io/library/kao-manager:dev"},
		"kao/kao-manager:v0.1.0":                  {"kao/kao-manager:v0.1.0", "docker.io/kao/kao-manager:v0.1.0"},
		"registry.dc1.example/kao/kao-manager:v1": {"registry.dc1.example/kao/kao-manager:v1", "registry.dc1.example/kao/kao-manager:v1"},
		"registry:5000/kao-manager:rc.1":          {"registry:5000/kao-manager:rc.1", "registry:5000/kao-manager:rc.1"},
		"localhost/kao-manager:e2e":               {"localhost/kao-manager:e2e", "localhost/kao-manager:e2e"},
	} {
		r, err := ParseReference(in)
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if r.String() != want[0] || r.Normalized() != want[1] || r.Repository() != "kao-manager" {
			t.Errorf("%s: %s, %s, %s; want %s, %s, kao-manager", in, r, r.Normalized(), r.Repository(), want[0], want[1])
		}
	}
	for _, bad := range []string{"kao-manager", "registry:5000/kao/kao-manager", "Kao:dev", "kao-manager:", "kao//x:1", "kao-manager:-x", ""} {
		if r, err := ParseReference(bad); err == nil {
			t.Errorf("%q accepted as %+v", bad, r)
		}
	}
}

func TestArchiveOfSeveralImages(t *testing.T) {
	shared := layerOf(t, tree(t, 0o644))
	own := layerOf(t, tree(t, 0o600))
	var imgs []Image
	for _, n := range []string{"registry.test/etcd:3.6.6-0", "registry.test/karmada/karmada-agent:v1.18.1"} {
		name, err := ParseReference(n)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, Image{Name: name, RefName: strings.TrimPrefix(n, "registry.test/"), Layers: []Layer{shared}})
	}
	imgs[1].Layers = append(imgs[1].Layers, own)
	dst := filepath.Join(t.TempDir(), "images.tar")
	digests, err := WriteArchiveOf(dst, imgs)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	count := map[string]int{}
	for _, e := range readTar(t, strings.NewReader(string(data))) {
		files[e.hdr.Name] = e.data
		count[e.hdr.Name]++
	}
	if count[blobPath(shared.Digest)] != 1 || count[blobPath(own.Digest)] != 1 {
		t.Errorf("layers stored %d and %d times, want once each", count[blobPath(shared.Digest)], count[blobPath(own.Digest)])
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 2 || len(digests) != 2 {
		t.Fatalf("index: %s", files["index.json"])
	}
	for i, want := range []string{"etcd:3.6.6-0", "karmada/karmada-agent:v1.18.1"} {
		m := idx.Manifests[i]
		if m.Digest != digests[i] || m.Annotations[AnnotationRefName] != want ||
			m.Annotations[AnnotationContainerdName] != "registry.test/"+want {
			t.Errorf("manifest %d: %+v", i, m)
		}
		var man manifest
		if err := json.Unmarshal(files[blobPath(m.Digest)], &man); err != nil {
			t.Fatal(err)
		}
		if len(man.Layers) != i+1 || files[blobPath(man.Config.Digest)] == nil {
			t.Errorf("manifest %d has %d layers, config present %v", i, len(man.Layers), files[blobPath(man.Config.Digest)] != nil)
		}
	}
	imgs[1].RefName = imgs[0].RefName
	if _, err := WriteArchiveOf(dst, imgs); err == nil || !strings.Contains(err.Error(), "two images are named") {
		t.Errorf("two images of one name: %v", err)
	}
}
