package oci

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/krunbox/krunbox/internal/confine"
)

// Prefixes of offline image sources.
const (
	// LayoutPrefix names an OCI image layout directory: oci:PATH[:TAG].
	LayoutPrefix = "oci:"
	// ArchivePrefix names a "docker save" tarball: docker-archive:PATH[:REF].
	ArchivePrefix = "docker-archive:"
	// DockerTransport is the transport prefix skopeo and podman write before
	// a registry reference (docker://alpine); it means the registry, as a
	// reference without it does.
	DockerTransport = "docker://"
	// DefaultLayoutTag is the tag an untagged oci:PATH names when the layout
	// has an image so tagged, as alpine means alpine:latest.
	DefaultLayoutTag = "latest"
)

// ReferenceHelp documents the reference syntax for users.
const ReferenceHelp = `Image references:
  alpine, alpine:3.20, ghcr.io/owner/image@sha256:...  a registry (Docker Hub by default)
  127.0.0.1:5000/image:tag                              plain HTTP, for localhost/127.0.0.1/[::1] only
  docker://alpine                                       the same as alpine (skopeo's and podman's spelling)
  oci:PATH[:TAG]                                        an OCI image layout directory (TAG: latest if it has it)
  docker-archive:PATH[:REF]                             a "docker save" tarball
PATH may not contain ':'. A local path needs its prefix: oci:./build/testimage.`

type sourceKind int

const (
	registrySource sourceKind = iota
	layoutSource
	archiveSource
)

// source is a parsed image reference.
type source struct {
	kind sourceKind
	// name is the normalized reference, the key of the image's record.
	name string
	ref  name.Reference // registry image, or the tag inside an archive
	path string         // layout directory or archive file, absolute
	tag  string         // layout tag
	// oldName is the name records had before oci:DIR came to mean the
	// layout's image tagged latest: oci:DIR, for rmi to find them.
	oldName string
}

// parseSource parses a reference as people write it.
func parseSource(s string) (source, error) {
	switch {
	case strings.HasPrefix(s, LayoutPrefix):
		abs, tag, err := offlinePath(s, LayoutPrefix)
		if err != nil {
			return source{}, err
		}
		src := source{kind: layoutSource, name: LayoutPrefix + abs, path: abs, tag: tag}
		if tag == "" && layoutHasTag(abs, DefaultLayoutTag) {
			// One name, and one cache entry, for oci:DIR and oci:DIR:latest.
			src.tag, src.oldName = DefaultLayoutTag, src.name
		}
		if src.tag != "" {
			src.name += ":" + src.tag
		}
		return src, nil
	case strings.HasPrefix(s, ArchivePrefix):
		abs, r, err := offlinePath(s, ArchivePrefix)
		if err != nil {
			return source{}, err
		}
		src := source{kind: archiveSource, name: ArchivePrefix + abs, path: abs}
		if r != "" {
			tag, err := name.NewTag(r)
			if err != nil {
				return source{}, &ReferenceError{Ref: s, Err: err}
			}
			src.ref = tag
			src.name += ":" + tag.Name()
		}
		return src, nil
	default:
		if err := checkNotLocalPath(s); err != nil {
			return source{}, err
		}
		ref, err := name.ParseReference(strings.TrimPrefix(s, DockerTransport))
		if err != nil {
			return source{}, &ReferenceError{Ref: s, Err: err}
		}
		return source{kind: registrySource, name: ref.Name(), ref: ref}, nil
	}
}

// layoutHasTag reports whether the OCI layout in dir has an image or index
// tagged tag in its index.json (read bounded, without following a symlink
// in its place). A layout it cannot read has none: reading the image
// reports why.
func layoutHasTag(dir, tag string) bool {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false
	}
	defer root.Close()
	b, err := confine.ReadFile(root, "index.json", confine.DefaultMaxRead)
	if err != nil {
		return false
	}
	var m v1.IndexManifest
	if json.Unmarshal(b, &m) != nil {
		return false
	}
	return slices.ContainsFunc(m.Manifests, func(d v1.Descriptor) bool {
		return d.Annotations[refNameAnnotation] == tag
	})
}

