// Package ociimage writes OCI images from files, without a container engine:
// layers from a tar stream or from a list of entries, and an OCI archive (a
// tar of an OCI image layout) that skopeo pushes and `ctr images import`
// loads. The same inputs give the same bytes: entries in a fixed order, fixed
// times, no user names, gzip without a name or time. hack/image builds kao's
// operator image with it.
package ociimage
