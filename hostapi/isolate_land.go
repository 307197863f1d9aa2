package hostapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
)

// Bounds of what Land and Export copy.
const (
	maxLand   = 2 << 30 // bytes of the objects one Land copies (held in memory until verified)
	maxExport = 8 << 30 // bytes of the files one Export copies
)

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

// landRecord is what the last Land made, in the sandbox's directory.
type landRecord struct {
	Commit string `json:"commit"`
	Tree   string `json:"tree"`
}

// copier copies objects of the sandbox's repository into memory, each
// verified: its content hashes to its name, a commit or tree decodes, a
// tree names no path git refuses; only then are they written to the
// user's repository.
type copier struct {
	from  storer.EncodedObjectStorer // the sandbox's
	user  storer.EncodedObjectStorer // the user's, read to skip what it has
	mem   *memory.Storage
	lim   GitLimits
	bytes int64
}

func (c *copier) has(h plumbing.Hash) bool {
	if _, err := c.mem.EncodedObject(plumbing.AnyObject, h); err == nil {
		return true
	}
	return c.user.HasEncodedObject(h) == nil
}

// object copies the object h, expected of type t.
func (c *copier) object(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	b, err := readObject(c.from, t, h, maxBlob)
	if err != nil {
		return nil, err
	}
	return c.put(t, b)
}

// put stores the object of type t and content b.
func (c *copier) put(t plumbing.ObjectType, b []byte) (plumbing.EncodedObject, error) {
	if c.bytes += int64(len(b)); c.bytes > maxLand {
		return nil, fmt.Errorf("%w: the work to land is over %d bytes", confine.ErrTooLarge, maxLand)
	}
	o := c.mem.NewEncodedObject()
	o.SetType(t)
	o.SetSize(int64(len(b)))
	wr, err := o.Writer()
	if err != nil {
		return nil, err
	}
	wr.Write(b)
	wr.Close()
	if _, err := c.mem.SetEncodedObject(o); err != nil {
		return nil, err
	}
	return o, nil
}