// refNameAnnotation tags an image in an OCI layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// checkNotLocalPath refuses a reference without a prefix that is a path on
// this host: one that starts like a path ("/", "./", "../", "~"), or names
// an OCI layout directory or a tarball that is there. Without the check,
// ./build/testimage would be looked for on Docker Hub.
func checkNotLocalPath(s string) error {
	pathLike := s == "." || s == ".." || s == "~" || strings.HasPrefix(s, "/") ||
		strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "~/")
	layout, archive := false, false
	if fi, err := os.Stat(s); err == nil {
		if fi.IsDir() {
			_, err := os.Stat(filepath.Join(s, "oci-layout"))
			layout = err == nil
		} else if fi.Mode().IsRegular() {
			archive = strings.HasSuffix(s, ".tar") || strings.HasSuffix(s, ".tar.gz") || strings.HasSuffix(s, ".tgz")
		}
	}
	if !pathLike && !layout && !archive {
		return nil
	}
	e := &ReferenceError{Ref: s, Err: errors.New("a local path is not an image reference")}
	switch {
	case archive:
		e.hint = "for the \"docker save\" tarball there, write " + ArchivePrefix + s
	case strings.HasPrefix(s, "~"):
		e.hint = "the shell did not expand ~ here: write " + LayoutPrefix + "$HOME/... for an OCI image layout directory"
	default:
		e.hint = "for an OCI image layout directory, write " + LayoutPrefix + s +
			" (and " + ArchivePrefix + "FILE for a \"docker save\" tarball)"
	}
	if !pathLike {
		e.hint += "; for the registry image of that name, write docker.io/" + s
	}
	return e
}

// ReferenceError reports an image reference that cannot be parsed.
type ReferenceError struct {
	Ref string
	Err error
	// hint replaces the general one for a mistake known more precisely.
	hint string
}

func (e *ReferenceError) Error() string {
	return fmt.Sprintf("invalid image reference %q: %v", e.Ref, e.Err)
}

// Unwrap returns the parser's error.
func (e *ReferenceError) Unwrap() error { return e.Err }

// Hint shows valid references.
func (e *ReferenceError) Hint() string {
	if e.hint != "" {
		return e.hint
	}
	return "references look like alpine, alpine:3.20, ghcr.io/owner/image@sha256:<digest>, 127.0.0.1:5000/image:tag, " +
		"oci:DIR[:TAG] or docker-archive:FILE[:REF] (see 'krunbox pull --help')"
}

// offlinePath splits PREFIX:PATH[:REST] into the absolute PATH and REST.
func offlinePath(s, prefix string) (abs, rest string, err error) {
	p, rest, _ := strings.Cut(strings.TrimPrefix(s, prefix), ":")
	if p == "" {
		return "", "", &ReferenceError{Ref: s, Err: fmt.Errorf("no path after %q", prefix)}
	}
	abs, err = filepath.Abs(p)
	return abs, rest, err
}

// fetched is an image picked from a source for one platform.
type fetched struct {
	img      v1.Image
	digest   v1.Hash
	platform v1.Platform
	// remote is set for registry images, whose layers are fetched lazily.
	remote bool
}

