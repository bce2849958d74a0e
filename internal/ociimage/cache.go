package ociimage

import (
	"os"
	"path/filepath"
)

// DefaultCache is where `make image` (hack/image) caches its layers when no
// -cache is given: $KAO_IMAGE_CACHE, or kao/image in the user's cache
// directory. Tests that reuse what an earlier build cached look there too.
func DefaultCache() string {
	if d := os.Getenv("KAO_IMAGE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "kao", "image")
	}
	return filepath.Join(os.TempDir(), "kao-image-cache")
}
