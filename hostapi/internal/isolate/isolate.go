// Package isolate makes and reads the isolated checkout of a sandbox: a
// git repository of its own, on a branch krunbox/NAME, whose files are
// those of the HEAD of the user's checkout and whose objects are the
// user's repository's, linked and shared read-only with the guest. The
// guest works in it at the project's path; the host reads its work back
// (Changes, Diff, Unlanded, Export) and lands it as a branch of the
// user's repository (Land), never touching the user's checkout.
//
// The checkout, its repository and everything in them are the guest's,
// hostile to the host: nothing there is run or obeyed (hooks, filters,
// fsmonitor, config, alternates), every file is read below the checkout
// with a bound and no symlink followed, every object is verified before
// it reaches the user's repository, and the work of reading them is
// bounded by Limits. The user's repository is read with go-git only;
// where the host's git writes the checkout's files, it does so before any
// guest has seen them, under a configuration of krunbox's alone.
package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/filesystem/dotgit"
	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi/internal/gitconf"
	"github.com/krunbox/krunbox/hostapi/internal/gitfs"
	"github.com/krunbox/krunbox/internal/confine"
)

// Files of an isolated sandbox's directory.
const (
	// WorkspaceDir is its checkout, shared at the project's path.
	WorkspaceDir = "workspace"
	// BaseDir holds the objects of its base, shared read-only at
	// BaseGuest.
	BaseDir    = "base/objects"
	landedFile = "landed" // the commit and tree last landed
)

// BaseGuest is where the guest sees the base objects; the checkout's
// objects/info/alternates names it.
const BaseGuest = "/.krunbox-base/objects"

// Record is what an isolated sandbox records of its checkout.
type Record struct {
	// Project is the user's checkout (resolved), the guest path of the
	// sandbox's checkout.
	Project string `json:"project"`
	// GitDir and CommonDir are the git directory of the user's checkout
	// and its repository's common directory (the same but for a worktree).
	GitDir    string `json:"git_dir"`
	CommonDir string `json:"common_dir"`
	// Base is the commit the checkout was made from.
	Base string `json:"base"`
	// Branch is the branch of the checkout, krunbox/NAME.
	Branch string `json:"branch"`
}

// Checkout is the isolated checkout of one sandbox, as the host reads
// and lands it.
type Checkout struct {
	// Name is the sandbox's: errors, and the commits Land makes, name it.
	Name string
	// Dir is the sandbox's directory, which Prepare filled.
	Dir string
	// Workspace is the project's absolute path as the sandbox's
	// configuration names it: paths below it, as below Record.Project,
	// are the project's.
	Workspace string
	// Record is what Prepare recorded.
	Record *Record
	// Limits bounds the work of reading the checkout; a zero field takes
	// its default.
	Limits Limits
}

// path returns the file name of the sandbox's directory.
func (c *Checkout) path(name string) string { return filepath.Join(c.Dir, name) }

