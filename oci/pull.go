package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/oci/flatten"
)

// PullPolicy says when Pull contacts the image's source.
type PullPolicy string

// Pull policies.
const (
	// PullIfMissing uses the cached image when there is one (default): a
	// tag is resolved to a digest once, on the first pull.
	PullIfMissing PullPolicy = "if-missing"
	// PullAlways asks the source for the reference's current digest.
	PullAlways PullPolicy = "always"
	// PullNever only uses the cache.
	PullNever PullPolicy = "never"
)

// ParsePullPolicy parses "missing" (docker's name of if-missing),
// "if-missing", "always" or "never".
func ParsePullPolicy(s string) (PullPolicy, error) {
	switch p := PullPolicy(s); p {
	case PullIfMissing, PullAlways, PullNever:
		return p, nil
	case "missing":
		return PullIfMissing, nil
	}
	return "", fmt.Errorf("pull policy %q: want missing, always or never", s)
}

// ProgressState is the state of one layer during a pull.
type ProgressState int

// Layer states, in the order a layer goes through them.
const (
	LayerFetching ProgressState = iota // downloading; Done says how far
	LayerFetched                       // downloaded and verified
	LayerCached                        // already in the blob cache
	LayerApplying                      // being flattened
	LayerApplied                       // flattened
)

func (s ProgressState) String() string {
	return [...]string{"downloading", "downloaded", "cached", "extracting", "extracted"}[s]
}

// Progress reports the progress of one layer of a pull. Calls are
// serialized, and a layer's first state is always LayerFetching or
// LayerCached: it is never reported applying before that.
type Progress struct {
	Image string  // normalized reference
	Layer v1.Hash // compressed digest
	Index int     // 0-based position in the image
	Count int     // number of layers
	Size  int64   // compressed size
	Done  int64   // bytes downloaded so far
	State ProgressState
	// Local is set when the layer comes from a local source (an OCI
	// layout or a docker archive): fetching it copies it into the cache.
	Local bool
}

// Label names the layer's state for people: as State's String, except
// "copying" and "copied" for a layer fetched from a local source.
func (p Progress) Label() string {
	switch {
	case p.Local && p.State == LayerFetching:
		return "copying"
	case p.Local && p.State == LayerFetched:
		return "copied"
	}
	return p.State.String()
}

type pullOptions struct {
	policy   PullPolicy
	platform v1.Platform
	progress func(Progress)
	// keepSetID keeps set-id bits in an export.
	keepSetID bool
}

// PullOption configures Pull and Export.
type PullOption func(*pullOptions)

// WithPolicy sets the pull policy (default PullIfMissing).
func WithPolicy(p PullPolicy) PullOption { return func(o *pullOptions) { o.policy = p } }

// WithPlatform sets the platform picked from multi-platform images
// (default HostPlatform()).
func WithPlatform(p v1.Platform) PullOption { return func(o *pullOptions) { o.platform = p } }

// WithProgress has fn called as layers are downloaded and flattened.
func WithProgress(fn func(Progress)) PullOption { return func(o *pullOptions) { o.progress = fn } }

// WithKeepSetID keeps the setuid and setgid bits of the image's files in
// an export (Export only; by default they are dropped, since the exported
// tree sits in a directory other users may enter, while the cache keeps
// its trees under a 0700 directory).
func WithKeepSetID(keep bool) PullOption { return func(o *pullOptions) { o.keepSetID = keep } }

// BlobError names a blob that could not be fetched or was corrupt.
type BlobError struct {
	Digest v1.Hash
	Err    error
}

func (e *BlobError) Error() string { return fmt.Sprintf("blob %s: %v", e.Digest, e.Err) }
func (e *BlobError) Unwrap() error { return e.Err }

