package isolate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
)

// maxLand bounds the bytes of the objects one Land copies (held in memory
// until verified).
const maxLand = 2 << 30

// Landed is what Land made in the user's repository: hostapi.Landed.
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
	lim   Limits
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
		return &LimitError{What: fmt.Sprintf("tree %s: %d directories deep", h, depth), Limit: "TreeDepth", Max: int64(c.lim.TreeDepth)}
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
			return &LimitError{What: fmt.Sprintf("tree %s: a name of %d bytes", h, len(e.Name)), Limit: "PathBytes", Max: int64(c.lim.PathBytes)}
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

// Land makes the work of the checkout its branch (Record.Branch) in the
// user's repository: the sandbox's commits over its base and, when files
// are not committed, one more commit of them; with squash, one commit of
// it all on the base. Nothing else of the user's repository changes: no
// checkout, no merge, no other ref.
//
// The guest's repository is read as Diff reads it. Every object is
// verified before any is written (its content hashes to its name; a
// commit and a tree decode; a tree names no path git refuses, such as
// .git or ..), at most maxLand bytes in all; a corrupt or oversized
// object leaves the user's repository as it was. A branch krunbox/NAME
// that krunbox did not make, or that moved since, is refused. The caller
// holds the sandbox's lock.
func (c *Checkout) Land(ctx context.Context, squash bool) (_ *Landed, err error) {
	defer recoverParse(c.Name, &err)
	w, err := c.open(ctx)
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
		return nil, fmt.Errorf("land %s: the repository of %s: %w", c.Name, iso.Project, err)
	}
	defer user.Close()
	name := plumbing.NewBranchReferenceName(iso.Branch)
	var old *plumbing.Reference
	switch cur, err := user.Reference(name); {
	case err == nil:
		prev, _ := c.lastLanded()
		if prev == nil || cur.Hash().String() != prev.Commit {
			return nil, fmt.Errorf("land %s: branch %s of %s exists and is not what krunbox last landed: rename or delete it first", c.Name, iso.Branch, iso.Project)
		}
		old = cur
	case !errors.Is(err, plumbing.ErrReferenceNotFound):
		return nil, fmt.Errorf("land %s: %w", c.Name, err)
	}
	cp := &copier{from: w.objects, user: user, mem: memory.NewStorage(), lim: w.lim}
	base := plumbing.NewHash(iso.Base)
	tip, commits := w.head.Hash, 0
	if !squash {
		if commits, err = cp.branchCommits(w.head.Hash); err != nil {
			return nil, fmt.Errorf("land %s: %w", c.Name, err)
		}
	}
	tree, dirty, err := cp.final(w)
	if err != nil {
		return nil, fmt.Errorf("land %s: %w", c.Name, err)
	}
	switch {
	case squash:
		if err := cp.tree(tree, 0); err != nil {
			return nil, fmt.Errorf("land %s: %w", c.Name, err)
		}
		baseCommit, err := object.GetCommit(w.objects, base)
		if err != nil {
			return nil, fmt.Errorf("land %s: base: %w", c.Name, err)
		}
		if tree == baseCommit.TreeHash {
			tip = base
			break
		}
		tip, err = cp.commit(old, tree, []plumbing.Hash{base}, fmt.Sprintf("krunbox %s: the sandbox's work on %s\n", c.Name, iso.Base[:12]))
		if err != nil {
			return nil, err
		}
		commits = 1
	case dirty:
		tip, err = cp.commit(old, tree, []plumbing.Hash{w.head.Hash}, fmt.Sprintf("krunbox %s: work not committed in the sandbox\n", c.Name))
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
	iter, err := cp.mem.IterEncodedObjects(plumbing.AnyObject)
	if err != nil {
		return nil, err
	}
	if err := iter.ForEach(func(o plumbing.EncodedObject) error {
		if cp.user.HasEncodedObject(o.Hash()) == nil {
			return nil
		}
		_, err := user.SetEncodedObject(o)
		return err
	}); err != nil {
		return nil, fmt.Errorf("land %s: write objects into %s: %w", c.Name, iso.Project, err)
	}
	if err := user.CheckAndSetReference(plumbing.NewHashReference(name, tip), old); err != nil {
		return nil, fmt.Errorf("land %s: branch %s: %w", c.Name, iso.Branch, err)
	}
	if err := c.writeLanded(&landRecord{Commit: tip.String(), Tree: tree.String()}); err != nil {
		return nil, fmt.Errorf("land %s: %w", c.Name, err)
	}
	res.Unchanged = tip == base
	return res, nil
}

func (c *Checkout) lastLanded() (*landRecord, error) {
	b, err := confine.ReadFileNoSymlinks(c.path(landedFile), confine.DefaultMaxRead)
	if err != nil {
		return nil, err
	}
	var r landRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", c.path(landedFile), err)
	}
	return &r, nil
}

func (c *Checkout) writeLanded(r *landRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return atomicfile.Write(c.path(landedFile), append(b, '\n'), 0o600)
}

// Unlanded reports whether the checkout holds work that Land has not put
// in the user's repository: files that differ from its base, in a state
// not landed last.
func (c *Checkout) Unlanded(ctx context.Context) (_ bool, err error) {
	defer recoverParse(c.Name, &err)
	w, err := c.open(ctx)
	if err != nil {
		return false, err
	}
	defer w.close()
	cp := &copier{from: w.objects, user: w.objects, mem: memory.NewStorage(), lim: w.lim}
	tree, _, err := cp.final(w)
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
	prev, err := c.lastLanded()
	return err != nil || prev.Tree != tree.String(), nil
}
