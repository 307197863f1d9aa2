package gitprotect

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"github.com/krunbox/krunbox/hostapi/internal/gitconf"
	"github.com/krunbox/krunbox/internal/confine"
)

// DirsOutside returns the git directories that a checkout at workspace
// needs but that lie outside it: the worktree's own git directory and the
// repository's common directory for a "git worktree", or the module
// directory for a submodule. It returns nothing for an ordinary checkout
// (its .git is inside) or a directory that is not a checkout. workspace is
// absolute with symlinks resolved.
//
// Same-path mounting makes the absolute "gitdir:" pointer of a worktree
// resolve in the guest, provided those directories are shared too.
//
// The .git file is in the workspace, which the guest can write: it must not
// be able to name any host directory and have it shared at the next start.
// A directory outside is shared only when git's own records lead back
// from it to this checkout (a worktree's "gitdir" file, a submodule's
// core.worktree), and a common directory only when it holds that worktree
// under its worktrees/ directory; anything else is refused. Every file is
// read with a bound (confine.DefaultMaxRead), with no symlink on the way
// to the directories resolved, and one that is not a regular file (a
// FIFO, a device) is refused without blocking.
func DirsOutside(workspace string) ([]string, error) {
	ws, err := confine.OpenRootNoSymlinks(workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	defer ws.Close()
	dotgit := filepath.Join(workspace, ".git")
	if fi, err := ws.Lstat(".git"); err != nil || !fi.Mode().IsRegular() {
		return nil, nil // no .git, or an ordinary .git directory inside
	}
	b, err := confine.ReadFile(ws, ".git", confine.DefaultMaxRead)
	if err != nil {
		return nil, fmt.Errorf("read the .git file: %w", err)
	}
	gitdir, err := gitconf.GitdirLine(dotgit, b)
	if err != nil {
		return nil, err
	}
	if gitdir, err = gitconf.Resolve(workspace, gitdir); err != nil {
		return nil, fmt.Errorf("git directory of %s: %w", workspace, err)
	}
	if confine.Within(workspace, gitdir) {
		return nil, nil
	}
	back, err := leadsBack(gitdir, workspace)
	if err != nil {
		return nil, fmt.Errorf("git directory %s of %s: %w", gitdir, workspace, err)
	}
	if !back {
		return nil, &dirError{fmt.Errorf("%s names %s as its git directory, which does not belong to this checkout (nothing there leads back to it): not sharing it", dotgit, gitdir)}
	}
	dirs := []string{gitdir}
	b, err = confine.ReadFileNoSymlinks(filepath.Join(gitdir, "commondir"), confine.DefaultMaxRead)
	switch {
	case err == nil:
		common, err := gitconf.Resolve(gitdir, strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("git common directory of %s: %w", workspace, err)
		}
		if filepath.Dir(gitdir) != filepath.Join(common, "worktrees") || !isFile(filepath.Join(common, "HEAD")) {
			return nil, &dirError{fmt.Errorf("git directory %s names %s as its common directory, which does not hold it as a worktree: not sharing it", gitdir, common)}
		}
		dirs = append(dirs, common)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("git common directory of %s: %w", workspace, err)
	}
	var out []string
	for _, d := range dedupeWithin(dirs) {
		if !confine.Within(workspace, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// dirError refuses a git directory that does not belong to the
// workspace.
type dirError struct{ err error }

func (e *dirError) Error() string { return e.err.Error() }
func (e *dirError) Unwrap() error { return e.err }

// Hint says how to repair a worktree whose links are broken.
func (e *dirError) Hint() string {
	return "if this is your worktree, run 'git worktree repair' in it or in its main repository; otherwise remove the .git file"
}

// leadsBack reports whether git's records in gitdir lead back to the
// checkout at workspace: the "gitdir" file of a worktree's git directory
// names the worktree's .git file; core.worktree in a submodule's config
// names its checkout. Those records are read with a bound, and one that
// is not a regular file is an error.
func leadsBack(gitdir, workspace string) (bool, error) {
	b, err := confine.ReadFileNoSymlinks(filepath.Join(gitdir, "gitdir"), confine.DefaultMaxRead)
	if err == nil {
		back, err := gitconf.Resolve(gitdir, strings.TrimSpace(string(b)))
		return err == nil && back == filepath.Join(workspace, ".git"), nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	wt, err := coreWorktree(filepath.Join(gitdir, "config"))
	if err != nil || wt == "" {
		return false, err
	}
	back, err := gitconf.Resolve(gitdir, wt)
	return err == nil && back == workspace, nil
}

// coreWorktree returns core.worktree from a git config file as git reads
// it (its last value), or "" when the file or the key is absent.
func coreWorktree(config string) (string, error) {
	b, err := confine.ReadFileNoSymlinks(config, confine.DefaultMaxRead)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	wt, _ := gitconf.Last(gitconf.Parse(b), "core", "", "worktree")
	return wt, nil
}

// isFile reports whether p, with no symlink on the way, is a regular file
// of at most confine.DefaultMaxRead bytes.
func isFile(p string) bool {
	_, err := confine.ReadFileNoSymlinks(p, confine.DefaultMaxRead)
	return err == nil
}

// dedupeWithin drops the paths that lie within another path of the list.
func dedupeWithin(paths []string) []string {
	slices.Sort(paths)
	paths = slices.Compact(paths)
	var out []string
	for _, p := range paths {
		if len(out) == 0 || !confine.Within(out[len(out)-1], p) {
			out = append(out, p)
		}
	}
	return out
}