// fetch finds the image for platform in the source.
func (s *Store) fetch(ctx context.Context, src source, platform v1.Platform) (*fetched, error) {
	switch src.kind {
	case registrySource:
		return s.fetchRegistry(ctx, src, platform)
	case layoutSource:
		idx, err := layout.ImageIndexFromPath(src.path)
		if err != nil {
			return nil, &SourceError{Prefix: LayoutPrefix, Path: src.path, Err: err}
		}
		if src.tag != "" {
			m, err := idx.IndexManifest()
			if err != nil {
				return nil, fmt.Errorf("read OCI layout %s: %w", src.path, err)
			}
			var tags []string
			for _, d := range m.Manifests {
				t := d.Annotations[refNameAnnotation]
				if t != src.tag {
					if t != "" {
						tags = append(tags, t)
					}
					continue
				}
				if d.MediaType.IsIndex() {
					sub, err := idx.ImageIndex(d.Digest)
					if err != nil {
						return nil, err
					}
					return pickFromIndex(sub, platform, src.name)
				}
				img, err := idx.Image(d.Digest)
				if err != nil {
					return nil, err
				}
				return checkPlatform(img, d.Digest, platform, src.name, false)
			}
			return nil, fmt.Errorf("OCI layout %s has no image tagged %q (tags: %s)", src.path, src.tag, listOrNone(tags))
		}
		return pickFromIndex(idx, platform, src.name)
	default:
		var tag *name.Tag
		if t, ok := src.ref.(name.Tag); ok {
			tag = &t
		}
		img, err := tarball.ImageFromPath(src.path, tag)
		if err != nil {
			return nil, &SourceError{Prefix: ArchivePrefix, Path: src.path, Err: err}
		}
		d, err := img.Digest()
		if err != nil {
			return nil, &SourceError{Prefix: ArchivePrefix, Path: src.path, Err: err}
		}
		return checkPlatform(img, d, platform, src.name, false)
	}
}

// RegistryError reports a registry that did not give the image's manifest.
type RegistryError struct {
	Ref      string // normalized reference
	Registry string // host[:port]
	Err      error
}

func (e *RegistryError) Error() string { return fmt.Sprintf("pull %s: %v", e.Ref, e.Err) }

// Unwrap returns the registry client's error.
func (e *RegistryError) Unwrap() error { return e.Err }

// Hint tells the user what to do when the registry refused access or could
// not be reached; it is empty for other failures.
func (e *RegistryError) Hint() string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case httpStatus(e.Err) == http.StatusUnauthorized || httpStatus(e.Err) == http.StatusForbidden:
		login := "login " + e.Registry
		if e.Registry == name.DefaultRegistry {
			login = "login docker.io"
		}
		return "check the image name; if it is private, log in with 'docker " + login + "' or 'podman " + login + "'. " +
			"krunbox reads credentials from $DOCKER_CONFIG/config.json or else ~/.docker/config.json (with their credential helpers), " +
			"then $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json and ~/.config/containers/auth.json"
	case errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded):
		return ""
	case errors.As(e.Err, &dnsErr) || errors.As(e.Err, &opErr):
		return "check the registry name (" + e.Registry + ") and the network; an image already in the cache needs no network: use --pull never"
	}
	return ""
}

// SourceError reports an offline image source (oci: or docker-archive:)
// that cannot be read.
type SourceError struct {
	Prefix string // LayoutPrefix or ArchivePrefix
	Path   string
	Err    error
}

func (e *SourceError) Error() string {
	if e.Prefix == LayoutPrefix {
		return fmt.Sprintf("read OCI layout %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("read docker archive %s: %v", e.Path, e.Err)
}

// Unwrap returns the reader's error.
func (e *SourceError) Unwrap() error { return e.Err }

// Hint says what the source must be and how to make one.
func (e *SourceError) Hint() string {
	if e.Prefix == LayoutPrefix {
		return "oci:DIR wants an OCI image layout directory (index.json, oci-layout, blobs/), " +
			"as written by 'skopeo copy docker://IMAGE oci:DIR:TAG' or 'crane pull --format=oci IMAGE DIR'"
	}
	return "docker-archive:FILE wants a tarball written by 'docker save -o FILE IMAGE' or 'podman save -o FILE IMAGE' " +
		"(and docker-archive:FILE:REF one of the names it was saved with)"
}

// pickFromIndex picks the image for platform from an index (nested
// indexes included), or fails naming the platforms it has.
func pickFromIndex(idx v1.ImageIndex, platform v1.Platform, ref string) (*fetched, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	var have []string
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			sub, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ref, err)
			}
			f, err := pickFromIndex(sub, platform, ref)
			if err == nil {
				return f, nil
			}
			continue
		case !d.MediaType.IsImage():
			continue // attestations, signatures...
		case d.Platform == nil || d.Platform.OS == "" || d.Platform.Architecture == "":
			// An image the index does not say the whole platform of: check
			// its config.
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ref, err)
			}
			f, err := checkPlatform(img, d.Digest, platform, ref, false)
			if err == nil {
				return f, nil
			}
			if pe := (*PlatformError)(nil); errors.As(err, &pe) {
				have = append(have, pe.Have...)
			}
			continue
		}
		if d.Platform.OS == "unknown" {
			continue // buildkit attestation manifests
		}
		have = append(have, d.Platform.String())
		if d.Platform.Satisfies(platform) {
			img, err := idx.Image(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", ref, err)
			}
			return &fetched{img: img, digest: d.Digest, platform: *d.Platform}, nil
		}
	}
	return nil, &PlatformError{Ref: ref, Want: platform.String(), Have: have}
}

