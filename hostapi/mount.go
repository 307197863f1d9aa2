package hostapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/confine"
)

// Mount shares a host directory with the guest, live, over virtio-fs.
type Mount struct {
	// HostPath is an existing directory on the host.
	HostPath string `json:"host_path"`
	// GuestPath is where the directory appears in the guest. Empty means
	// the same absolute path as on the host.
	GuestPath string `json:"guest_path,omitempty"`
	// ReadOnly makes the share read-only, enforced by the host.
	ReadOnly bool `json:"read_only,omitempty"`
	// Cached lets the guest cache the share's directory entries and
	// attributes for 5 s, as libkrun does by default, rather than see each
	// host change at its next access: faster where the guest lists or
	// stats many files, for a share the host does not change while the
	// sandbox runs (a read-mostly dependency cache). The risk: for up to
	// 5 s after the host changes a file, the guest may read the old one,
	// and an edit the guest makes then overwrites the host's change.
	Cached bool `json:"cached,omitempty"`
}

func (m Mount) String() string {
	s := m.HostPath
	if m.GuestPath != "" && m.GuestPath != m.HostPath {
		s += ":" + m.GuestPath
	}
	var opts []string
	if m.ReadOnly {
		opts = append(opts, "ro")
	}
	if m.Cached {
		opts = append(opts, "cached")
	}
	if len(opts) > 0 {
		s += ":" + strings.Join(opts, ",")
	}
	return s
}

// mountOptions are the options of a mount's last field, as Docker writes
// them: "ro" and "rw", and "cached" and "consistent" (the default).
var mountOptions = []string{"ro", "rw", "cached", "consistent"}

// ParseMount parses a mount written HOST[:GUEST][:OPTIONS], as given to
// "krunbox run -v", OPTIONS being a comma-separated list of ro or rw and
// cached or consistent (the default; see Mount.Cached). A relative HOST is
// taken from the current directory.
func ParseMount(s string) (Mount, error) {
	parts := strings.Split(s, ":")
	var m Mount
	if n := len(parts); n > 1 && isMountOptions(parts[n-1]) {
		for _, o := range strings.Split(parts[n-1], ",") {
			switch o {
			case "ro", "rw":
				m.ReadOnly = o == "ro"
			case "cached", "consistent":
				m.Cached = o == "cached"
			}
		}
		parts = parts[:n-1]
	}
	switch len(parts) {
	case 1:
		m.HostPath = parts[0]
	case 2:
		m.HostPath, m.GuestPath = parts[0], parts[1]
		if m.GuestPath == "" {
			return Mount{}, fmt.Errorf("mount %q: empty guest path", s)
		}
	default:
		return Mount{}, fmt.Errorf("mount %q: want HOST[:GUEST][:ro] (options ro or rw, and cached, comma-separated)", s)
	}
	if m.HostPath == "" {
		return Mount{}, fmt.Errorf("mount %q: empty host path", s)
	}
	return m, nil
}

// reservedGuestPaths are guest paths no mount may cover or shadow: the root,
// the kernel's filesystems, and where krunbox puts the agent.
var reservedGuestPaths = []string{"/", "/proc", "/sys", "/dev", protocol.GuestDir}

// ErrInvalidMount is wrapped by the errors of Create for mounts it refuses:
// a host path that is not a directory, or that is, contains or lies within
// krunbox's own state, cache or configuration directory, or what the pi
// extension trusts (its user configuration file, pi's agent directory); a
// guest path that is relative or would shadow the root, /proc, /sys, /dev
// or krunbox's own directory; and mounts that overlap in the guest. Start
// wraps it too, for a share that no longer passes these checks, or that
// has a symlink on its way now, since the sandbox was created.
var ErrInvalidMount = errors.New("invalid mount")

