package node

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/kao-io/kao/internal/ociimage"
	"github.com/kao-io/kao/internal/testenv"
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
	// User is "uid:gid", numeric, the program runs as; empty is root.
	User string
}

// WriteImage writes img as an OCI archive at path (internal/ociimage), as
// `ctr images import` and `skopeo copy oci-archive:` read it. The same
// program and settings give the same bytes, so the same image digest.
func WriteImage(img Image, path string) error {
	if img.Name == "" || img.Binary == "" {
		return fmt.Errorf("image needs a name and a binary (got %q, %q)", img.Name, img.Binary)
	}
	name, err := ociimage.ParseReference(img.Name)
	if err != nil {
		return err
	}
	entry := "/" + filepath.Base(img.Binary)
	layerFile := path + ".layer"
	defer func() { _ = os.Remove(layerFile) }()
	layer, err := ociimage.LayerFromEntries([]ociimage.Entry{
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		{Path: entry, Mode: 0o755, Source: img.Binary},
	}, time.Unix(0, 0), layerFile)
	if err != nil {
		return fmt.Errorf("writing the image layer: %w", err)
	}
	_, err = ociimage.WriteArchive(path, ociimage.Image{
		Name:    name,
		Created: time.Unix(0, 0),
		Layers:  []ociimage.Layer{layer},
		Config: ociimage.Config{
			Entrypoint: []string{entry},
			Cmd:        img.Args,
			Env:        append([]string{"PATH=/"}, img.Env...),
			WorkingDir: "/",
			User:       img.User,
		},
	})
	return err
}

// background runs f in a goroutine and returns a function that waits for
// it and returns its error, as often as it is called.
func background(f func() error) func() error {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = f()
	}()
	return func() error {
		<-done
		return err
	}
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
