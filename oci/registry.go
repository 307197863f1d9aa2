package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
	"oras.land/oras-go/v2/registry/remote/retry"
)

// Bounds on what a registry, which may be hostile, can make krunbox read
// into memory. Layers are not read into memory: they are hashed while
// streamed to disk and cut at their descriptor's size (blobs.go).
const (
	// maxManifestSize bounds a manifest or an index.
	maxManifestSize = 4 << 20
	// maxConfigSize bounds an image config.
	maxConfigSize = 16 << 20
)

// repository returns the registry client for ref's repository: plain HTTP
// for a loopback registry only, credentials from s.opts.credentials, and
// retries of transient failures.
func (s *Store) repository(ref name.Reference) *remote.Repository {
	repo := ref.Context()
	creds := s.opts.credentials
	return &remote.Repository{
		Client: &auth.Client{
			Client: &http.Client{Transport: retry.NewTransport(loopbackOnlyHTTP{next: s.opts.transport})},
			Header: http.Header{"User-Agent": {"krunbox"}},
			Cache:  auth.NewCache(),
			Credential: func(ctx context.Context, hostport string) (auth.Credential, error) {
				if creds == nil {
					return auth.EmptyCredential, nil
				}
				// As docker and podman: the repository's own entry first,
				// then the registry's.
				for _, key := range []string{repo.String(), serverAddress(hostport)} {
					c, err := creds(ctx, key)
					if err != nil || c != auth.EmptyCredential {
						return c, err
					}
				}
				return auth.EmptyCredential, nil
			},
		},
		Reference:        registry.Reference{Registry: repo.RegistryStr(), Repository: repo.RepositoryStr()},
		PlainHTTP:        isLoopback((&url.URL{Host: repo.RegistryStr()}).Hostname()),
		MaxMetadataBytes: maxManifestSize,
	}
}

// serverAddress is the key docker's and podman's credential files use for
// the registry at hostport: Docker Hub's is its legacy URL.
func serverAddress(hostport string) string {
	if hostport == name.DefaultRegistry {
		return "https://index.docker.io/v1/"
	}
	return hostport
}

// fetchRegistry fetches the manifest src names and picks the image for
// platform; configs and layers are fetched when asked for.
func (s *Store) fetchRegistry(ctx context.Context, src source, platform v1.Platform) (*fetched, error) {
	repo := s.repository(src.ref)
	fail := func(err error) (*fetched, error) {
		return nil, &RegistryError{Ref: src.name, Registry: src.ref.Context().RegistryStr(), Err: responseError(err)}
	}
	desc, raw, err := fetchManifest(ctx, repo, src.ref.Identifier(), "")
	if err != nil {
		return fail(err)
	}
	h, err := v1.NewHash(desc.Digest.String())
	if err != nil {
		return fail(err)
	}
	if mediaType(raw, desc.MediaType).IsIndex() {
		idx, err := newRemoteIndex(ctx, repo, h, raw)
		if err != nil {
			return nil, fmt.Errorf("pull %s: %w", src.name, err)
		}
		f, err := pickFromIndex(idx, platform, src.name)
		if f != nil {
			f.remote = true
		}
		return f, err
	}
	img, err := newRemoteImage(ctx, repo, raw, desc.MediaType)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", src.name, err)
	}
	return checkPlatform(img, h, platform, src.name, true)
}

// fetchManifest fetches the manifest or index reference names (a tag or
// a digest), bounded and verified: against want when it is not empty,
// and against the digest the registry gives for a tag.
func fetchManifest(ctx context.Context, repo *remote.Repository, reference string, want digest.Digest) (ocispec.Descriptor, []byte, error) {
	desc, rc, err := repo.FetchReference(ctx, reference)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	defer rc.Close()
	if want != "" && desc.Digest != want {
		return ocispec.Descriptor{}, nil, fmt.Errorf("manifest %s: the registry sent %s", want, desc.Digest)
	}
	if desc.Size > maxManifestSize {
		return ocispec.Descriptor{}, nil, fmt.Errorf("manifest %s is %d bytes, more than the %d allowed", desc.Digest, desc.Size, maxManifestSize)
	}
	raw, err := content.ReadAll(rc, desc)
	if err != nil {
		return ocispec.Descriptor{}, nil, fmt.Errorf("manifest %s: the registry sent other content: %w", desc.Digest, err)
	}
	return desc, raw, nil
}

// mediaType is the media type a manifest declares, or else the one the
// registry sent it as.
func mediaType(raw []byte, sent string) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(raw, &m) == nil && m.MediaType != "" {
		return m.MediaType
	}
	return types.MediaType(sent)
}

// remoteIndex is an index in a registry whose children are fetched when
// asked for.
type remoteIndex struct {
	ctx    context.Context
	repo   *remote.Repository
	digest v1.Hash
	raw    []byte
	m      *v1.IndexManifest
}

func newRemoteIndex(ctx context.Context, repo *remote.Repository, h v1.Hash, raw []byte) (*remoteIndex, error) {
	var m v1.IndexManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("index %s: %w", h, err)
	}
	return &remoteIndex{ctx: ctx, repo: repo, digest: h, raw: raw, m: &m}, nil
}

func (r *remoteIndex) MediaType() (types.MediaType, error) {
	return mediaType(r.raw, string(types.OCIImageIndex)), nil
}
func (r *remoteIndex) Digest() (v1.Hash, error)                  { return r.digest, nil }
func (r *remoteIndex) Size() (int64, error)                      { return int64(len(r.raw)), nil }
func (r *remoteIndex) IndexManifest() (*v1.IndexManifest, error) { return r.m, nil }
func (r *remoteIndex) RawManifest() ([]byte, error)              { return r.raw, nil }

