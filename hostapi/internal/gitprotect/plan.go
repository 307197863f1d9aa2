package gitprotect

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/krunbox/krunbox/hostapi/internal/gitconf"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/confine"
)

// Bounds of what plan walks: git directories (submodules nest), and
// protected paths in all.
const (
	maxGitDirs       = 1024
	maxGitProtected  = 4096
	maxGitModuleTree = 16 // depth of directories under modules/
)

// plan returns what must be protected so that the host's git runs
// nothing the guest wrote: in every git directory of the checkouts of
// shares (the read-write shares' host paths) (the workspace's .git, a worktree's own git directory
// and its repository's common directory, submodules' directories under
// modules/), the hooks/ directory, config and config.worktree read-only,
// the git directory itself pinned (so that it cannot be renamed away and
// replaced), a checkout's .git file read-only, and the core.hooksPath
// directories and included config files those configs name inside a
// share. A missing hooks/ (and a missing file git would read) is created
// empty first, else the guest could create it. The paths are sorted, so a
// directory comes before what it holds. Nothing is followed through a
// symlink: a hooks/, config or .git that is one is refused.
//
// It reads only what the host's git would read, bounded; paths outside
// shares are left alone (the guest cannot write them).
func plan(shares []string) ([]vmm.Protect, error) {
	p := &planner{shares: shares, seen: map[string]bool{}}
	for _, sh := range p.shares {
		if err := p.checkout(sh); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(p.out, func(a, b vmm.Protect) int { return strings.Compare(a.Path, b.Path) })
	return p.out, nil
}

type planner struct {
	shares []string
	seen   map[string]bool // git directories and paths done
	dirs   int
	out    []vmm.Protect
}

// share returns the read-write share holding path, or "".
func (p *planner) share(path string) string {
	for _, sh := range p.shares {
		if confine.Within(sh, path) {
			return sh
		}
	}
	return ""
}

// add protects path, if a share holds it.
func (p *planner) add(path string, writable bool) error {
	sh := p.share(path)
	if sh == "" || p.seen[path] || (writable && path == sh) {
		return nil // out of reach, done, or a share's root: the guest cannot rename it
	}
	if len(p.out) >= maxGitProtected {
		return fmt.Errorf("more than %d paths of git directories to protect", maxGitProtected)
	}
	p.seen[path] = true
	p.out = append(p.out, vmm.Protect{Path: path, Writable: writable})
	return nil
}

// checkout protects the git directories of the checkout (work tree) at
// dir, if it is one.
func (p *planner) checkout(dir string) error {
	dotgit := filepath.Join(dir, ".git")
	fi, err := confine.LstatNoSymlinks(dotgit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return p.gitDir(dotgit, dir, false)
	case fi.Mode().Type() == fs.ModeSymlink:
		return &protectError{fmt.Errorf("%s is a symlink: git would run the hooks and config of whatever it points to, which cannot be protected", dotgit)}
	case !fi.Mode().IsRegular():
		return &protectError{fmt.Errorf("%s is %v, neither a git directory nor a .git file", dotgit, fi.Mode().Type())}
	}
	if err := p.add(dotgit, false); err != nil {
		return err
	}
	b, err := confine.ReadFileNoSymlinks(dotgit, confine.DefaultMaxRead)
	if err != nil {
		return &protectError{fmt.Errorf("read %s: %w", dotgit, err)}
	}
	gitdir, ok := gitconf.Gitdir(b)
	if !ok {
		return nil // not a .git file git reads: git ignores it
	}
	if gitdir, err = p.resolve(dir, gitdir); err != nil {
		return err
	}
	if gitdir == "" {
		return nil // points nowhere: git finds no repository
	}
	common := ""
	if b, err := confine.ReadFileNoSymlinks(filepath.Join(gitdir, "commondir"), confine.DefaultMaxRead); err == nil {
		if common, err = p.resolve(gitdir, strings.TrimSpace(string(b))); err != nil {
			return err
		}
	}
	if common == "" {
		return p.gitDir(gitdir, dir, false) // a submodule's or a separate git directory
	}
	if err := p.gitDir(common, dir, false); err != nil {
		return err
	}
	return p.gitDir(gitdir, dir, true)
}

// resolve resolves the path p that git follows (relative to dir when
// not absolute) to what it names now, or "" when it names nothing. Inside
// a share it may not go through a symlink: the guest could point that
// elsewhere once the start has protected what it named.
func (p *planner) resolve(dir, path string) (string, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	path = filepath.Clean(path)
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", nil
	}
	if real != path && p.share(path) != "" {
		return "", &protectError{fmt.Errorf("git follows %s, which goes through a symlink in a share: the guest could point it elsewhere", path)}
	}
	return real, nil
}