// Pull makes the image ref available and returns its record, with the
// path of its flattened root file system. Under PullIfMissing a cached
// image resolves without touching the network.
func (s *Store) Pull(ctx context.Context, ref string, opts ...PullOption) (*Image, error) {
	o := pullOptions{policy: PullIfMissing, platform: HostPlatform()}
	for _, fn := range opts {
		fn(&o)
	}
	src, err := parseSource(ref)
	if err != nil {
		return nil, err
	}
	unlock, err := lockFile(ctx, s.path("locks", "store.lock"), false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if o.policy != PullAlways {
		rec, err := s.lookup(src.name, o.platform)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			if _, ok := s.treeValid(rec.Digest); ok {
				rec.Ref = ref
				return rec, nil
			}
			// The tree is missing or from an earlier boot: flatten it
			// again from the blob cache.
			err := s.ensureTree(ctx, rec, cachedLayers(rec), o.progress)
			if err == nil {
				rec.Ref = ref
				return rec, s.putRecord(ctx, rec)
			}
			if o.policy == PullNever {
				return nil, fmt.Errorf("%s: %w", src.name, err)
			}
			slog.Info("cached image incomplete, pulling again", "image", src.name, "err", err)
		} else if o.policy == PullNever {
			return nil, &NotCachedError{Ref: ref, Name: src.name, Platform: o.platform}
		}
	}
	f, err := s.fetch(ctx, src, o.platform)
	if err != nil {
		return nil, err
	}
	img, err := s.install(ctx, src.name, f, o)
	if err != nil {
		return nil, err
	}
	img.Ref = ref
	return img, nil
}

// NotCachedError reports an image that is not in the cache when the pull
// policy is PullNever. It wraps ErrNotFound.
type NotCachedError struct {
	Ref      string // as given to Pull
	Name     string // normalized
	Platform v1.Platform
}

func (e *NotCachedError) Error() string {
	return fmt.Sprintf("%s (for %s): %v, and the pull policy is never", e.Name, e.Platform.String(), ErrNotFound)
}

// Unwrap returns ErrNotFound.
func (e *NotCachedError) Unwrap() error { return ErrNotFound }

// Hint tells the user how to get the image.
func (e *NotCachedError) Hint() string {
	pull := "krunbox pull " + e.Ref
	if !e.Platform.Equals(HostPlatform()) {
		pull = "krunbox pull --platform " + e.Platform.String() + " " + e.Ref
	}
	return "pull it first (" + pull + "), or pull without --pull never"
}

// layerSpec is one layer to fetch and apply.
type layerSpec struct {
	desc   v1.Descriptor
	diffID v1.Hash
	// open streams the compressed blob from the image's source; nil when
	// only the cache may be used.
	open func() (io.ReadCloser, error)
	// local is set when open reads a local source rather than a registry.
	local bool
	// verified says open's stream itself fails at its end unless the blob
	// has the descriptor's size and digest (go-containerregistry's
	// registry layers do), so the download need not hash it again.
	verified bool
}

func cachedLayers(rec *Image) []layerSpec {
	specs := make([]layerSpec, len(rec.Layers))
	for i, d := range rec.Layers {
		specs[i] = layerSpec{desc: d, diffID: rec.DiffIDs[i]}
	}
	return specs
}

// install records the fetched image, flattening it unless its tree exists.
func (s *Store) install(ctx context.Context, name string, f *fetched, o pullOptions) (*Image, error) {
	fail := func(err error) (*Image, error) { return nil, fmt.Errorf("pull %s: %w", name, err) }
	m, err := f.img.Manifest()
	if err != nil {
		return fail(err)
	}
	if m.SchemaVersion != 2 {
		return fail(fmt.Errorf("manifest schema version %d is not supported", m.SchemaVersion))
	}
	rawManifest, err := f.img.RawManifest()
	if err != nil {
		return fail(err)
	}
	rawConfig, err := f.img.RawConfigFile()
	if err != nil {
		return fail(err)
	}
	cf, err := f.img.ConfigFile()
	if err != nil {
		return fail(err)
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return fail(fmt.Errorf("the manifest has %d layers but the config %d diff_ids", len(m.Layers), len(cf.RootFS.DiffIDs)))
	}
	rec := &Image{
		Name:         name,
		Digest:       f.digest,
		Platform:     f.platform,
		ConfigDigest: m.Config.Digest,
		Config:       imageConfig(cf.Config),
		Layers:       m.Layers,
		DiffIDs:      cf.RootFS.DiffIDs,
		Pulled:       time.Now().UTC(),
		Rootfs:       filepath.Join(s.treeDir(f.digest), "rootfs"),
	}
	specs := make([]layerSpec, len(m.Layers))
	for i, d := range m.Layers {
		if !isSupportedLayer(d.MediaType) {
			return fail(fmt.Errorf("layer %s has media type %s, which is not a supported layer type", d.Digest, d.MediaType))
		}
		rec.Size += d.Size
		specs[i] = layerSpec{desc: d, diffID: cf.RootFS.DiffIDs[i], local: !f.remote, verified: f.remote, open: func() (io.ReadCloser, error) {
			l, err := f.img.LayerByDigest(d.Digest)
			if err != nil {
				return nil, err
			}
			return l.Compressed()
		}}
	}
	// Keep manifest and config, so the image can be re-flattened offline.
	if err := s.putBlob(f.digest, rawManifest); err != nil {
		return fail(err)
	}
	if err := s.putBlob(m.Config.Digest, rawConfig); err != nil {
		return fail(err)
	}
	if err := s.ensureTree(ctx, rec, specs, o.progress); err != nil {
		return fail(err)
	}
	if err := s.putRecord(ctx, rec); err != nil {
		return fail(err)
	}
	return rec, nil
}