// resolveMounts validates mounts and returns them normalised: host paths
// absolute, cleaned and with symlinks resolved, guest paths absolute and
// cleaned (defaulting to the host path). It refuses host paths that are not
// directories, guest paths that would shadow the root, /proc, /sys, /dev or
// krunbox's own directory, and mounts whose guest paths overlap.
func resolveMounts(mounts []Mount) ([]Mount, error) {
	out := make([]Mount, 0, len(mounts))
	for _, m := range mounts {
		r, err := resolveMount(m)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	for i, a := range out {
		for _, b := range out[i+1:] {
			if confine.Within(a.GuestPath, b.GuestPath) || confine.Within(b.GuestPath, a.GuestPath) {
				return nil, fmt.Errorf("%w: %s and %s overlap in the guest at %s and %s", ErrInvalidMount, a.HostPath, b.HostPath, a.GuestPath, b.GuestPath)
			}
		}
	}
	return out, nil
}

func resolveMount(m Mount) (Mount, error) {
	host, err := filepath.Abs(m.HostPath)
	if err != nil {
		return Mount{}, fmt.Errorf("%w %s: %w", ErrInvalidMount, m.HostPath, err)
	}
	host, err = filepath.EvalSymlinks(host)
	if err != nil {
		return Mount{}, fmt.Errorf("%w %s: %w", ErrInvalidMount, m.HostPath, err)
	}
	fi, err := os.Stat(host)
	if err != nil {
		return Mount{}, fmt.Errorf("%w %s: %w", ErrInvalidMount, m.HostPath, err)
	}
	if !fi.IsDir() {
		return Mount{}, fmt.Errorf("%w %s: not a directory (virtio-fs shares directories; mount its parent)", ErrInvalidMount, m.HostPath)
	}
	guest := m.GuestPath
	if guest == "" {
		guest = host
	}
	if !filepath.IsAbs(guest) {
		return Mount{}, fmt.Errorf("%w %s: guest path %q is not absolute", ErrInvalidMount, m.HostPath, guest)
	}
	guest = filepath.Clean(guest)
	for _, r := range reservedGuestPaths {
		if guest == r || (r != "/" && confine.Within(r, guest)) {
			return Mount{}, fmt.Errorf("%w %s: guest path %s would shadow %s", ErrInvalidMount, m.HostPath, guest, r)
		}
	}
	return Mount{HostPath: host, GuestPath: guest, ReadOnly: m.ReadOnly, Cached: m.Cached}, nil
}

// isMountOptions reports whether s is a list of mount options (and so not
// a guest path).
func isMountOptions(s string) bool {
	for _, o := range strings.Split(s, ",") {
		if !slices.Contains(mountOptions, o) {
			return false
		}
	}
	return true
}

// exposureError refuses a mount that would give the guest krunbox's own
// files.
type exposureError struct{ err error }

func (e *exposureError) Error() string { return e.err.Error() }
func (e *exposureError) Unwrap() error { return e.err }

// Hint says how to share what was meant without krunbox's directories.
func (e *exposureError) Hint() string {
	return "share a narrower directory (the project's), or keep krunbox's directories elsewhere with KRUNBOX_HOME"
}

// ownDir is one of krunbox's own directories, named by what it holds.
type ownDir struct{ what, path string }

// ownDirs returns what no share may be, hold or lie within: krunbox's
// state, cache and configuration directories, and what the pi extension
// krunbox serves trusts. That is its user configuration (pi.toml, whose
// fallback = "host" and trusted_projects widen what a project may do), at
// $KRUNBOX_PI_CONFIG or else in krunbox's configuration directory, and
// pi's agent directory ($PI_CODING_AGENT_DIR or ~/.pi/agent), whose
// trust.json says which projects pi trusts and which holds pi's settings
// and extensions, run on the host.
func (h *Host) ownDirs() []ownDir {
	own := []ownDir{{"state directory", h.dirs.State}, {"image cache", h.dirs.Cache}, {"configuration directory", h.dirs.Config}}
	if f := os.Getenv("KRUNBOX_PI_CONFIG"); f != "" {
		own = append(own, ownDir{"pi extension's configuration file", f})
	}
	agent := os.Getenv("PI_CODING_AGENT_DIR")
	if home, err := os.UserHomeDir(); agent == "" && err == nil {
		agent = filepath.Join(home, ".pi", "agent")
	}
	return append(own, ownDir{"pi agent directory", agent})
}

// refuseExposure refuses mounts whose host directory is, contains or lies
// within one of krunbox's own directories (resolved as resolveOwn does,
// also where they do not exist yet), or contains a symlink on the way to
// one:
// through such a share a guest could rewrite the image trees every sandbox
// shares, other sandboxes' roots and records, or the configuration of the
// next sandboxes, read-write or read-only alike (other sandboxes' files
// are not the guest's to read either).
func refuseExposure(mounts []Mount, own []ownDir) error {
	for _, d := range own {
		if d.path == "" {
			continue
		}
		abs, err := filepath.Abs(d.path)
		if err != nil {
			return err
		}
		real, links := resolveOwn(abs)
		for _, m := range mounts {
			if confine.Within(m.HostPath, real) || confine.Within(real, m.HostPath) {
				return &exposureError{fmt.Errorf("%w %s: it would give the guest krunbox's %s (%s)", ErrInvalidMount, m.HostPath, d.what, real)}
			}
			for _, l := range links {
				if confine.Within(m.HostPath, l) {
					return &exposureError{fmt.Errorf("%w %s: it holds %s, the symlink through which krunbox finds its %s (%s): the guest could point it elsewhere", ErrInvalidMount, m.HostPath, l, d.what, real)}
				}
			}
		}
	}
	return nil
}

// maxLinks bounds the symlinks resolveOwn follows, as the kernel's path
// resolution does.
const maxLinks = 40

// resolveOwn resolves the absolute path p, one of krunbox's own
// directories, component by component as far as it exists, and returns
// it with the places (resolved) of the symlinks followed on the way. A
// directory that does not exist yet (the configuration directory before
// its first use) is where it would be made: with ~/.config a symlink to
// /elsewhere/config, ~/.config/krunbox is /elsewhere/config/krunbox,
// reached through the link ~/.config. A dangling symlink is followed to
// where it points. Whoever can replace one of those links decides where
// the directory is, so a share must hold none of them either.
func resolveOwn(p string) (string, []string) {
	var links []string
	resolved, rest := "/", strings.Split(p, "/")
	for budget := maxLinks; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		resolved = next
		if fi, err := os.Lstat(next); err != nil || fi.Mode()&fs.ModeSymlink == 0 || budget == 0 {
			continue
		}
		target, err := os.Readlink(next)
		if err != nil {
			continue
		}
		budget--
		links = append(links, next)
		resolved = filepath.Dir(next)
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return resolved, links
}

// mountTag is the virtio-fs tag of the i-th mount: short, since libkrun
// allows at most 36 bytes.
func mountTag(i int) string { return fmt.Sprintf("kb%d", i) }