// tree copies the tree h, depth directories down, and what it holds
// that the user lacks, refusing a name git refuses (checkTreeName) or
// longer than lim.PathBytes, and a tree deeper than lim.TreeDepth.
func (c *copier) tree(h plumbing.Hash, depth int) error {
	if c.has(h) {
		return nil
	}
	if depth > c.lim.TreeDepth {
		return &GitLimitError{What: fmt.Sprintf("tree %s: %d directories deep", h, depth), Limit: "TreeDepth", Max: int64(c.lim.TreeDepth)}
	}
	o, err := c.object(plumbing.TreeObject, h)
	if err != nil {
		return err
	}
	var t object.Tree
	if err := t.Decode(o); err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	for _, e := range t.Entries {
		if len(e.Name) > c.lim.PathBytes {
			return &GitLimitError{What: fmt.Sprintf("tree %s: a name of %d bytes", h, len(e.Name)), Limit: "PathBytes", Max: int64(c.lim.PathBytes)}
		}
		if err := checkTreeName(e.Name, e.Mode); err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		switch e.Mode {
		case filemode.Dir:
			err = c.tree(e.Hash, depth+1)
		case filemode.Submodule:
		default:
			if !c.has(e.Hash) {
				_, err = c.object(plumbing.BlobObject, e.Hash)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buildTree stores the trees of files (and the blobs of those hashed
// from the checkout) and returns the root tree's hash. A path with a
// name git refuses (checkTreeName) is refused.
func (c *copier) buildTree(w *work, files map[string]entry) (plumbing.Hash, error) {
	type dir struct{ entries []object.TreeEntry }
	dirs := map[string]*dir{".": {}}
	var mk func(string) *dir
	mk = func(p string) *dir {
		if d := dirs[p]; d != nil {
			return d
		}
		d := &dir{}
		dirs[p] = d
		parent := mk(path.Dir(p))
		parent.entries = append(parent.entries, object.TreeEntry{Name: path.Base(p), Mode: filemode.Dir})
		return d
	}
	for p, e := range files {
		if err := checkPath(p, e.Mode); err != nil {
			return plumbing.ZeroHash, err
		}
		switch {
		case e.file:
			b, err := w.blob(p, e, maxBlob)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			if !c.has(e.Hash) {
				if _, err := c.put(plumbing.BlobObject, b); err != nil {
					return plumbing.ZeroHash, err
				}
			}
		case e.Mode != filemode.Submodule && !c.has(e.Hash):
			if _, err := c.object(plumbing.BlobObject, e.Hash); err != nil {
				return plumbing.ZeroHash, err
			}
		}
		d := mk(path.Dir(p))
		d.entries = append(d.entries, object.TreeEntry{Name: path.Base(p), Mode: e.Mode, Hash: e.Hash})
	}
	// Deepest first, so a directory's hash is known before its parent's.
	names := make([]string, 0, len(dirs))
	for p := range dirs {
		names = append(names, p)
	}
	depth := func(p string) int {
		if p == "." {
			return 0
		}
		return strings.Count(p, "/") + 1
	}
	slices.SortFunc(names, func(a, b string) int { return depth(b) - depth(a) })
	hashes := map[string]plumbing.Hash{}
	for _, p := range names {
		d := dirs[p]
		for i, e := range d.entries {
			if e.Mode == filemode.Dir {
				d.entries[i].Hash = hashes[path.Join(p, e.Name)]
			}
		}
		slices.SortFunc(d.entries, func(a, b object.TreeEntry) int { return strings.Compare(treeSortName(a), treeSortName(b)) })
		t := &object.Tree{Entries: d.entries}
		o := c.mem.NewEncodedObject()
		if err := t.Encode(o); err != nil {
			return plumbing.ZeroHash, err
		}
		if _, err := c.mem.SetEncodedObject(o); err != nil {
			return plumbing.ZeroHash, err
		}
		hashes[p] = o.Hash()
	}
	return hashes["."], nil
}

// checkPath refuses the path p of a file of mode m when one of its names
// is one git refuses (checkTreeName).
func checkPath(p string, m filemode.FileMode) error {
	for dir, name := path.Split(p); ; dir, name = path.Split(strings.TrimSuffix(dir, "/")) {
		if err := checkTreeName(name, m); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if dir == "" {
			return nil
		}
		m = filemode.Dir
	}
}

func treeSortName(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// commit stores a commit.
// commit makes the commit of tree on parents, or returns landed's (the
// branch's commit that krunbox last landed, nil if none) when it is that
// commit already: landing the same work again changes nothing, whatever
// the time.
func (c *copier) commit(landed *plumbing.Reference, tree plumbing.Hash, parents []plumbing.Hash, msg string) (plumbing.Hash, error) {
	if landed != nil {
		prev, err := object.GetCommit(c.user, landed.Hash())
		if err == nil && prev.TreeHash == tree && slices.Equal(prev.ParentHashes, parents) && prev.Message == msg {
			return landed.Hash(), nil
		}
	}
	sig := object.Signature{Name: "krunbox", Email: "krunbox@localhost", When: time.Now()}
	cm := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree, ParentHashes: parents}
	o := c.mem.NewEncodedObject()
	if err := cm.Encode(o); err != nil {
		return plumbing.ZeroHash, err
	}
	return c.mem.SetEncodedObject(o)
}

// branchCommits copies the commits of the sandbox's branch that the
// user's repository lacks, and returns how many there are.
func (c *copier) branchCommits(head plumbing.Hash) (int, error) {
	n := 0
	queue := []plumbing.Hash{head}
	seen := map[plumbing.Hash]bool{}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if seen[h] || c.has(h) {
			continue
		}
		seen[h] = true
		if n++; n > maxCommits {
			return 0, fmt.Errorf("more than %d commits over the base", maxCommits)
		}
		o, err := c.object(plumbing.CommitObject, h)
		if err != nil {
			return 0, err
		}
		var cm object.Commit
		if err := cm.Decode(o); err != nil {
			return 0, fmt.Errorf("commit %s: %w", h, err)
		}
		if err := c.tree(cm.TreeHash, 0); err != nil {
			return 0, err
		}
		queue = append(queue, cm.ParentHashes...)
	}
	return n, nil
}

// final returns the tree of the checkout now (built in c when it is not
// HEAD's) and whether it differs from HEAD's.
func (c *copier) final(w *work) (plumbing.Hash, bool, error) {
	head, err := treeFiles(w.objects, w.head, w.lim)
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	same := len(head) == len(w.files)
	for p, e := range w.files {
		if h, ok := head[p]; !ok || h.Hash != e.Hash || h.Mode != e.Mode {
			same = false
			break
		}
	}
	if same {
		return w.head.TreeHash, false, nil
	}
	t, err := c.buildTree(w, w.files)
	return t, true, err
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
// .git or ..), at most maxLand bytes in all; a corrupt or oversized
// object leaves the user's repository as it was. A branch krunbox/NAME
// that krunbox did not make, or that moved since, is refused.
func (s *Sandbox) Land(ctx context.Context, opts LandOptions) (_ *Landed, err error) {
	defer recoverParse(s.name, &err)
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	w, err := s.openWork(ctx)
	if err != nil {
		return nil, err
	}
	defer w.close()
	iso := w.iso
	if err := checkObjectFormat(iso.CommonDir); err != nil {
		return nil, err
	}
	user, err := openGitStorage(iso.GitDir, iso.CommonDir, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("land %s: the repository of %s: %w", s.name, iso.Project, err)
	}
	defer user.Close()
	name := plumbing.NewBranchReferenceName(iso.Branch)
	var old *plumbing.Reference
	switch cur, err := user.Reference(name); {
	case err == nil:
		prev, _ := s.lastLanded()
		if prev == nil || cur.Hash().String() != prev.Commit {
			return nil, fmt.Errorf("land %s: branch %s of %s exists and is not what krunbox last landed: rename or delete it first", s.name, iso.Branch, iso.Project)
		}
		old = cur
	case !errors.Is(err, plumbing.ErrReferenceNotFound):
		return nil, fmt.Errorf("land %s: %w", s.name, err)
	}
	c := &copier{from: w.objects, user: user, mem: memory.NewStorage(), lim: w.lim}
	base := plumbing.NewHash(iso.Base)
	tip, commits := w.head.Hash, 0
	if !opts.Squash {
		if commits, err = c.branchCommits(w.head.Hash); err != nil {
			return nil, fmt.Errorf("land %s: %w", s.name, err)
		}
	}
	tree, dirty, err := c.final(w)
	if err != nil {
		return nil, fmt.Errorf("land %s: %w", s.name, err)
	}
	switch {
	case opts.Squash:
		if err := c.tree(tree, 0); err != nil {
			return nil, fmt.Errorf("land %s: %w", s.name, err)
		}
		baseCommit, err := object.GetCommit(w.objects, base)
		if err != nil {
			return nil, fmt.Errorf("land %s: base: %w", s.name, err)
		}
		if tree == baseCommit.TreeHash {
			tip = base
			break
		}
		tip, err = c.commit(old, tree, []plumbing.Hash{base}, fmt.Sprintf("krunbox %s: the sandbox's work on %s\n", s.name, iso.Base[:12]))
		if err != nil {
			return nil, err
		}
		commits = 1
	case dirty:
		tip, err = c.commit(old, tree, []plumbing.Hash{w.head.Hash}, fmt.Sprintf("krunbox %s: work not committed in the sandbox\n", s.name))
		if err != nil {
			return nil, err
		}
		commits++
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &Landed{Branch: iso.Branch, Commit: tip.String(), Commits: commits}
	if old != nil && old.Hash() == tip {
		res.Unchanged = true
		return res, nil
	}
	// Verified, all of it: now written.
	iter, err := c.mem.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		return nil, err
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		if c.user.HasEncodedObject(o.Hash()) == nil {
			return nil
		}
		_, err := user.SetEncodedObject(o)
		return err
	}); err != nil {
		return nil, fmt.Errorf("land %s: write objects into %s: %w", s.name, iso.Project, err)
	}
	if err := user.CheckAndSetReference(plumbing.NewHashReference(name, tip), old); err != nil {
		return nil, fmt.Errorf("land %s: branch %s: %w", s.name, iso.Branch, err)
	}
	if err := s.writeLanded(&landRecord{Commit: tip.String(), Tree: tree.String()}); err != nil {
		return nil, fmt.Errorf("land %s: %w", s.name, err)
	}
	res.Unchanged = tip == base
	return res, nil
}

func (s *Sandbox) lastLanded() (*landRecord, error) {
	b, err := confine.ReadFileNoSymlinks(s.path(landedFile), confine.DefaultMaxRead)
	if err != nil {
		return nil, err
	}
	var r landRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", s.path(landedFile), err)
	}
	return &r, nil
}

func (s *Sandbox) writeLanded(r *landRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(s.path(landedFile), append(b, '\n'), 0o600)
}

// Unlanded reports whether the sandbox's isolated checkout holds work
// that Land has not put in the user's repository: files that differ
// from its base, in a state not landed last. It is false for a sandbox
// that is not isolated.
func (s *Sandbox) Unlanded(ctx context.Context) (_ bool, err error) {
	defer recoverParse(s.name, &err)
	if s.rec.Isolate == nil {
		return false, nil
	}
	w, err := s.openWork(ctx)
	if err != nil {
		return false, err
	}
	defer w.close()
	c := &copier{from: w.objects, user: w.objects, mem: memory.NewStorage(), lim: w.lim}
	tree, _, err := c.final(w)
	if err != nil {
		return false, err
	}
	base, err := object.GetCommit(w.objects, plumbing.NewHash(w.iso.Base))
	if err != nil {
		return false, err
	}
	if tree == base.TreeHash {
		return false, nil
	}
	prev, err := s.lastLanded()
	return err != nil || prev.Tree != tree.String(), nil
}

// Export copies the files and directories paths (relative to the
// project, or absolute below it) of the sandbox's isolated checkout, as
// they are now, into the new directory dir, which must not exist. They
// are read below the checkout, at most maxExport bytes in all, with no
// symlink followed; a symlink is not copied (it is listed in the error)
// and neither is anything but regular files and directories (nor the
// checkout's .git).
func (s *Sandbox) Export(ctx context.Context, dir string, paths ...string) error {
	if s.rec.Isolate == nil {
		return fmt.Errorf("export from %s: %w", s.name, ErrNotIsolated)
	}
	if len(paths) == 0 {
		return errors.New("export: no path")
	}
	rel, err := s.projectPaths(paths)
	if err != nil {
		return fmt.Errorf("export from %s: %w", s.name, err)
	}
	src, err := confine.OpenRootNoSymlinks(s.path(isolatedWorkspace))
	if err != nil {
		return fmt.Errorf("export from %s: %w", s.name, err)
	}
	defer src.Close()
	for _, p := range rel {
		if _, err := src.Lstat(p); err != nil {
			return fmt.Errorf("export from %s: %w", s.name, err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("export from %s: %s exists: name a new directory", s.name, dir)
		}
		return fmt.Errorf("export from %s: %w", s.name, err)
	}
	dst, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer dst.Close()
	var skipped []string
	var copied int64
	var copyPath func(p string) error
	copyPath = func(p string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := src.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if p == ".git" {
				return nil
			}
			if err := confine.MkdirAll(dst, p, 0o755, false); err != nil {
				return err
			}
			d, err := src.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			names, err := d.Readdirnames(-1)
			d.Close()
			if err != nil {
				return err
			}
			slices.Sort(names)
			for _, n := range names {
				if err := copyPath(path.Join(p, n)); err != nil {
					return err
				}
			}
			return nil
		case fi.Mode().IsRegular():
			if d := path.Dir(p); d != "." {
				if err := confine.MkdirAll(dst, d, 0o755, false); err != nil {
					return err
				}
			}
			in, err := src.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			defer in.Close()
			if fi, err = in.Stat(); err != nil || !fi.Mode().IsRegular() {
				return errors.Join(err, fmt.Errorf("%s: %w", p, confine.ErrNotRegular))
			}
			if copied += fi.Size(); copied > maxExport {
				return fmt.Errorf("%s: %w: the files exported are over %d bytes", p, confine.ErrTooLarge, int64(maxExport))
			}
			out, err := dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm()&0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, io.LimitReader(in, fi.Size()))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			return err
		}
		skipped = append(skipped, p)
		return nil
	}
	for _, p := range rel {
		if err := copyPath(p); err != nil {
			return fmt.Errorf("export from %s: %w", s.name, err)
		}
	}
	if len(skipped) > 0 {
		return fmt.Errorf("export from %s: not copied, neither files nor directories (symlinks, devices): %s", s.name, strings.Join(skipped, ", "))
	}
	return nil
}
