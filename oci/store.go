package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/oci/flatten"
)

// Store is an image cache in one directory:
//
//	blobs/sha256/<hex>       compressed layers, configs and manifests, by digest
//	rootfs/<hex>/rootfs/     flattened root file systems, by manifest digest
//	rootfs/<hex>/meta.json   written before the tree is published
//	images.json              the image records (reference -> manifest)
//	tmp/, trash/, locks/     staging, lazy deletion and lock files
//
// Everything is published by atomic rename, and several processes may use
// one Store directory at once. rootfs/ is 0700: trees may hold set-id files.
type Store struct {
	dir  string
	opts options
}

type options struct {
	rootless    bool
	limits      Limits
	credentials CredentialFunc
	transport   http.RoundTripper
	jobs        int
	sync        bool
}

// Limits bounds what one image may unpack to; zero fields take the
// defaults of package flatten (64 GiB, 4 Mi entries).
type Limits struct {
	MaxBytes   int64 // uncompressed bytes of all layers
	MaxEntries int64 // tar entries of all layers
}

// Option configures a Store.
type Option func(*options)

// WithRootless chooses how ownership is handled: true records it in the
// user.containers.override_stat xattr instead of applying it. By default
// it is true unless the process runs as root.
func WithRootless(rootless bool) Option { return func(o *options) { o.rootless = rootless } }

// WithLimits bounds the size and entry count of images.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithCredentials sets where registry credentials come from (default
// DefaultCredentials; nil for none).
func WithCredentials(fn CredentialFunc) Option { return func(o *options) { o.credentials = fn } }

// WithTransport sets the HTTP transport for registries.
func WithTransport(t http.RoundTripper) Option { return func(o *options) { o.transport = t } }

// WithJobs sets how many layers are downloaded at once (default 4).
func WithJobs(n int) Option { return func(o *options) { o.jobs = max(n, 1) } }

// WithSync makes every flattened tree durable (one syncfs before it is
// published). Without it, a tree flattened during an earlier boot is
// re-flattened from the blob cache on first use, since a crash may have
// lost part of it.
func WithSync(sync bool) Option { return func(o *options) { o.sync = sync } }

