package hostapi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/hostapi/internal/gitprotect"
	"github.com/krunbox/krunbox/hostapi/internal/isolate"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/internal/secrets"
	"github.com/krunbox/krunbox/oci"
)

// ErrNotFound reports a sandbox that does not exist.
var ErrNotFound = errors.New("no such sandbox")

// ErrExists reports a sandbox name that is taken.
var ErrExists = errors.New("sandbox already exists")

// Host manages the sandboxes of one krunbox state directory and the image
// cache they are made from. It is safe for concurrent use, and several
// processes may use the same directories at once.
type Host struct {
	dirs         Dirs
	libkrun      string
	progress     func(PullProgress)
	startTimeout time.Duration
	stopTimeout  time.Duration
	log          *slog.Logger

	storeOnce sync.Once
	store     *oci.Store
	storeErr  error

	// staleSharesOnce makes Start warn once that libkrun cannot make
	// shares coherent.
	staleSharesOnce sync.Once

	preflightMu sync.Mutex
	preflightOK bool

	// checkOverlay runs vmm.CheckOverlay once (see Host.checkOverlay).
	checkOverlay func() error
	// checkBlock runs vmm.CheckBlock once (see Host.blockCheck).
	checkBlock func() error
	// protectsPaths is vmm.ProtectsPaths; tests replace it.
	protectsPaths func(vmm.Root) bool
}

// HostOption configures a Host.
type HostOption func(*Host)

// WithDirs sets the directories (default: DefaultDirs).
func WithDirs(d Dirs) HostOption { return func(h *Host) { h.dirs = d } }

// WithLibkrun names the libkrun library file to load (default: the search
// of krun.Candidates: KRUNBOX_LIBKRUN, a libkrun installed with the
// program, $KRUNBOX_HOME/lib, then the system's dynamic loader).
func WithLibkrun(path string) HostOption { return func(h *Host) { h.libkrun = path } }

// WithPullProgress receives the progress of image pulls done by Create.
func WithPullProgress(fn func(PullProgress)) HostOption {
	return func(h *Host) { h.progress = fn }
}

// WithStartTimeout bounds how long Start waits for a VM's agent to answer
// (default 60s; a context deadline may end it sooner).
func WithStartTimeout(d time.Duration) HostOption { return func(h *Host) { h.startTimeout = d } }

// WithStopTimeout bounds how long Stop waits for the guest to shut down
// before ending the VM (default 10s).
func WithStopTimeout(d time.Duration) HostOption { return func(h *Host) { h.stopTimeout = d } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) HostOption { return func(h *Host) { h.log = l } }

// NewHost returns a Host on the default directories, or those of
// WithDirs.
func NewHost(opts ...HostOption) (*Host, error) {
	h := &Host{startTimeout: 60 * time.Second, stopTimeout: 10 * time.Second, log: slog.Default(), protectsPaths: vmm.ProtectsPaths}
	h.checkOverlay = sync.OnceValue(h.overlayCheck)
	h.checkBlock = sync.OnceValue(h.blockCheck)
	for _, o := range opts {
		o(h)
	}
	if h.dirs == (Dirs{}) {
		d, err := DefaultDirs()
		if err != nil {
			return nil, err
		}
		h.dirs = d
	}
	return h, nil
}

// Dirs returns the host's directories.
func (h *Host) Dirs() Dirs { return h.dirs }

// images returns the image cache, opened on first use.
func (h *Host) images() (*oci.Store, error) {
	h.storeOnce.Do(func() { h.store, h.storeErr = oci.Open(h.dirs.Cache) })
	return h.store, h.storeErr
}

// Preflight checks that this host can start VMs, as the VM runner will:
// that libkrun (the host's, see WithLibkrun) and libkrunfw load, probed in
// a child process, and that the hypervisor (/dev/kvm on Linux) can be
// used, unless the library is krunbox's test double, and that the guest
// agent exists: a program that does not embed one (one that imports
// hostapi from the module cache) gets it built from the krunbox module's
// source with the Go toolchain, here, at first use. It returns nil or a
// *PreflightError whose Hint says what to do. It costs a process
// start. Call it before Create to fail before an image is pulled; Start
// calls it when a VM fails to boot, to say what the host lacks, and
// before it pulls again an image the cache lost. A success is remembered
// by the Host, a failure is not. Meanwhile, the Host checks, once, whether
// sandbox roots can be overlays (see RootAuto), which Create would do
// otherwise: the two checks' process starts overlap.
func (h *Host) Preflight(ctx context.Context) error {
	h.preflightMu.Lock()
	defer h.preflightMu.Unlock()
	if h.preflightOK {
		return nil
	}
	overlay := make(chan struct{})
	go func() {
		h.checkOverlay()
		close(overlay)
	}()
	defer func() { <-overlay }() // no check left running behind the caller
	if err := vmm.Preflight(ctx, h.libkrun, h.dirs.Cache); err != nil {
		return sdkError(err)
	}
	h.preflightOK = true
	return nil
}

