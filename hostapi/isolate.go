package hostapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/krunbox/krunbox/hostapi/internal/isolate"
	"github.com/krunbox/krunbox/internal/confine"
)

// BranchPrefix prefixes the branch of an isolated sandbox, in its own
// repository and, once landed, in the user's: krunbox/NAME.
const BranchPrefix = "krunbox/"

// Isolation describes an isolated sandbox's checkout (see
// Config.Isolate).
type Isolation struct {
	// Project is the user's checkout the sandbox was made from; the guest
	// sees the sandbox's own checkout at this path.
	Project string `json:"project"`
	// Checkout is the sandbox's own checkout on the host (under krunbox's
	// state): its files are the guest's, hostile to host code.
	Checkout string `json:"checkout"`
	// Base is the commit of the user's repository the checkout was made
	// from.
	Base string `json:"base"`
	// Branch is the branch of the checkout, and the one land makes in the
	// user's repository.
	Branch string `json:"branch"`
}

// Isolation returns the sandbox's isolated checkout, or nil when its
// workspace is the user's checkout, live.
func (s *Sandbox) Isolation() *Isolation {
	r := s.rec.Isolate
	if r == nil {
		return nil
	}
	return &Isolation{Project: r.Project, Checkout: s.path(isolate.WorkspaceDir), Base: r.Base, Branch: r.Branch}
}

// ErrNotIsolated is returned by Diff, Export and Land for a sandbox whose
// workspace is not isolated.
var ErrNotIsolated = errors.New("the sandbox's workspace is not isolated (create it with --isolate)")

// Change is a file of an isolated checkout that differs from its base
// commit, committed in the sandbox or not.
type Change struct {
	// Path is relative to the project.
	Path string
	// From and To are the blob hashes (empty for an added or a deleted
	// file) and FromMode and ToMode the git modes, e.g. 0100644.
	From, To         string
	FromMode, ToMode uint32
}

// DiffOptions selects what Diff reports.
type DiffOptions struct {
	// Paths narrows the diff to these files or directories, relative to
	// the project (or absolute below it).
	Paths []string
	// Stat writes a summary (git's --stat) instead of the patch.
	Stat bool
}

// LandOptions says how Land makes the branch.
type LandOptions struct {
	// Squash makes one commit of all the sandbox's work on its base,
	// instead of its commits and one more for what is not committed.
	Squash bool
}

// Landed is what Land made in the user's repository.
type Landed struct {
	// Branch is the branch made or moved, krunbox/NAME.
	Branch string
	// Commit is the commit it points to.
	Commit string
	// Commits is the number of commits it has over the base.
	Commits int
	// Unchanged is set when there was nothing to land (the branch is the
	// base) or nothing new since the last Land.
	Unchanged bool
}

// checkout returns the sandbox's isolated checkout, nil when it has none.
func (s *Sandbox) checkout() *isolate.Checkout {
	if s.rec.Isolate == nil {
		return nil
	}
	return &isolate.Checkout{Name: s.name, Dir: s.dir, Workspace: s.rec.Config.Workspace, Record: s.rec.Isolate}
}

// Changes lists the files of the sandbox's isolated checkout that differ
// from its base commit, committed in the sandbox or not (untracked files
// that .gitignore does not ignore count), below paths (all when empty).
// Nothing in the checkout is run: every file is read below it with a
// bound (GitLimits), and no symlink is followed.
func (s *Sandbox) Changes(ctx context.Context, paths ...string) (_ []Change, err error) {
	defer func() { err = isolateError(err) }()
	c := s.checkout()
	if c == nil {
		return nil, fmt.Errorf("%s: %w", s.name, ErrNotIsolated)
	}
	changes, err := c.Changes(ctx, paths)
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, ch := range changes {
		out = append(out, Change(ch))
	}
	return out, nil
}

// Diff writes the difference between the sandbox's base commit and its
// isolated checkout now, as git diff does (a unified patch with a/ and b/
// paths, or with opts.Stat a summary), for the files Changes lists.
//
// The files are read and diffed one at a time, and written (or counted,
// for the summary) before the next is read: at most GitLimits.DiffBytes
// in all, the sizes of every file's two sides checked before any is
// read.
func (s *Sandbox) Diff(ctx context.Context, out io.Writer, opts DiffOptions) (err error) {
	defer func() { err = isolateError(err) }()
	c := s.checkout()
	if c == nil {
		return fmt.Errorf("%s: %w", s.name, ErrNotIsolated)
	}
	return c.Diff(ctx, out, opts.Paths, opts.Stat)
}