// checkPlatform accepts a single-platform image whose config matches
// platform. A field the config leaves out (no architecture, as crane append
// and some builders write, or no OS) does not contradict platform, as
// docker and podman see it: the image is taken as platform's; only a field
// that says otherwise (arm64 for amd64) refuses it.
func checkPlatform(img v1.Image, digest v1.Hash, platform v1.Platform, ref string, remote bool) (*fetched, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s: read image config: %w", ref, err)
	}
	got := v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
	agree := func(have, want string) bool { return have == "" || want == "" || have == want }
	if !agree(got.OS, platform.OS) || !agree(got.Architecture, platform.Architecture) || !agree(got.Variant, platform.Variant) {
		return nil, &PlatformError{Ref: ref, Want: platform.String(), Have: []string{describePlatform(got)}}
	}
	got.OS = cmp.Or(got.OS, platform.OS)
	got.Architecture = cmp.Or(got.Architecture, platform.Architecture)
	got.Variant = cmp.Or(got.Variant, platform.Variant)
	return &fetched{img: img, digest: digest, platform: got, remote: remote}, nil
}

// describePlatform names an image's platform, saying which parts of it
// its config leaves out.
func describePlatform(p v1.Platform) string {
	if p.OS == "" {
		p.OS = "(no os)"
	}
	if p.Architecture == "" {
		p.Architecture = "(no architecture)"
	}
	return p.String()
}

// PlatformError reports an image that has no variant for the platform
// asked for.
type PlatformError struct {
	Ref  string
	Want string
	Have []string
}

func (e *PlatformError) Error() string {
	return fmt.Sprintf("%s has no image for %s (it has: %s)", e.Ref, e.Want, listOrNone(e.Have))
}

// Hint tells the user what to do.
func (e *PlatformError) Hint() string {
	return "pick one of its platforms with --platform, or use an image built for " + e.Want
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ", ")
}

// isSupportedLayer reports whether a layer media type can be flattened.
func isSupportedLayer(mt types.MediaType) bool {
	switch mt {
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer,
		types.DockerLayer, types.DockerUncompressedLayer,
		types.OCIRestrictedLayer, types.OCIUncompressedRestrictedLayer,
		types.DockerForeignLayer, "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd":
		return true
	}
	return false
}

// loopbackOnlyHTTP refuses plain-HTTP requests to anything but a loopback
// address, whatever the registry client decides: a redirect to http://, or
// a fallback to HTTP for private (RFC 1918) and .local registries, would
// let a network attacker in.
type loopbackOnlyHTTP struct{ next http.RoundTripper }

func (t loopbackOnlyHTTP) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !isLoopback(req.URL.Hostname()) {
		return nil, fmt.Errorf("refusing plain HTTP to %s: only localhost, 127.0.0.1 and [::1] registries may use it", req.URL.Host)
	}
	return t.next.RoundTrip(req)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
