package hostapi

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// gitDirsOutside returns the git directories that a checkout at workspace
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
// under its worktrees/ directory; anything else is refused.
func gitDirsOutside(workspace string) ([]string, error) {
	dotgit := filepath.Join(workspace, ".git")
	fi, err := os.Lstat(dotgit)
	if err != nil || !fi.Mode().IsRegular() {
		return nil, nil // no .git, or an ordinary .git directory inside
	}
	gitdir, err := readGitdirFile(dotgit)
	if err != nil {
		return nil, err
	}
	if gitdir, err = resolveFrom(workspace, gitdir); err != nil {
		return nil, fmt.Errorf("git directory of %s: %w", workspace, err)
	}
	if within(workspace, gitdir) {
		return nil, nil
	}
	if !leadsBack(gitdir, workspace) {
		return nil, &gitDirError{fmt.Errorf("%s names %s as its git directory, which does not belong to this checkout (nothing there leads back to it): not sharing it", dotgit, gitdir)}
	}
	dirs := []string{gitdir}
	if b, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common, err := resolveFrom(gitdir, strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("git common directory of %s: %w", workspace, err)
		}
		if filepath.Dir(gitdir) != filepath.Join(common, "worktrees") || !isFile(filepath.Join(common, "HEAD")) {
			return nil, &gitDirError{fmt.Errorf("git directory %s names %s as its common directory, which does not hold it as a worktree: not sharing it", gitdir, common)}
		}
		dirs = append(dirs, common)
	}
	var out []string
	for _, d := range dedupeWithin(dirs) {
		if !within(workspace, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// gitDirError refuses a git directory that does not belong to the
// workspace.
type gitDirError struct{ err error }

func (e *gitDirError) Error() string { return e.err.Error() }
func (e *gitDirError) Unwrap() error { return e.err }

// Hint says how to repair a worktree whose links are broken.
func (e *gitDirError) Hint() string {
	return "if this is your worktree, run 'git worktree repair' in it or in its main repository; otherwise remove the .git file"
}

// leadsBack reports whether git's records in gitdir lead back to the
// checkout at workspace: the "gitdir" file of a worktree's git directory
// names the worktree's .git file; core.worktree in a submodule's config
// names its checkout.
func leadsBack(gitdir, workspace string) bool {
	if b, err := os.ReadFile(filepath.Join(gitdir, "gitdir")); err == nil {
		back, err := resolveFrom(gitdir, strings.TrimSpace(string(b)))
		return err == nil && back == filepath.Join(workspace, ".git")
	}
	if wt := coreWorktree(filepath.Join(gitdir, "config")); wt != "" {
		back, err := resolveFrom(gitdir, wt)
		return err == nil && back == workspace
	}
	return false
}

// coreWorktree returns core.worktree from a git config file, or "".
func coreWorktree(config string) string {
	b, err := os.ReadFile(config)
	if err != nil {
		return ""
	}
	inCore := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			inCore = strings.EqualFold(strings.Trim(line, "[] \t"), "core")
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if inCore && ok && strings.EqualFold(strings.TrimSpace(key), "worktree") {
			return strings.Trim(strings.TrimSpace(value), `"`)
		}
	}
	return ""
}

// resolveFrom resolves p, relative to dir when not absolute, to an
// absolute path with symlinks resolved.
func resolveFrom(dir, p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty path")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.EvalSymlinks(p)
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// readGitdirFile reads the "gitdir: PATH" line of a .git file.
func readGitdirFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if p, ok := parseGitdirFile(b); ok {
		return p, nil
	}
	return "", fmt.Errorf("%s has no \"gitdir:\" line", path)
}
