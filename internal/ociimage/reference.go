package ociimage

import (
	"fmt"
	"regexp"
	"strings"
)

// Reference is an image name with a tag: [registry/]path:tag.
type Reference struct {
	// Registry is the host (and port) the image is pushed to; "" means
	// Docker Hub, as a container runtime reads a name without one.
	Registry string
	// Path is the repository inside the registry, "kao/kao-manager".
	Path string
	// Tag is required: an image kao builds is always named by a version.
	Tag string
}

var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	tagPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
)

// ParseReference reads "registry/path:tag", "path:tag" or "name:tag". The
// first component is a registry when it has a dot or a port, or is
// localhost, as container runtimes read it.
func ParseReference(s string) (Reference, error) {
	slash := strings.LastIndex(s, "/")
	colon := strings.LastIndex(s, ":")
	if colon <= slash {
		return Reference{}, fmt.Errorf("image name %q: want [registry/]repository:tag (a tag is required)", s)
	}
	r := Reference{Path: s[:colon], Tag: s[colon+1:]}
	if first, rest, ok := strings.Cut(r.Path, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		r.Registry, r.Path = first, rest
	}
	if !tagPattern.MatchString(r.Tag) {
		return Reference{}, fmt.Errorf("image name %q: tag %q is not a valid tag", s, r.Tag)
	}
	for _, c := range strings.Split(r.Path, "/") {
		if !pathComponent.MatchString(c) {
			return Reference{}, fmt.Errorf("image name %q: %q is not a valid repository component (lower case letters, digits, separators)", s, c)
		}
	}
	return r, nil
}

// String is the name as given: [registry/]path:tag.
func (r Reference) String() string {
	if r.Registry == "" {
		return r.Path + ":" + r.Tag
	}
	return r.Registry + "/" + r.Path + ":" + r.Tag
}

// Normalized is the full name a container runtime resolves the reference
// to: docker.io/library/kao-manager:dev for kao-manager:dev. containerd
// stores an imported image under exactly the name given, and the kubelet
// asks for the normalized one, so an import must use it.
func (r Reference) Normalized() string {
	if r.Registry != "" {
		return r.String()
	}
	path := r.Path
	if !strings.Contains(path, "/") {
		path = "library/" + path
	}
	return "docker.io/" + path + ":" + r.Tag
}

// Repository is the last component of the path: "kao-manager".
func (r Reference) Repository() string { return r.Path[strings.LastIndex(r.Path, "/")+1:] }