// gitDir protects the git directory g, whose checkout is at checkout:
// only its config.worktree for a worktree's own directory (its hooks and
// config are the common directory's), else its hooks/, config,
// config.worktree and its submodules' directories.
func (p *planner) gitDir(g, checkout string, worktreeOnly bool) error {
	if p.share(g) == "" || p.seen[g+"/"] {
		return nil
	}
	p.seen[g+"/"] = true
	if p.dirs++; p.dirs > maxGitDirs {
		return fmt.Errorf("more than %d git directories to protect", maxGitDirs)
	}
	root, err := confine.OpenRootNoSymlinks(g)
	if err != nil {
		return &protectError{fmt.Errorf("git directory %s: %w", g, err)}
	}
	defer root.Close()
	if err := p.add(g, true); err != nil {
		return err
	}
	var entries []gitconf.Entry
	worktreeConfig := false
	if !worktreeOnly {
		if err := confine.MkdirAll(root, "hooks", 0o755, false); err != nil {
			return &protectError{fmt.Errorf("hooks of %s: %w", g, err)}
		}
		if err := p.add(filepath.Join(g, "hooks"), false); err != nil {
			return err
		}
		b, err := p.file(root, g, "config", true)
		if err != nil {
			return err
		}
		entries = gitconf.Parse(b)
		if v, ok := gitconf.Last(entries, "extensions", "", "worktreeconfig"); ok {
			worktreeConfig = gitconf.Bool(v)
		}
	} else if b, err := confine.ReadFileNoSymlinks(filepath.Join(g, "commondir"), confine.DefaultMaxRead); err == nil {
		// Whether the common directory asks for config.worktree.
		if common, err := gitconf.Resolve(g, strings.TrimSpace(string(b))); err == nil {
			if c, err := confine.ReadFileNoSymlinks(filepath.Join(common, "config"), confine.DefaultMaxRead); err == nil {
				if v, ok := gitconf.Last(gitconf.Parse(c), "extensions", "", "worktreeconfig"); ok {
					worktreeConfig = gitconf.Bool(v)
				}
			}
		}
	}
	b, err := p.file(root, g, "config.worktree", worktreeConfig)
	if err != nil {
		return err
	}
	entries = append(entries, gitconf.Parse(b)...)
	if err := p.named(entries, g, checkout); err != nil {
		return err
	}
	if worktreeOnly {
		return nil
	}
	return p.modules(root, g, "modules", 0)
}

// file protects the file name of the git directory g (open as root) and
// returns its content: when it is missing, it is created empty if create
// is true (git would read it) and left alone otherwise (git ignores it).
// A symlink or anything but a regular file is refused.
func (p *planner) file(root *os.Root, g, name string, create bool) ([]byte, error) {
	b, err := confine.ReadFile(root, name, confine.DefaultMaxRead)
	if errors.Is(err, fs.ErrNotExist) {
		if !create {
			return nil, nil
		}
		if err := createEmpty(root, name); err != nil {
			return nil, &protectError{fmt.Errorf("create an empty %s in %s: %w", name, g, err)}
		}
	} else if err != nil {
		return nil, &protectError{fmt.Errorf("%s of %s: %w", name, g, notRegularHint(err))}
	}
	return b, p.add(filepath.Join(g, name), false)
}

// named protects what the config entries of git directory g name inside
// a share: core.hooksPath directories (relative to the checkout) and
// included files (relative to g); each is created empty when missing.
func (p *planner) named(entries []gitconf.Entry, g, checkout string) error {
	for _, v := range gitconf.Values(entries, "core", "", "hookspath") {
		if err := p.namedPath(expandHome(v, checkout), true); err != nil {
			return fmt.Errorf("core.hooksPath of %s: %w", g, err)
		}
	}
	includes := append(gitconf.Values(entries, "include", "", "path"), gitconf.Values(entries, "includeif", "*", "path")...)
	for _, v := range includes {
		if err := p.namedPath(expandHome(v, g), false); err != nil {
			return fmt.Errorf("included config of %s: %w", g, err)
		}
	}
	return nil
}

