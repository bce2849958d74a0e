package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// The media types this package writes (OCI image spec v1.1).
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
)

// The annotations naming an image in an OCI layout: the spec's own, which
// skopeo reads (oci-archive:FILE:NAME), and containerd's, which
// `ctr images import` names the image by.
const (
	AnnotationRefName        = "org.opencontainers.image.ref.name"
	AnnotationContainerdName = "io.containerd.image.name"
)

// Config is what a container of the image runs with.
type Config struct {
	// User is "uid:gid"; numeric, so that runAsNonRoot can check it.
	User       string            `json:"User,omitempty"`
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Cmd        []string          `json:"Cmd,omitempty"`
	WorkingDir string            `json:"WorkingDir,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

// Image is an image to write: its layers, bottom first, and its config.
type Image struct {
	Name Reference
	// RefName names the image in an archive's index
	// (org.opencontainers.image.ref.name, what skopeo's
	// oci-archive:FILE:REF picks); default the tag. An archive of several
	// images needs a distinct one per image, e.g. "karmada/karmada-agent:v1.18.1".
	RefName string
	Created time.Time
	Config  Config
	Layers  []Layer
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Platform tells a runtime importing the index which manifest is its own.
	Platform *platform `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       Config `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifest struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Config        descriptor        `json:"config"`
	Layers        []descriptor      `json:"layers"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// WriteArchive writes img as an OCI archive: a tar of an OCI image layout
// (oci-layout, index.json, blobs/sha256/...), which `skopeo copy
// oci-archive:FILE docker://...` pushes and `ctr images import FILE` loads.
// It returns the manifest's digest, the image's identity in a registry. The
// same image gives the same bytes: the archive's entries are in a fixed order
// with fixed times.
func WriteArchive(dst string, img Image) (string, error) {
	digests, err := WriteArchiveOf(dst, []Image{img})
	if err != nil {
		return "", err
	}
	return digests[0], nil
}

// WriteArchiveOf writes several images into one OCI archive, in the given
// order, each blob stored once however many images share it. Each image is
// named in the index by its RefName (skopeo's oci-archive:FILE:REF), default
// its tag, and by its full name for containerd; two images may not share a
// RefName. It returns the manifests' digests, in the order of imgs.
func WriteArchiveOf(dst string, imgs []Image) ([]string, error) {
	if len(imgs) == 0 {
		return nil, fmt.Errorf("%s: no image to write", dst)
	}
	type blob struct {
		path string
		data []byte
	}
	var (
		manifests []descriptor
		blobs     []blob // configs and manifests, after the layers
		layers    []Layer
		refs      = map[string]bool{}
		stored    = map[string]bool{} // an identical blob twice is stored once
	)
	for _, img := range imgs {
		if img.Name.Path == "" || img.Name.Tag == "" {
			return nil, fmt.Errorf("image name %q: want [registry/]repository:tag", img.Name)
		}
		ref := img.RefName
		if ref == "" {
			ref = img.Name.Tag
		}
		if refs[ref] {
			return nil, fmt.Errorf("two images are named %q in %s", ref, dst)
		}
		refs[ref] = true
		cfgJSON, manJSON, err := imageBlobs(img)
		if err != nil {
			return nil, err
		}
		manDesc := blobDescriptor(MediaTypeManifest, manJSON)
		manDesc.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
		manDesc.Annotations = map[string]string{
			AnnotationRefName:        ref,
			AnnotationContainerdName: img.Name.Normalized(),
		}
		manifests = append(manifests, manDesc)
		for _, l := range img.Layers {
			if !stored[l.Digest] {
				stored[l.Digest] = true
				layers = append(layers, l)
			}
		}
		for _, b := range [][]byte{cfgJSON, manJSON} {
			d := blobDescriptor("", b).Digest
			if !stored[d] {
				stored[d] = true
				blobs = append(blobs, blob{blobPath(d), b})
			}
		}
	}
	idxJSON, err := json.Marshal(index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: manifests})
	if err != nil {
		return nil, err
	}

	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	a := &archive{tw: tar.NewWriter(f), mtime: imgs[0].Created}
	a.dir("blobs/")
	a.dir("blobs/sha256/")
	for _, l := range layers {
		a.layer(l)
	}
	for _, b := range blobs {
		a.file(b.path, b.data)
	}
	a.file("index.json", idxJSON)
	a.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	if err := firstErr(a.err, a.tw.Close(), f.Close()); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return nil, err
	}
	digests := make([]string, len(manifests))
	for i, m := range manifests {
		digests[i] = m.Digest
	}
	return digests, nil
}

// imageBlobs returns img's config and manifest as they are stored.
func imageBlobs(img Image) (cfgJSON, manJSON []byte, err error) {
	cfg := imageConfig{
		Created:      img.Created.UTC().Format(time.RFC3339),
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config:       img.Config,
	}
	cfg.RootFS.Type = "layers"
	layers := make([]descriptor, 0, len(img.Layers))
	for _, l := range img.Layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.DiffID)
		layers = append(layers, descriptor{MediaType: MediaTypeLayer, Digest: l.Digest, Size: l.Size})
	}
	if cfgJSON, err = json.Marshal(cfg); err != nil {
		return nil, nil, err
	}
	manJSON, err = json.Marshal(manifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeManifest,
		Config:        blobDescriptor(MediaTypeConfig, cfgJSON),
		Layers:        layers,
	})
	return cfgJSON, manJSON, err
}

// archive writes the entries of an OCI archive, keeping the first error.
type archive struct {
	tw    *tar.Writer
	mtime time.Time
	err   error
}

func (a *archive) header(name string, typ byte, mode, size int64) bool {
	if a.err == nil {
		a.err = a.tw.WriteHeader(&tar.Header{
			Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: a.mtime, Format: tar.FormatPAX,
		})
	}
	return a.err == nil
}

func (a *archive) dir(name string) { a.header(name, tar.TypeDir, 0o755, 0) }

func (a *archive) file(name string, data []byte) {
	if a.header(name, tar.TypeReg, 0o644, int64(len(data))) {
		_, a.err = a.tw.Write(data)
	}
}

// layer copies exactly the layer's size from its file: a layer file that
// changed since it was written fails the archive instead of corrupting it.
func (a *archive) layer(l Layer) {
	if !a.header(blobPath(l.Digest), tar.TypeReg, 0o644, l.Size) {
		return
	}
	f, err := os.Open(l.File)
	if err != nil {
		a.err = err
		return
	}
	defer func() { _ = f.Close() }()
	if info, err := f.Stat(); err != nil || info.Size() != l.Size {
		a.err = fmt.Errorf("layer file %s changed since it was written", l.File)
		return
	}
	_, a.err = io.CopyN(a.tw, f, l.Size)
}

func blobDescriptor(mediaType string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
}

func blobPath(digest string) string {
	return filepath.ToSlash(filepath.Join("blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
}