// FindRepo finds the git directories of the user's checkout at project
// (resolved): its .git directory, or the directories a .git file names (a
// worktree's, with its commondir). Every file is read bounded, with no
// symlink on the way.
func FindRepo(project string) (gitDir, common string, err error) {
	dotgit := filepath.Join(project, ".git")
	fi, err := confine.LstatNoSymlinks(dotgit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", "", fmt.Errorf("%s is not the top of a git checkout (no .git): an isolated workspace is a checkout of its HEAD", project)
	case err != nil:
		return "", "", err
	case fi.IsDir():
		return dotgit, dotgit, nil
	case !fi.Mode().IsRegular():
		return "", "", fmt.Errorf("%s is %v, neither a git directory nor a .git file", dotgit, fi.Mode().Type())
	}
	b, err := confine.ReadFileNoSymlinks(dotgit, confine.DefaultMaxRead)
	if err != nil {
		return "", "", err
	}
	g, err := gitconf.GitdirLine(dotgit, b)
	if err != nil {
		return "", "", err
	}
	if gitDir, err = gitconf.Resolve(project, g); err != nil {
		return "", "", fmt.Errorf("git directory of %s: %w", project, err)
	}
	common = gitDir
	b, err = confine.ReadFileNoSymlinks(filepath.Join(gitDir, "commondir"), confine.DefaultMaxRead)
	switch {
	case err == nil:
		if common, err = gitconf.Resolve(gitDir, strings.TrimSpace(string(b))); err != nil {
			return "", "", fmt.Errorf("git common directory of %s: %w", project, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", "", err
	}
	return gitDir, common, nil
}

// gitStorage is a go-git storage of a git directory read through gitfs
// (confined, bounded, no alternates), with its close.
type gitStorage struct {
	*filesystem.Storage
	closers []*gitfs.FS
}

func (g *gitStorage) Close() error {
	for _, c := range g.closers {
		c.Close()
	}
	return nil
}

// openGitStorage opens the git directory gitDir, whose common directory
// is common (the same for an ordinary repository), with go-git through
// gitfs: nothing it reads is run, and its config is not read. Objects
// over lazy bytes are read only when their content is (see layered):
// with lazy 1, none is read whole by go-git itself, so that a loose
// object's stream longer than the size it says cannot fill memory.
func openGitStorage(gitDir, common string, lazy int64) (*gitStorage, error) {
	g, err := gitfs.Open(gitDir)
	if err != nil {
		return nil, err
	}
	st := &gitStorage{closers: []*gitfs.FS{g}}
	var fsys billy.Filesystem = g
	if common != gitDir {
		c, err := gitfs.Open(common)
		if err != nil {
			g.Close()
			return nil, err
		}
		st.closers = append(st.closers, c)
		fsys = dotgit.NewRepositoryFilesystem(g, c)
	}
	st.Storage = filesystem.NewStorageWithOptions(fsys, cache.NewObjectLRUDefault(), filesystem.Options{LargeObjectThreshold: lazy})
	return st, nil
}

// checkObjectFormat refuses a repository go-git cannot read: SHA-256
// objects, reftable refs.
func checkObjectFormat(common string) error {
	b, err := confine.ReadFileNoSymlinks(filepath.Join(common, "config"), confine.DefaultMaxRead)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	entries := gitconf.Parse(b)
	for _, v := range gitconf.Values(entries, "extensions", "", "objectformat") {
		if !strings.EqualFold(v, "sha1") {
			return fmt.Errorf("repository %s uses %s objects: isolated workspaces support SHA-1 repositories only", common, v)
		}
	}
	for _, v := range gitconf.Values(entries, "extensions", "", "refstorage") {
		if !strings.EqualFold(v, "files") {
			return fmt.Errorf("repository %s keeps its refs in %s: isolated workspaces support the files backend only", common, v)
		}
	}
	return nil
}

// headCommit returns the commit HEAD of st points to.
func headCommit(st storer.Storer) (*object.Commit, error) {
	ref, err := storer.ResolveReference(st, plumbing.HEAD)
	if err != nil {
		return nil, fmt.Errorf("HEAD: %w", err)
	}
	c, err := object.GetCommit(st, ref.Hash())
	if err != nil {
		return nil, fmt.Errorf("HEAD %s: %w", ref.Hash(), err)
	}
	return c, nil
}

// gitBinary is the host's git that writes an isolated checkout's files,
// when found on PATH: faster than writeCheckout (C's zlib, parallel
// checkout), and run only as hostGit says. Empty means writeCheckout
// always (tests).
var gitBinary = "git"

// Prepare makes the isolated checkout that iso describes (its Project,
// GitDir, CommonDir and Branch) in the sandbox's directory dir (not yet
// published), and sets iso.Base: the objects of the user's repository
// linked (copied where links cannot be) into dir/base/objects, and
// dir/workspace, a new repository on branch iso.Branch whose files are
// those of the user's HEAD and whose objects/info/alternates names the
// base objects where the guest sees them.
//
// The user's repository is read with go-git only (its HEAD, its objects):
// nothing of its config, hooks or attributes is used. The files are
// written by writeCheckout (go-git) or, where the host has git, by the
// host's git in the repository just made, before any guest has seen it,
// under a configuration that is krunbox's alone (no system, global or
// repository config of the user's, no hooks, no fsmonitor): a
// .gitattributes of the commit can name a filter, but no driver is
// configured, so none runs.
func Prepare(ctx context.Context, dir string, iso *Record) error {
	if err := checkObjectFormat(iso.CommonDir); err != nil {
		return err
	}
	st, err := openGitStorage(iso.GitDir, iso.CommonDir, 1<<20)
	if err != nil {
		return fmt.Errorf("open the repository of %s: %w", iso.Project, err)
	}
	defer st.Close()
	head, err := headCommit(st)
	if err != nil {
		return fmt.Errorf("repository of %s: %w", iso.Project, err)
	}
	iso.Base = head.Hash.String()
	base := filepath.Join(dir, BaseDir)
	if err := linkObjects(filepath.Join(iso.CommonDir, "objects"), base); err != nil {
		return fmt.Errorf("share the objects of %s: %w", iso.Project, err)
	}
	ws := filepath.Join(dir, WorkspaceDir)
	if err := initRepo(ws, iso); err != nil {
		return err
	}
	if git, err := exec.LookPath(gitBinary); gitBinary != "" && err == nil {
		err = hostGit(ctx, git, ws, base, "read-tree", "-u", "--reset", iso.Base)
		if err != nil {
			return fmt.Errorf("check out %s of %s: %w", iso.Base, iso.Project, err)
		}
	} else {
		open := func() (*gitStorage, error) { return openGitStorage(iso.GitDir, iso.CommonDir, 1<<20) }
		if err := writeCheckout(ctx, open, head, ws); err != nil {
			return fmt.Errorf("check out %s of %s: %w", iso.Base, iso.Project, err)
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return err
	}
	defer root.Close()
	return confine.WriteFile(root, ".git/objects/info/alternates", []byte(BaseGuest+"\n"), 0o644)
}

// initRepo makes the repository of an isolated checkout at ws: on its
// branch, at its base, with a config of krunbox's.
func initRepo(ws string, iso *Record) error {
	git := filepath.Join(ws, ".git")
	for _, d := range []string{"objects/info", "objects/pack", "refs/tags", "info", filepath.Dir("refs/heads/" + iso.Branch)} {
		if err := os.MkdirAll(filepath.Join(git, d), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []struct{ name, data string }{
		{"HEAD", "ref: refs/heads/" + iso.Branch + "\n"},
		{"refs/heads/" + iso.Branch, iso.Base + "\n"},
		{"config", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"},
		{"description", "krunbox isolated workspace of " + iso.Project + "\n"},
	} {
		if err := os.WriteFile(filepath.Join(git, f.name), []byte(f.data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// hostGit runs the host's git in the repository at ws that krunbox has
// just made, with the objects at base as an alternate, under a
// configuration that is krunbox's alone: no system or global config (nor
// the user's HOME or XDG directories), no hooks, no fsmonitor, no
// attributes file but the commit's, an environment of PATH alone.
func hostGit(ctx context.Context, git, ws, base string, args ...string) error {
	empty, err := os.MkdirTemp("", "krunbox-git-home-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(empty)
	full := append([]string{
		"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
		"-c", "core.attributesFile=/dev/null", "-c", "core.excludesFile=/dev/null",
		"-c", "checkout.workers=0", "-c", "core.untrackedCache=false",
		"--git-dir=" + filepath.Join(ws, ".git"), "--work-tree=" + ws,
	}, args...)
	cmd := exec.CommandContext(ctx, git, full...)
	cmd.Dir = ws
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + empty, "XDG_CONFIG_HOME=" + empty,
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_REPLACE_OBJECTS=1", "GIT_TERMINAL_PROMPT=0", "LC_ALL=C",
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + base,
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 2048 {
			msg = msg[:2048]
		}
		return fmt.Errorf("git %s: %w: %s", args[0], err, msg)
	}
	return nil
}

// linkObjects makes dst the object store of the repository whose objects
// directory is src: its packs and loose objects hard-linked (git never
// changes them in place, and a link keeps them when the user's git
// removes them), copied where a link cannot be made (another file
// system). Only regular files are taken; nothing is followed through a
// symlink. dst is shared read-only with the guest.
func linkObjects(src, dst string) error {
	from, err := confine.OpenDirNoSymlinks(src)
	if err != nil {
		return err
	}
	defer from.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	to, err := confine.OpenDirNoSymlinks(dst)
	if err != nil {
		return err
	}
	defer to.Close()
	names, err := from.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		loose := len(n) == 2 && isHex(n)
		if !loose && n != "pack" {
			continue
		}
		if err := linkDir(from, to, n, func(f string) bool {
			if loose {
				return len(f) == 38 && isHex(f)
			}
			return strings.HasPrefix(f, "pack-") && (strings.HasSuffix(f, ".pack") || strings.HasSuffix(f, ".idx") || strings.HasSuffix(f, ".rev"))
		}); err != nil {
			return err
		}
	}
	return nil
}

// linkDir links the files of from/name that take accepts into to/name.
func linkDir(from, to *os.File, name string, take func(string) bool) error {
	sfd, err := unix.Openat(int(from.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return nil // not a directory: not git's
		}
		return fmt.Errorf("open %s: %w", name, err)
	}
	sd := os.NewFile(uintptr(sfd), name)
	defer sd.Close()
	if err := unix.Mkdirat(int(to.Fd()), name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	dfd, err := unix.Openat(int(to.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	dd := os.NewFile(uintptr(dfd), name)
	defer dd.Close()
	entries, err := sd.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !take(e.Name()) {
			continue
		}
		err := unix.Linkat(sfd, e.Name(), dfd, e.Name(), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM) {
			err = copyAt(sd, dd, e.Name())
		}
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s/%s: %w", name, e.Name(), err)
		}
	}
	return nil
}

// copyAt copies the regular file name of from into to.
func copyAt(from, to *os.File, name string) error {
	fd, err := unix.Openat(int(from.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	in := os.NewFile(uintptr(fd), name)
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return errors.Join(err, confine.ErrNotRegular)
	}
	ofd, err := unix.Openat(int(to.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(ofd), name)
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
