package node

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kao-io/kao/internal/testenv"
)

// Media types of the OCI image format (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// Image describes a one-layer image around one static program.
type Image struct {
	// Name is the image reference, e.g. "kao.test/echo:1". Pods name it with
	// imagePullPolicy: Never; nothing is ever pulled.
	Name string
	// Binary is the static program, copied to /<base name of Binary>.
	Binary string
	// Args are the program's default arguments (the image's Cmd).
	Args []string
	// Env are KEY=VALUE pairs of the image's environment.
	Env []string
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// WriteImage writes img as an OCI image layout in a tar archive at path, as
// `ctr images import` and `skopeo copy oci-archive:` read it. The archive is
// deterministic: the same program and settings give the same bytes (fixed
// timestamps, owners and order), so the same image digest.
func WriteImage(img Image, path string) error {
	if img.Name == "" || img.Binary == "" {
		return fmt.Errorf("image needs a name and a binary (got %q, %q)", img.Name, img.Binary)
	}
	bin, err := os.ReadFile(img.Binary)
	if err != nil {
		return fmt.Errorf("reading the image's program: %w", err)
	}
	entry := "/" + filepath.Base(img.Binary)

	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	files := []struct {
		hdr  tar.Header
		data []byte
	}{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}},
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: entry[1:], Mode: 0o755, Size: int64(len(bin))}, data: bin},
	}
	for _, f := range files {
		f.hdr.ModTime = time.Unix(0, 0)
		f.hdr.Format = tar.FormatPAX
		if err := lw.WriteHeader(&f.hdr); err != nil {
			return fmt.Errorf("writing the image layer: %w", err)
		}
		if _, err := lw.Write(f.data); err != nil {
			return fmt.Errorf("writing the image layer: %w", err)
		}
	}
	if err := lw.Close(); err != nil {
		return fmt.Errorf("writing the image layer: %w", err)
	}
	layerDigest := digestOf(layer.Bytes())

	env := append([]string{"PATH=/"}, img.Env...)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": []string{entry},
			"Cmd":        img.Args,
			"Env":        env,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return fmt.Errorf("encoding the image config: %w", err)
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        descriptor{MediaType: mediaTypeConfig, Digest: digestOf(config), Size: len(config)},
		"layers":        []descriptor{{MediaType: mediaTypeLayer, Digest: layerDigest, Size: layer.Len()}},
	})
	if err != nil {
		return fmt.Errorf("encoding the image manifest: %w", err)
	}
	tag := img.Name[strings.LastIndex(img.Name, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests": []descriptor{{
			MediaType: mediaTypeManifest,
			Digest:    digestOf(manifest),
			Size:      len(manifest),
			Platform:  &platform{Architecture: runtime.GOARCH, OS: "linux"},
			Annotations: map[string]string{
				// containerd names the imported image after this one ...
				"io.containerd.image.name": img.Name,
				// ... skopeo and the OCI layout after this one.
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return fmt.Errorf("encoding the image index: %w", err)
	}

	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(digestOf(config)), config},
		{blobPath(digestOf(manifest)), manifest},
		{blobPath(layerDigest), layer.Bytes()},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return fmt.Errorf("writing the image archive: %w", err)
		}
	}
	for _, e := range entries {
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("writing the image archive: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("writing the image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing the image archive: %w", err)
	}
	return os.WriteFile(path, out.Bytes(), 0o644)
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// BuildProgram builds a Go main package of this module (e.g.
// "./test/node/cmd/echo") as a static binary into dir and returns its path.
// Go's build cache makes a second build of the same sources immediate.
func BuildProgram(ctx context.Context, pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w: %s", pkg, err, msg)
	}
	return out, nil
}

// BuildImage builds the Go main package pkg of this module statically and
// writes an OCI archive of img around it into dir; it returns the archive's
// path, for Cluster.ImportImage. img.Binary is set to the built program.
func BuildImage(ctx context.Context, pkg string, img Image, dir string) (string, error) {
	bin, err := BuildProgram(ctx, pkg, dir)
	if err != nil {
		return "", err
	}
	img.Binary = bin
	archive := filepath.Join(dir, filepath.Base(pkg)+".oci.tar")
	if err := WriteImage(img, archive); err != nil {
		return "", err
	}
	return archive, nil
}