// namedPath protects the directory (dir true) or file at the absolute
// path path when a share holds it. Within a share it may not go through a
// symlink (the guest could point that elsewhere: confine.MkdirAll and
// ReadFile refuse one); a path outside them that leads into one through
// the host's symlinks is taken resolved.
func (p *planner) namedPath(path string, dir bool) error {
	if !filepath.IsAbs(path) {
		return nil // relative to a checkout git has not got
	}
	path = filepath.Clean(path)
	sh := p.share(path)
	if sh == "" {
		real, err := filepath.EvalSymlinks(path)
		if err != nil || p.share(real) == "" {
			return nil // out of the guest's reach
		}
		path, sh = real, p.share(real)
	}
	if p.seen[path] {
		return nil
	}
	rel, err := filepath.Rel(sh, path)
	if err != nil {
		return err
	}
	root, err := confine.OpenRootNoSymlinks(sh)
	if err != nil {
		return err
	}
	defer root.Close()
	if dir {
		if err := confine.MkdirAll(root, rel, 0o755, false); err != nil {
			return &protectError{err}
		}
	} else {
		if err := confine.MkdirAll(root, filepath.Dir(rel), 0o755, false); err != nil {
			return &protectError{err}
		}
		if _, err := confine.ReadFile(root, rel, confine.DefaultMaxRead); errors.Is(err, fs.ErrNotExist) {
			if err := createEmpty(root, rel); err != nil {
				return err
			}
		} else if err != nil {
			return &protectError{notRegularHint(err)}
		}
	}
	return p.add(path, false)
}

// modules protects the submodules' git directories under dir (relative to
// the git directory g): a directory holding a HEAD file is one (with its
// own modules/), any other is a level of a submodule's name.
func (p *planner) modules(root *os.Root, g, dir string, depth int) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &protectError{fmt.Errorf("submodules of %s: %w", g, err)}
	}
	ents, err := f.ReadDir(maxGitDirs + 1)
	f.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return &protectError{fmt.Errorf("submodules of %s: %w", g, err)}
	}
	if len(ents) > maxGitDirs || depth > maxGitModuleTree {
		return fmt.Errorf("submodules of %s: more than %d entries or %d levels", g, maxGitDirs, maxGitModuleTree)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue // a symlink among them is not a git directory git uses
		}
		name := filepath.Join(dir, e.Name())
		fi, err := root.Lstat(filepath.Join(name, "HEAD"))
		if err != nil || !fi.Mode().IsRegular() {
			if err := p.modules(root, g, name, depth+1); err != nil {
				return err
			}
			continue
		}
		mg := filepath.Join(g, name)
		checkout := ""
		if b, err := confine.ReadFile(root, filepath.Join(name, "config"), confine.DefaultMaxRead); err == nil {
			if wt, ok := gitconf.Last(gitconf.Parse(b), "core", "", "worktree"); ok {
				checkout = expandHome(wt, mg)
			}
		}
		if err := p.gitDir(mg, checkout, false); err != nil {
			return err
		}
		// The submodule's checkout has a .git file naming mg: the guest
		// must not point it elsewhere.
		if checkout != "" {
			dotgit := filepath.Join(filepath.Clean(checkout), ".git")
			fi, err := confine.LstatNoSymlinks(dotgit)
			switch {
			case err == nil && fi.Mode().IsRegular():
				if err := p.add(dotgit, false); err != nil {
					return err
				}
			case err != nil && !errors.Is(err, fs.ErrNotExist) && p.share(dotgit) != "":
				return &protectError{fmt.Errorf("submodule checkout of %s: %w", mg, err)}
			}
		}
	}
	return nil
}

// createEmpty creates the empty file name below root; it must not exist.
func createEmpty(root *os.Root, name string) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// expandHome makes a path from a git config absolute: "~/" is the home
// directory, a relative path is relative to base.
func expandHome(v, base string) string {
	if rest, ok := strings.CutPrefix(v, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	if filepath.IsAbs(v) {
		return v
	}
	return filepath.Join(base, v)
}

// notRegularHint says that a symlink (or FIFO...) is not followed.
func notRegularHint(err error) error {
	if errors.Is(err, confine.ErrNotRegular) || errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%w: the host's git would follow it, so it cannot be protected", err)
	}
	return err
}

// protectError refuses a git directory that cannot be protected.
type protectError struct{ err error }

func (e *protectError) Error() string { return e.err.Error() }
func (e *protectError) Unwrap() error { return e.err }

// Hint says what to do.
func (e *protectError) Hint() string {
	return "replace what is there by a real git directory, .git file, hooks directory or config file (or remove it), or let the guest change git's hooks and config with --git-writable"
}