// putRecord adds or replaces rec (same name and platform).
func (s *Store) putRecord(ctx context.Context, rec *Image) error {
	return s.updateRecords(ctx, func(r *records) error {
		for i, img := range r.Images {
			if img.Name == rec.Name && img.Platform.Equals(rec.Platform) {
				r.Images[i] = rec
				return nil
			}
		}
		r.Images = append(r.Images, rec)
		return nil
	})
}

// putBlob stores a small blob whose content is already known to have
// digest h.
func (s *Store) putBlob(h v1.Hash, b []byte) error {
	got, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if got != h {
		return &BlobError{Digest: h, Err: fmt.Errorf("content has digest %s", got)}
	}
	if _, err := os.Stat(s.blobPath(h)); err == nil {
		return nil
	}
	return writeFileAtomic(s.blobPath(h), s.path("tmp"), b)
}

// ensureTree makes sure the flattened tree of rec exists and fills in its
// sizes, flattening under the tree's lock so that concurrent pulls of one
// image flatten it once.
func (s *Store) ensureTree(ctx context.Context, rec *Image, specs []layerSpec, progress func(Progress)) error {
	unlock, err := lockFile(ctx, s.path("locks", "rootfs-"+rec.Digest.Hex+".lock"), true)
	if err != nil {
		return err
	}
	defer unlock()
	if meta, ok := s.treeValid(rec.Digest); ok {
		rec.UnpackedSize, rec.Files = meta.Stats.FileBytes, meta.Stats.Files
		return nil
	}
	start := time.Now()
	stage, err := os.MkdirTemp(s.path("tmp"), "rootfs-"+rec.Digest.Hex[:12]+"-")
	if err != nil {
		return err
	}
	published := false
	defer func() {
		if !published {
			os.RemoveAll(stage)
		}
	}()
	root := filepath.Join(stage, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	stats, err := s.flattenInto(ctx, root, rec.Name, specs, progress, false)
	if err != nil {
		return err
	}
	meta := treeMeta{BootID: bootID(), Stats: stats, Made: time.Now().UTC()}
	if s.opts.sync {
		if err := syncFS(stage); err != nil {
			return err
		}
		meta.Synced = true
	}
	if err := writeJSON(filepath.Join(stage, "meta.json"), meta); err != nil {
		return err
	}
	final := s.treeDir(rec.Digest)
	if _, err := os.Lstat(final); err == nil {
		if err := s.trash(final); err != nil {
			return err
		}
	}
	if err := os.Rename(stage, final); err != nil {
		return fmt.Errorf("publish %s: %w", final, err)
	}
	published = true
	rec.UnpackedSize, rec.Files = stats.FileBytes, stats.Files
	rec.FlattenTime = time.Since(start)
	return nil
}

// trash moves p into trash/, to be deleted by Prune: deleting a large tree
// right before creating another slows ext4 down (docs/oci.md §4.3).
func (s *Store) trash(p string) error {
	dst, err := os.MkdirTemp(s.path("trash"), filepath.Base(p)+"-")
	if err != nil {
		return err
	}
	if err := os.Rename(p, filepath.Join(dst, "x")); err != nil {
		return fmt.Errorf("move %s to the trash: %w", p, err)
	}
	return nil
}

// flattenInto downloads (or reads from the cache) the layers, in parallel,
// and applies them in order into root while they stream in: the download
// of each layer, its decompression and the application of the previous
// layer overlap.
func (s *Store) flattenInto(ctx context.Context, root, image string, specs []layerSpec, progress func(Progress), dropSetID bool) (flatten.Stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	report := func(i int, state ProgressState, done int64) {
		if progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		progress(Progress{Image: image, Layer: specs[i].desc.Digest, Index: i, Count: len(specs), Size: specs[i].desc.Size, Done: done, State: state, Local: specs[i].local})
	}
	a, err := flatten.NewApplier(root, flatten.Options{Rootless: s.opts.rootless, DropSetID: dropSetID, MaxBytes: s.opts.limits.MaxBytes, MaxEntries: s.opts.limits.MaxEntries})
	if err != nil {
		return flatten.Stats{}, err
	}
	defer a.Close()

	defer raiseProcs()()
	free := newChunkPool(s.opts.jobs)
	fetches := make([]*blobFetch, len(specs))
	for i, sp := range specs {
		fetches[i] = newBlobFetch(sp.desc)
	}
	// The fetches start in the layers' order, as slots free up, and each
	// asks for its blob once the one before has been answered: the
	// applier needs the first layer first, and a registry serves blobs
	// in the order it is asked for them (some, one at a time).
	go func() {
		jobs := make(chan struct{}, s.opts.jobs)
		for i, sp := range specs {
			jobs <- struct{}{}
			go func() {
				defer func() { <-jobs }()
				fetches[i].run(ctx, s, sp, free, func(state ProgressState, done int64) { report(i, state, done) })
			}()
			select {
			case <-fetches[i].answered:
			case <-ctx.Done():
			}
		}
	}()
	defer func() {
		cancel()
		for _, b := range fetches {
			b.close()
		}
	}()

	pipes := make([]*chunkPipe, len(specs))
	start := func(i int) {
		if i < len(specs) && pipes[i] == nil {
			pipes[i] = newChunkPipe(free)
			go decompress(ctx, s, fetches[i], specs[i], pipes[i])
		}
	}
	for i := range specs {
		start(i)
		for j := 1; j <= lookahead; j++ {
			start(i + j) // decompress the next layers while this one is applied
		}
		// A layer is said to be applying only once its fetch has said
		// where its bytes come from (downloading, or cached).
		select {
		case <-fetches[i].announced:
		case <-ctx.Done():
			return a.Stats(), ctx.Err()
		}
		report(i, LayerApplying, 0)
		err := a.ApplyLayer(ctx, pipes[i])
		if err == nil {
			_, err = io.Copy(io.Discard, pipes[i]) // the rest, to verify the diff_id
		}
		var le *flatten.LimitError
		if perr := pipes[i].failed(); perr != nil {
			err = perr // the blob's own error names it
		} else if err != nil && fetches[i].isCached() && !errors.Is(err, context.Canceled) && !errors.As(err, &le) {
			// The applier can stop on a damaged cached blob's content
			// before its decompressor sees the damage and says so.
			err = s.dropDamaged(specs[i].desc, err)
		}
		if err != nil {
			if errors.As(err, &le) {
				return a.Stats(), &LimitsError{LimitError: le}
			}
			var be *BlobError
			var de *DiffIDError
			if errors.As(err, &be) || errors.As(err, &de) {
				return a.Stats(), err // it names the layer
			}
			return a.Stats(), fmt.Errorf("layer %s: %w", specs[i].desc.Digest, err)
		}
		report(i, LayerApplied, specs[i].desc.Size)
	}
	return a.Stats(), nil
}

// lookahead is how many layers beyond the one being applied are
// decompressed at once, each at most pipeChunks ahead of its reader: with
// the applier, enough to keep two cores busy, in at most (lookahead+1) *
// pipeChunks MiB of memory.
const lookahead = 2

// LimitsError reports an image beyond the store's Limits.
type LimitsError struct{ *flatten.LimitError }

// Hint tells the user what to do.
func (e *LimitsError) Hint() string {
	return "if you trust this image, raise the limit (krunbox pull --max-size / --max-files, or oci.WithLimits)"
}

// Unwrap returns the flatten error.
func (e *LimitsError) Unwrap() error { return e.LimitError }

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
