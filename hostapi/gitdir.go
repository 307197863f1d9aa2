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
	if !filepath.IsAbs(gitdir) {
		gitdir = filepath.Join(workspace, gitdir)
	}
	if gitdir, err = filepath.EvalSymlinks(gitdir); err != nil {
		return nil, fmt.Errorf("git directory of %s: %w", workspace, err)
	}
	dirs := []string{gitdir}
	if b, err := os.ReadFile(filepath.Join(gitdir, "commondir")); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		if common, err = filepath.EvalSymlinks(common); err != nil {
			return nil, fmt.Errorf("git common directory of %s: %w", workspace, err)
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

// readGitdirFile reads the "gitdir: PATH" line of a .git file.
func readGitdirFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "gitdir:"); ok {
			if p := strings.TrimSpace(rest); p != "" {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("%s has no \"gitdir:\" line", path)
}