// Open opens (creating it if needed) the image store in dir, typically
// hostapi.DefaultDirs().Cache.
func Open(dir string, opts ...Option) (*Store, error) {
	o := options{rootless: os.Geteuid() != 0, credentials: DefaultCredentials, transport: http.DefaultTransport, jobs: 4}
	for _, fn := range opts {
		fn(&o)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	s := &Store{dir: abs, opts: o}
	for _, d := range []string{abs, s.path("blobs", "sha256"), s.path("locks"), s.path("tmp"), s.path("trash"), s.path("rootfs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	// Trees may hold set-id files and must not be reachable by other users.
	for _, d := range []string{s.path("rootfs"), s.path("tmp"), s.path("trash")} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("open image store: %w", err)
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

func (s *Store) blobPath(h v1.Hash) string { return s.path("blobs", h.Algorithm, h.Hex) }

func (s *Store) treeDir(h v1.Hash) string { return s.path("rootfs", h.Hex) }

// HostPlatform is the platform images are pulled for by default: linux on
// the host's architecture.
func HostPlatform() v1.Platform { return v1.Platform{OS: "linux", Architecture: runtime.GOARCH} }

// Image is a pulled image.
type Image struct {
	// Ref is the reference as given to Pull (empty in List).
	Ref string `json:"-"`
	// Name is the normalized reference, e.g. index.docker.io/library/alpine:3.20
	// or oci:/abs/dir:tag.
	Name string `json:"name"`
	// Digest is the manifest's digest; it names the flattened tree.
	Digest   v1.Hash     `json:"digest"`
	Platform v1.Platform `json:"platform"`
	// Rootfs is the flattened, read-only root file system. Do not modify
	// it: clone it for a sandbox.
	Rootfs       string          `json:"-"`
	ConfigDigest v1.Hash         `json:"configDigest"`
	Config       ImageConfig     `json:"config"`
	Layers       []v1.Descriptor `json:"layers"`
	DiffIDs      []v1.Hash       `json:"diffIDs"`
	// Size is the compressed size of the layers; UnpackedSize the bytes of
	// file content in the tree.
	Size         int64     `json:"size"`
	UnpackedSize int64     `json:"unpackedSize"`
	Files        int64     `json:"files"`
	Pulled       time.Time `json:"pulled"`
	// FlattenTime is how long download and flattening took (0 when the
	// tree was already cached).
	FlattenTime time.Duration `json:"flattenTime"`
}

// ImageConfig is the part of the image configuration that says how to run
// it.
type ImageConfig struct {
	User         string            `json:"user,omitempty"`
	Env          []string          `json:"env,omitempty"`
	Entrypoint   []string          `json:"entrypoint,omitempty"`
	Cmd          []string          `json:"cmd,omitempty"`
	WorkingDir   string            `json:"workingDir,omitempty"`
	ExposedPorts []string          `json:"exposedPorts,omitempty"`
	Volumes      []string          `json:"volumes,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	StopSignal   string            `json:"stopSignal,omitempty"`
}

func imageConfig(c v1.Config) ImageConfig {
	keys := func(m map[string]struct{}) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	return ImageConfig{
		User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir,
		ExposedPorts: keys(c.ExposedPorts), Volumes: keys(c.Volumes), Labels: c.Labels, StopSignal: c.StopSignal,
	}
}

// ErrNotFound reports an image that is not in the store.
var ErrNotFound = errors.New("image not found in the cache")

// records is the content of images.json.
type records struct {
	Images []*Image `json:"images"`
}

func (s *Store) readRecords() (*records, error) {
	b, err := os.ReadFile(s.path("images.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return &records{}, nil
	}
	if err != nil {
		return nil, err
	}
	var r records
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): remove it and pull again", s.path("images.json"), err)
	}
	for _, img := range r.Images {
		img.Rootfs = filepath.Join(s.treeDir(img.Digest), "rootfs")
	}
	return &r, nil
}

// updateRecords applies fn to the records under the records lock and
// writes them back atomically.
func (s *Store) updateRecords(ctx context.Context, fn func(*records) error) error {
	unlock, err := lockFile(ctx, s.path("locks", "images.lock"), true)
	if err != nil {
		return err
	}
	defer unlock()
	r, err := s.readRecords()
	if err != nil {
		return err
	}
	if err := fn(r); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path("images.json"), s.path("tmp"), b)
}

func (s *Store) lookup(name string, platform v1.Platform) (*Image, error) {
	r, err := s.readRecords()
	if err != nil {
		return nil, err
	}
	for _, img := range r.Images {
		if img.Name == name && img.Platform.Satisfies(platform) {
			return img, nil
		}
	}
	return nil, nil
}

// List returns the images in the store, most recently pulled first.
func (s *Store) List(ctx context.Context) ([]*Image, error) {
	r, err := s.readRecords()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(r.Images, func(a, b *Image) int { return b.Pulled.Compare(a.Pulled) })
	return r.Images, nil
}

// Repository and Tag split Name for display (Docker Hub's default registry
// and "library/" shortened as docker does).
func (img *Image) Repository() string {
	repo, _ := img.splitName()
	return repo
}

// Tag is the tag (or "<none>") of Name.
func (img *Image) Tag() string {
	_, tag := img.splitName()
	return tag
}

func (img *Image) splitName() (repo, tag string) {
	n := img.Name
	if i := strings.Index(n, "@"); i >= 0 {
		n = n[:i]
	}
	tag = "<none>"
	if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
		n, tag = n[:i], n[i+1:]
	}
	n = strings.TrimPrefix(n, "index.docker.io/library/")
	n = strings.TrimPrefix(n, "index.docker.io/")
	return n, tag
}

// writeFileAtomic writes b to path through a temporary file in tmpDir.
func writeFileAtomic(path, tmpDir string, b []byte) error {
	f, err := os.CreateTemp(tmpDir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// treeMeta is rootfs/<hex>/meta.json.
type treeMeta struct {
	BootID string        `json:"bootID"`
	Synced bool          `json:"synced"`
	Stats  flatten.Stats `json:"stats"`
	Made   time.Time     `json:"made"`
}

// treeValid reports whether the flattened tree of digest is complete and
// trustworthy: published, and either synced or made during this boot.
func (s *Store) treeValid(digest v1.Hash) (*treeMeta, bool) {
	b, err := os.ReadFile(filepath.Join(s.treeDir(digest), "meta.json"))
	if err != nil {
		return nil, false
	}
	var m treeMeta
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	return &m, m.Synced || (m.BootID != "" && m.BootID == bootID())
}

// Rootfs returns the flattened tree of the cached image whose manifest has
// digest, flattening it again from the blob cache when it is missing or was
// made before the last reboot without being synced. It never touches the
// network, and a tag that moved since does not change what it returns:
// sandboxes use it to find their own image again. It returns ErrNotFound
// when neither a valid tree nor the image's record is left.
func (s *Store) Rootfs(ctx context.Context, digest v1.Hash) (string, error) {
	unlock, err := lockFile(ctx, s.path("locks", "store.lock"), false)
	if err != nil {
		return "", err
	}
	defer unlock()
	root := filepath.Join(s.treeDir(digest), "rootfs")
	if _, ok := s.treeValid(digest); ok {
		return root, nil
	}
	img, err := s.cachedImage(digest)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", digest, err)
	}
	if err := s.ensureTree(ctx, img, cachedLayers(img), nil); err != nil {
		return "", fmt.Errorf("image %s: %w", digest, err)
	}
	return root, nil
}

// cachedImage rebuilds the record of an image from its manifest and config
// in the blob cache, which outlive the record when a tag moves or the
// record is removed while a sandbox uses the image.
func (s *Store) cachedImage(digest v1.Hash) (*Image, error) {
	rm, err := os.ReadFile(s.blobPath(digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(rm))
	if err != nil {
		return nil, fmt.Errorf("cached manifest: %w", err)
	}
	rc, err := os.ReadFile(s.blobPath(m.Config.Digest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(rc))
	if err != nil {
		return nil, fmt.Errorf("cached config: %w", err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("cached manifest has %d layers but its config %d diff_ids", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	img := &Image{
		Name:         digest.String(),
		Digest:       digest,
		ConfigDigest: m.Config.Digest,
		Config:       imageConfig(cf.Config),
		Layers:       m.Layers,
		DiffIDs:      cf.RootFS.DiffIDs,
		Rootfs:       filepath.Join(s.treeDir(digest), "rootfs"),
	}
	if p := cf.Platform(); p != nil {
		img.Platform = *p
	}
	return img, nil
}