// StaleShares says, when the libkrun this Host starts VMs with cannot make
// shares coherent (it lacks krun_set_virtiofs_cache, as upstream releases
// do), that the guest may see host changes to the workspace and mounts up
// to 5 s late, and why; "" when it can. It probes the library in a child
// process, as Preflight does.
func (h *Host) StaleShares(ctx context.Context) (string, error) {
	r, err := vmm.Probe(ctx, h.libkrun)
	if err != nil {
		return "", err
	}
	if r.LoadErr != "" {
		return "", errors.New(r.LoadErr)
	}
	return r.StaleShares, nil
}

// Create creates a sandbox from cfg: it chooses its root (cfg.Root), pulls
// the image as cfg.PullPolicy says and records the sandbox, without
// starting it. It costs no copy of the image: an overlay root is a
// writable layer over the cached, shared image tree, and a copied root is
// made at the sandbox's first start. Of the image's config, an Env entry
// that is not KEY=VALUE (or holds a NUL) and a WorkingDir that is not
// absolute are dropped with a logged warning; a User holding control
// characters is an error.
func (h *Host) Create(ctx context.Context, cfg Config) (*Sandbox, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	mounts, err := sandboxMounts(&cfg)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	placeholders, ca, err := prepareSecrets(&cfg, mounts)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	// Auto-remove sandboxes left by programs that died before removing them.
	h.List()
	if err := refuseExposure(mounts, h.ownDirs()); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	root, err := h.chooseRoot(cfg.Root, cfg.DiskMiB)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	// Held until the record is published: an rmi or prune meanwhile would
	// see no sandbox using the image and delete it.
	store, err := h.images()
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	release, err := store.Hold(ctx)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer release()
	img, err := h.pull(ctx, store, cfg)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	imgCfg, err := checkImageConfig(img.Name, img.Config, h.log)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	rec := &record{
		Version:      recordVersion,
		Created:      time.Now().UTC(),
		Config:       cfg,
		Mounts:       mounts,
		Root:         root,
		Placeholders: placeholders,
		Image: imageRef{
			Ref:      cfg.Image,
			Name:     img.Name,
			Digest:   img.Digest.String(),
			Platform: img.Platform.String(),
			Config:   imgCfg,
		},
	}
	if err := os.MkdirAll(h.dirs.Sandboxes(), 0o700); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	var prepare func(context.Context, string, *record) error
	if cfg.Isolate {
		project, err := filepath.EvalSymlinks(cfg.Workspace)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: workspace: %w", err)
		}
		gitDir, common, err := isolate.FindRepo(project)
		if err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
		rec.Isolate = &isolate.Record{Project: project, GitDir: gitDir, CommonDir: common}
		prepare = prepareIsolated
	}
	sandboxes, err := filepath.EvalSymlinks(h.dirs.Sandboxes())
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	for attempt := 0; ; attempt++ {
		name := cfg.Name
		if name == "" {
			name = generateName()
		}
		rec.Name = name
		rec.Config.Name = name
		if rec.Isolate != nil {
			rec.Isolate.Branch = BranchPrefix + name
			rec.Mounts = append(isolatedMounts(filepath.Join(sandboxes, name), cfg.Workspace), mounts...)
		}
		err := h.publish(ctx, rec, ca, prepare)
		if errors.Is(err, ErrExists) && cfg.Name == "" && attempt < 5 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create sandbox %s: %w", name, err)
		}
		if root.Kind == RootCopy && cfg.Root == RootAuto {
			h.log.Info("the sandbox's root will be a copy of the image, made at its first start", "sandbox", name, "why", root.Reason)
		}
		return h.open(name, rec), nil
	}
}