// child fetches the manifest of the index's entry h.
func (r *remoteIndex) child(h v1.Hash) (ocispec.Descriptor, []byte, error) {
	d := digest.Digest(h.String())
	desc, raw, err := fetchManifest(r.ctx, r.repo, d.String(), d)
	return desc, raw, responseError(err)
}

func (r *remoteIndex) Image(h v1.Hash) (v1.Image, error) {
	desc, raw, err := r.child(h)
	if err != nil {
		return nil, err
	}
	return newRemoteImage(r.ctx, r.repo, raw, desc.MediaType)
}

func (r *remoteIndex) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	_, raw, err := r.child(h)
	if err != nil {
		return nil, err
	}
	return newRemoteIndex(r.ctx, r.repo, h, raw)
}

// remoteImage is the core of an image in a registry: partial completes it
// into a v1.Image. Its config is fetched once, when first asked for; its
// layers are streamed, each verified by its stream's end (verifyingStream).
type remoteImage struct {
	ctx       context.Context
	repo      *remote.Repository
	raw       []byte
	mediaType types.MediaType
	m         *v1.Manifest

	configOnce sync.Once
	config     []byte
	configErr  error
}

func newRemoteImage(ctx context.Context, repo *remote.Repository, raw []byte, sent string) (v1.Image, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	core := &remoteImage{ctx: ctx, repo: repo, raw: raw, mediaType: mediaType(raw, sent), m: m}
	return partial.CompressedToImage(core)
}

func (r *remoteImage) MediaType() (types.MediaType, error) { return r.mediaType, nil }
func (r *remoteImage) RawManifest() ([]byte, error)        { return r.raw, nil }

func (r *remoteImage) RawConfigFile() ([]byte, error) {
	r.configOnce.Do(func() {
		d := r.m.Config
		if d.Size > maxConfigSize {
			r.configErr = fmt.Errorf("config %s is %d bytes, more than the %d allowed", d.Digest, d.Size, maxConfigSize)
			return
		}
		desc := ocispec.Descriptor{MediaType: string(d.MediaType), Digest: digest.Digest(d.Digest.String()), Size: d.Size}
		rc, err := r.repo.Blobs().Fetch(r.ctx, desc)
		if err != nil {
			r.configErr = fmt.Errorf("config %s: %w", d.Digest, responseError(err))
			return
		}
		defer rc.Close()
		r.config, r.configErr = content.ReadAll(rc, desc)
		if r.configErr != nil {
			r.configErr = fmt.Errorf("config %s: the registry sent other content: %w", d.Digest, r.configErr)
		}
	})
	return r.config, r.configErr
}

func (r *remoteImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range r.m.Layers {
		if d.Digest == h {
			return &remoteLayer{img: r, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("the manifest has no layer %s", h)
}

// remoteLayer is a layer blob in a registry.
type remoteLayer struct {
	img  *remoteImage
	desc v1.Descriptor
}

func (l *remoteLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *remoteLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *remoteLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

// Compressed streams the blob, cut at its size; its last read fails
// unless the blob had the descriptor's size and digest (the blob cache
// relies on it: layerSpec.verified).
func (l *remoteLayer) Compressed() (io.ReadCloser, error) {
	desc := ocispec.Descriptor{MediaType: string(l.desc.MediaType), Digest: digest.Digest(l.desc.Digest.String()), Size: l.desc.Size}
	rc, err := l.img.repo.Blobs().Fetch(l.img.ctx, desc)
	if err != nil {
		return nil, responseError(err)
	}
	return &verifyingStream{vr: content.NewVerifyReader(rc, desc), Closer: rc}, nil
}

// verifyingStream is a blob's stream whose end is its verification.
type verifyingStream struct {
	vr *content.VerifyReader
	io.Closer
}

func (v *verifyingStream) Read(p []byte) (int, error) {
	n, err := v.vr.Read(p)
	if err == io.EOF {
		if verr := v.vr.Verify(); verr != nil {
			return n, fmt.Errorf("the registry's blob does not match its descriptor: %w", verr)
		}
	}
	return n, err
}

// statusError is a registry's refusal, described as users of docker and
// of earlier krunbox versions know it: "GET URL: UNAUTHORIZED:
// authentication required".
type statusError struct {
	status int // HTTP status
	text   string
	err    error
}

// responseError makes a registry's error response, or its demand for a
// password krunbox has none for, a statusError; it returns other errors
// as they are.
func responseError(err error) error {
	var resp *errcode.ErrorResponse
	switch {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrBasicCredentialNotFound):
		// The client does not retry without credentials, as the registry
		// would only refuse again: say what it would have said.
		return &statusError{status: http.StatusUnauthorized, text: "UNAUTHORIZED: " + err.Error(), err: err}
	case !errors.As(err, &resp):
		return err
	}
	if len(resp.Errors) == 0 {
		return &statusError{status: resp.StatusCode, err: err,
			text: fmt.Sprintf("%s %s: unexpected status code %d %s", resp.Method, resp.URL, resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	msgs := make([]string, len(resp.Errors))
	for i, m := range resp.Errors {
		msgs[i] = m.Code
		if m.Message != "" {
			msgs[i] += ": " + m.Message
		}
	}
	return &statusError{status: resp.StatusCode, err: err, text: fmt.Sprintf("%s %s: %s", resp.Method, resp.URL, strings.Join(msgs, "; "))}
}

func (e *statusError) Error() string { return e.text }

// Unwrap returns the registry client's error.
func (e *statusError) Unwrap() error { return e.err }

// httpStatus is the HTTP status of the registry's refusal in err, or 0.
func httpStatus(err error) int {
	var se *statusError
	var resp *errcode.ErrorResponse
	switch {
	case errors.As(err, &se):
		return se.status
	case errors.As(err, &resp):
		return resp.StatusCode
	}
	return 0
}
