package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
)

// Compression names the compressor of every layer, module version and
// level: part of the key of each cached layer (hack/image), so that a layer
// compressed otherwise, with other bytes for the same tar, is never reused
// in a build that must give the same digest as one from an empty cache.
// TestCompressionNamesTheModule keeps it in step with go.mod.
const Compression = "github.com/klauspost/compress v1.18.0 gzip default level"

// MediaTypeLayer is a gzip-compressed tar layer.
const MediaTypeLayer = "application/vnd.oci.image.layer.v1.tar+gzip"

// Layer is one compressed layer written to a file.
type Layer struct {
	// File holds the compressed layer.
	File string
	// Digest is "sha256:<hex>" of the compressed bytes: the blob's name.
	Digest string
	// DiffID is "sha256:<hex>" of the uncompressed tar: the image config
	// names layers by it.
	DiffID string
	// Size is the compressed size in bytes.
	Size int64
}

// Entry is one path of a layer built from entries.
type Entry struct {
	// Path inside the image, absolute ("/opt/kao/roles").
	Path string
	// Mode holds the permission bits and, for a directory or symlink, the
	// type bit. The zero type is a regular file.
	Mode fs.FileMode
	// UID and GID own the entry; 0 is root.
	UID, GID int
	// Source is the file on this machine whose content a regular file
	// gets, when Data is nil.
	Source string
	// Data is the content of a regular file, when Source is empty.
	Data []byte
	// Link is a symlink's target.
	Link string
}

// LayerFromTar compresses an existing tar stream (for example a root file
// system from mmdebstrap, which is reproducible on its own) into dst.
func LayerFromTar(src io.Reader, dst string) (Layer, error) {
	return writeLayer(dst, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
}

// LayerFromEntries writes entries as a layer into dst. The tar is the same
// for the same entries and file contents: entries are sorted by path, every
// parent directory is written before its children (missing ones as root
// 0755), and every time stamp is mtime; user and group names are left out.
func LayerFromEntries(entries []Entry, mtime time.Time, dst string) (Layer, error) {
	sorted, err := withParents(entries)
	if err != nil {
		return Layer{}, err
	}
	return writeLayer(dst, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, e := range sorted {
			if err := writeEntry(tw, e, mtime); err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

// withParents validates entries, adds missing parent directories and sorts
// them so that a directory comes before what it holds.
func withParents(entries []Entry) ([]Entry, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p := path.Clean(e.Path)
		if !path.IsAbs(p) || p == "/" {
			return nil, fmt.Errorf("layer entry %q: want an absolute path below /", e.Path)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("layer entry %q given twice", p)
		}
		e.Path = p
		byPath[p] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if have, ok := byPath[dir]; ok {
				if !have.Mode.IsDir() {
					return nil, fmt.Errorf("layer entry %q is inside %q, which is not a directory", p, dir)
				}
				continue
			}
			byPath[dir] = Entry{Path: dir, Mode: fs.ModeDir | 0o755}
		}
	}
	out := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	// Sorting by path puts "/a" before "/a/b", but also "/a-b" before
	// "/a/b"; both orders are valid tars, and the order is fixed.
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// tarMode is a mode's permission bits with setuid, setgid and sticky as a
// tar header holds them.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

func writeEntry(tw *tar.Writer, e Entry, mtime time.Time) error {
	h := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Mode:    tarMode(e.Mode),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	switch {
	case e.Mode.IsDir():
		h.Typeflag = tar.TypeDir
		h.Name += "/"
		return tw.WriteHeader(h)
	case e.Mode&fs.ModeSymlink != 0:
		h.Typeflag = tar.TypeSymlink
		h.Linkname = e.Link
		return tw.WriteHeader(h)
	case e.Mode.IsRegular():
	default:
		return fmt.Errorf("layer entry %s: only files, directories and symlinks are supported", e.Path)
	}
	h.Typeflag = tar.TypeReg
	if e.Source == "" {
		h.Size = int64(len(e.Data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(e.Data)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("layer entry %s: source %s is not a regular file", e.Path, e.Source)
	}
	h.Size = info.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("layer entry %s: reading %s: %w", e.Path, e.Source, err)
	}
	return nil
}

// writeLayer runs fill with a writer whose bytes become the layer's
// uncompressed tar, and writes the gzip of it to dst. The gzip header has no
// name and no time, so the compressed bytes depend only on the tar (and on
// the compressor, fixed by go.mod). The compressor is klauspost/compress's
// gzip: the same format as Go's compress/gzip, about four times faster at
// the default level for 3% more bytes (on karmada-controller-manager). The
// operator image carries the 1.2 GB offline bundle, so compression was
// most of a build's CPU.
func writeLayer(dst string, fill func(io.Writer) error) (Layer, error) {
	f, err := os.Create(dst)
	if err != nil {
		return Layer{}, err
	}
	compressed := sha256.New()
	counter := &countWriter{w: io.MultiWriter(f, compressed)}
	zw, err := gzip.NewWriterLevel(counter, gzip.DefaultCompression)
	if err != nil {
		_ = f.Close()
		return Layer{}, err
	}
	uncompressed := sha256.New()
	fillErr := fill(io.MultiWriter(zw, uncompressed))
	zErr := zw.Close()
	cErr := f.Close()
	if err := firstErr(fillErr, zErr, cErr); err != nil {
		_ = os.Remove(dst)
		return Layer{}, fmt.Errorf("writing layer %s: %w", dst, err)
	}
	return Layer{
		File:   dst,
		Digest: "sha256:" + hex.EncodeToString(compressed.Sum(nil)),
		DiffID: "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)),
		Size:   counter.n,
	}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// TreeEntries lists the files, directories and symlinks under src as entries
// under dst, owned by root. Modes are normalized so that the layer does not
// depend on the umask of a checkout: directories and executables 0755,
// other files 0644.
func TreeEntries(src, dst string) ([]Entry, error) {
	var out []Entry
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		e := Entry{Path: path.Join(dst, filepath.ToSlash(rel))}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			e.Mode = fs.ModeDir | 0o755
		case info.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
			e.Mode = fs.ModeSymlink | 0o777
		case info.Mode().IsRegular():
			e.Source, e.Mode = p, 0o644
			if info.Mode()&0o111 != 0 {
				e.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: only files, directories and symlinks can go into an image", p)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}