// Land makes the work of the sandbox's isolated checkout a branch
// krunbox/NAME of the user's repository: the sandbox's commits over its
// base and, when files are not committed, one more commit of them; with
// opts.Squash, one commit of it all on the base. Nothing else of the
// user's repository changes: no checkout, no merge, no other ref.
//
// The guest's repository is read as Diff reads it. Every object is
// verified before any is written (its content hashes to its name; a
// commit and a tree decode; a tree names no path git refuses, such as
// .git or ..), at most 2 GiB in all; a corrupt or oversized
// object leaves the user's repository as it was. A branch krunbox/NAME
// that krunbox did not make, or that moved since, is refused.
func (s *Sandbox) Land(ctx context.Context, opts LandOptions) (_ *Landed, err error) {
	defer func() { err = isolateError(err) }()
	c := s.checkout()
	if c == nil {
		return nil, fmt.Errorf("%s: %w", s.name, ErrNotIsolated)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	l, err := c.Land(ctx, opts.Squash)
	if err != nil {
		return nil, err
	}
	return (*Landed)(l), nil
}

// Unlanded reports whether the sandbox's isolated checkout holds work
// that Land has not put in the user's repository: files that differ
// from its base, in a state not landed last. It is false for a sandbox
// that is not isolated.
func (s *Sandbox) Unlanded(ctx context.Context) (_ bool, err error) {
	defer func() { err = isolateError(err) }()
	c := s.checkout()
	if c == nil {
		return false, nil
	}
	return c.Unlanded(ctx)
}

// Export copies the files and directories paths (relative to the
// project, or absolute below it) of the sandbox's isolated checkout, as
// they are now, into the new directory dir, which must not exist. They
// are read below the checkout, at most 8 GiB in all, with no
// symlink followed; a symlink is not copied (it is listed in the error)
// and neither is anything but regular files and directories (nor the
// checkout's .git).
func (s *Sandbox) Export(ctx context.Context, dir string, paths ...string) error {
	c := s.checkout()
	if c == nil {
		return fmt.Errorf("export from %s: %w", s.name, ErrNotIsolated)
	}
	return c.Export(ctx, dir, paths)
}

// GitLimits bounds the work krunbox does on an isolated checkout, whose
// repository and files the guest writes: what Changes (krunbox
// workspaces), Diff, Land and Unlanded read. A zero field takes its
// default. The defaults are far above what git writes for a large
// repository (100k files, paths of a few hundred bytes, gigabytes of
// history) and low enough that a hostile .git costs a laptop seconds and
// at most a few hundred MB.
type GitLimits struct {
	// Files bounds the entries of the index, the files and directories
	// of the checkout walked and the entries of one commit's tree
	// walked: 1 Mi by default.
	Files int
	// PathBytes bounds one path (and so each of its names) of the index,
	// of a tree or of the checkout: 4096 bytes by default, git's PATH_MAX.
	PathBytes int
	// TreeDepth bounds the directories a path of a tree goes through:
	// 2048 by default, git's core.maxTreeDepth.
	TreeDepth int
	// PathsBytes bounds the bytes of all the paths of the index, of the
	// checkout or of one commit's tree (and, apart, of the tree objects
	// read for it): 128 MiB by default (1 Mi paths of 128 bytes).
	PathsBytes int64
	// IgnoreBytes bounds the bytes of the ignore files (.gitignore,
	// .git/info/exclude) one walk of the checkout reads: 1 MiB by
	// default.
	IgnoreBytes int64
	// IgnoreMatches bounds the times one walk of the checkout tries an
	// ignore pattern on a path not tracked: 4 Mi by default (50k paths
	// under 80 patterns each), at most a second or two (go-git takes 0.3
	// to 0.7 µs a try).
	IgnoreMatches int64
	// HashBytes bounds the bytes of the files one walk of the checkout
	// hashes (those not tracked, or changed since the index was
	// written; each at most 256 MiB): 512 MiB by default, a few seconds
	// (go-git's SHA-1, which detects collisions, hashes 100 to 250 MB/s).
	HashBytes int64
	// DiffBytes bounds the bytes of the files one Diff reads, both sides
	// of every file changed: 256 MiB by default, a patch no one reads
	// whole (naming paths narrows a diff to fewer files).
	DiffBytes int64
	// DiffTime bounds the time one Diff spends finding the smallest
	// patch of its files: 10 s by default. Past it, a file's change is
	// written as the deletion of all its lines and the insertion of all
	// the new ones: a correct patch, only a longer one.
	DiffTime time.Duration
}

// DefaultGitLimits returns the default GitLimits.
func DefaultGitLimits() GitLimits { return GitLimits(isolate.DefaultLimits()) }

// GitLimitError reports an isolated checkout beyond one of its
// GitLimits. It matches confine.ErrTooLarge.
type GitLimitError struct {
	// What crossed the bound, e.g. "entry 65 names a path of 4097
	// bytes or more".
	What string
	// Limit is the GitLimits field, e.g. "PathBytes", and Max its value.
	Limit string
	Max   int64
}

func (e *GitLimitError) Error() string { return (*isolate.LimitError)(e).Error() }

// Is makes errors.Is(err, confine.ErrTooLarge) true.
func (e *GitLimitError) Is(target error) bool { return target == confine.ErrTooLarge }

// Hint tells the user what to do.
func (e *GitLimitError) Hint() string {
	switch e.Limit {
	case "DiffBytes":
		return "name some of its paths (krunbox diff NAME PATH...) to see part of it"
	case "IgnoreMatches", "HashBytes":
		return "files the sandbox's index does not hold are read at every look: commit them in the sandbox, " +
			"ignore them (.gitignore) or remove them"
	}
	return "no repository git writes comes near this bound: the sandbox's repository is damaged or hostile; " +
		"reset it in the sandbox (git reset), or remove the sandbox"
}

// gitLimitError is an error of an isolated checkout that crossed one of
// its bounds: it reads as the error it wraps, and matches the
// *GitLimitError of the bound.
type gitLimitError struct {
	err error
	lim *GitLimitError
}

func (e *gitLimitError) Error() string   { return e.err.Error() }
func (e *gitLimitError) Unwrap() []error { return []error{e.lim, e.err} }

// isolateError returns err, an error of package isolate, as hostapi's: a
// bound of isolate.Limits crossed matches *GitLimitError. A nil err is
// nil.
func isolateError(err error) error {
	var le *isolate.LimitError
	if !errors.As(err, &le) {
		return err
	}
	return &gitLimitError{err: err, lim: (*GitLimitError)(le)}
}

// prepareIsolated makes the isolated checkout of the sandbox rec names in
// its directory dir (not yet published), as isolate.Prepare says.
func prepareIsolated(ctx context.Context, dir string, rec *record) error {
	return isolate.Prepare(ctx, dir, rec.Isolate)
}

// isolatedMounts returns the shares of an isolated sandbox in the
// directory dir: its checkout at the project's path, its base objects
// read-only.
func isolatedMounts(dir, project string) []Mount {
	return []Mount{
		{HostPath: filepath.Join(dir, isolate.WorkspaceDir), GuestPath: project},
		{HostPath: filepath.Join(dir, isolate.BaseDir), GuestPath: isolate.BaseGuest, ReadOnly: true},
	}
}

// ownMounts returns the sandbox's mounts but those of its own directory
// (an isolated checkout and its base objects, first), which lie in
// krunbox's state by design and in which the host's git never runs.
func (s *Sandbox) ownMounts() []Mount {
	if s.rec.Isolate == nil || len(s.rec.Mounts) < 2 {
		return s.rec.Mounts
	}
	return s.rec.Mounts[2:]
}

// isolatedSandboxMounts checks the workspace of an isolated cfg (the top
// of a git checkout), sets cfg.Workspace to its resolved path and returns
// cfg's other mounts, resolved: the sandbox's own shares are added once
// its directory is known.
func isolatedSandboxMounts(cfg *Config) ([]Mount, error) {
	abs, err := filepath.Abs(cfg.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	ws, err := resolveMount(Mount{HostPath: abs, GuestPath: abs})
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	cfg.Workspace = abs
	if _, _, err := isolate.FindRepo(ws.HostPath); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	mounts, err := resolveMounts(cfg.Mounts)
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		for _, g := range []string{abs, filepath.Dir(isolate.BaseGuest)} {
			if confine.Within(m.GuestPath, g) || confine.Within(g, m.GuestPath) {
				return nil, fmt.Errorf("%w: %s overlaps in the guest, at %s, with the isolated checkout at %s", ErrInvalidMount, m.HostPath, m.GuestPath, g)
			}
		}
	}
	return mounts, nil
}