// pull resolves the sandbox's image to a cached, flattened tree.
func (h *Host) pull(ctx context.Context, store *oci.Store, cfg Config) (*oci.Image, error) {
	opts := []oci.PullOption{oci.WithPolicy(oci.PullPolicy(cfg.PullPolicy))}
	if cfg.Platform != "" {
		p, err := v1.ParsePlatform(cfg.Platform)
		if err != nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("platform %q: want OS/ARCH[/VARIANT], e.g. linux/arm64", cfg.Platform)
		}
		opts = append(opts, oci.WithPlatform(*p))
	}
	if h.progress != nil {
		opts = append(opts, oci.WithProgress(func(p oci.Progress) { h.progress(pullProgress(p)) }))
	}
	img, err := store.Pull(ctx, cfg.Image, opts...)
	if err != nil {
		return nil, err
	}
	if img.Platform.OS != "linux" {
		return nil, fmt.Errorf("image %s is for %s: a VM runs linux images", img.Name, img.Platform.String())
	}
	return img, nil
}

// sandboxMounts returns the resolved mounts of cfg: its workspace at the
// same path (and the git directories it needs outside it), then its
// mounts. It sets cfg.Workspace to its absolute form.
func sandboxMounts(cfg *Config) ([]Mount, error) {
	var mounts []Mount
	if cfg.Isolate {
		return isolatedSandboxMounts(cfg)
	}
	if cfg.Workspace != "" {
		abs, err := filepath.Abs(cfg.Workspace)
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		cfg.Workspace = abs
		ws, err := resolveMount(Mount{HostPath: abs, GuestPath: abs})
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		mounts = append(mounts, ws)
		gitDirs, err := gitprotect.DirsOutside(ws.HostPath)
		if err != nil {
			return nil, fmt.Errorf("workspace: %w", err)
		}
		for _, d := range gitDirs {
			covered := slices.ContainsFunc(cfg.Mounts, func(m Mount) bool {
				p, err := filepath.Abs(m.HostPath)
				return err == nil && confine.Within(p, d)
			})
			if !covered {
				mounts = append(mounts, Mount{HostPath: d, GuestPath: d})
			}
		}
	}
	return resolveMounts(append(mounts, cfg.Mounts...))
}

// publish creates the sandbox's directory with its record, atomically: a
// directory assembled under a temporary name (by prepare, when not nil,
// then with the record and the secrets' CA, when not nil) is renamed into
// place, and the rename fails if the name is taken.
func (h *Host) publish(ctx context.Context, rec *record, ca *secrets.CA, prepare func(context.Context, string, *record) error) error {
	tmp, err := os.MkdirTemp(h.dirs.Sandboxes(), ".new-")
	if err != nil {
		return err
	}
	defer removeTree(tmp)
	if prepare != nil {
		if err := prepare(ctx, tmp, rec); err != nil {
			return err
		}
	}
	if err := writeRecord(tmp, rec); err != nil {
		return err
	}
	if ca != nil {
		if err := ca.Save(tmp); err != nil {
			return err
		}
	}
	if err := renameNoReplace(tmp, h.sandboxDir(rec.Name)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return ErrExists
		}
		return err
	}
	return nil
}

func (h *Host) sandboxDir(name string) string { return filepath.Join(h.dirs.Sandboxes(), name) }

// Get returns the sandbox called name, or an error wrapping ErrNotFound.
func (h *Host) Get(name string) (*Sandbox, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	rec, err := readRecord(h.sandboxDir(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", name, err)
	}
	return h.open(name, rec), nil
}

// List returns the sandboxes, sorted by name. Auto-remove sandboxes whose
// VM has stopped are removed on the way, not listed.
func (h *Host) List() ([]*Sandbox, error) {
	entries, err := os.ReadDir(h.dirs.Sandboxes())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []*Sandbox
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sb, err := h.Get(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			h.log.Warn("skipping a damaged sandbox", "name", e.Name(), "err", err)
			continue
		}
		if removed, err := sb.removeIfEnded(context.Background()); err != nil {
			h.log.Warn("could not remove an ended auto-remove sandbox", "name", sb.name, "err", err)
		} else if removed {
			h.log.Info("removed an ended auto-remove sandbox", "name", sb.name)
			continue
		}
		out = append(out, sb)
	}
	return out, nil
}

// ImagesInUse reports which images the sandboxes use, by manifest digest
// ("sha256:..."), for the image cache's Remove and Prune: an image a
// sandbox was created from is kept.
func (h *Host) ImagesInUse() (func(digest string) bool, error) {
	sbs, err := h.List()
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, sb := range sbs {
		used[sb.rec.Image.Digest] = true
	}
	return func(d string) bool { return used[d] }, nil
}
