package isolate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/krunbox/krunbox/internal/confine"
)

// Bounds of what is read of an isolated checkout, which the guest writes.
const (
	maxIndex     = 256 << 20 // .git/index
	maxBlob      = 256 << 20 // one file or object
	maxWorkFiles = 1 << 20   // files and directories walked
	maxCommits   = 10000     // commits of the sandbox's branch landed
)

// recoverParse turns a panic of go-git's parsers on what the guest wrote
// (an index, a pack, an object that no git would write) into an error of
// the sandbox called name, so that a hostile repository cannot crash the
// process reading it (krunbox serve among them).
func recoverParse(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: its repository cannot be read (%v)", name, r)
	}
}

// layered reads objects from the sandbox's repository, then from its base
// objects: the alternates of the guest's repository, named by krunbox
// rather than by the guest's objects/info/alternates.
type layered struct {
	storer.EncodedObjectStorer
	base storer.EncodedObjectStorer
}

// EncodedObject returns the object h, refusing one that says it is over
// maxBlob bytes; its Reader stops at the size it says, whatever its
// stream holds (a zlib bomb), so that go-git's decoders read no more.
func (l *layered) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	o, err := l.EncodedObjectStorer.EncodedObject(t, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		o, err = l.base.EncodedObject(t, h)
	}
	if err != nil {
		return nil, err
	}
	if o.Size() > maxBlob || o.Size() < 0 {
		return nil, fmt.Errorf("object %s: %w: %d bytes, at most %d read", h, confine.ErrTooLarge, o.Size(), maxBlob)
	}
	return &boundedObject{o}, nil
}

// boundedObject is an object whose Reader stops at its size.
type boundedObject struct{ plumbing.EncodedObject }

func (o *boundedObject) Reader() (io.ReadCloser, error) {
	r, err := o.EncodedObject.Reader()
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(r, o.Size()), r}, nil
}

func (l *layered) HasEncodedObject(h plumbing.Hash) error {
	if err := l.EncodedObjectStorer.HasEncodedObject(h); err == nil {
		return nil
	}
	return l.base.HasEncodedObject(h)
}

func (l *layered) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	n, err := l.EncodedObjectStorer.EncodedObjectSize(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return l.base.EncodedObjectSize(h)
	}
	return n, err
}

// entry is a file of a tree: its blob (or a submodule's commit) and mode.
type entry struct {
	Hash plumbing.Hash
	Mode filemode.FileMode
	// file is set when Hash was computed from the checkout's file, whose
	// blob may be in no object store yet.
	file bool
}

// work is an isolated checkout read from the host: its repository (the
// guest's, hostile), its HEAD and the state of its files.
type work struct {
	iso     *Record
	objects *layered
	close   func()
	root    *os.Root // the checkout
	head    *object.Commit
	// files is the checkout's content now: the index's entries whose
	// files did not change, hashes of those that did, the files not
	// ignored that are not in the index.
	files map[string]entry
	lim   Limits
}

// open reads the checkout: nothing there is run, every file is read
// below the checkout with a bound, no symlink is followed, and what the
// repository and the checkout name is bounded by c.Limits.
func (c *Checkout) open(ctx context.Context) (*work, error) {
	checkout := c.path(WorkspaceDir)
	own, err := openGitStorage(filepath.Join(checkout, ".git"), filepath.Join(checkout, ".git"), 1)
	if err != nil {
		return nil, fmt.Errorf("the repository of %s: %w", c.Name, err)
	}
	base := c.path(filepath.Dir(BaseDir))
	objects, err := openGitStorage(base, base, 1<<20)
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("the base objects of %s: %w", c.Name, err)
	}
	root, err := confine.OpenRootNoSymlinks(checkout)
	if err != nil {
		own.Close()
		objects.Close()
		return nil, fmt.Errorf("the checkout of %s: %w", c.Name, err)
	}
	w := &work{iso: c.Record, objects: &layered{own.Storage, objects.Storage}, root: root,
		close: func() { own.Close(); objects.Close(); root.Close() }, lim: c.Limits.withDefaults()}
	if err := w.read(ctx, own); err != nil {
		w.close()
		return nil, fmt.Errorf("the checkout of %s: %w", c.Name, err)
	}
	return w, nil
}

func (w *work) read(ctx context.Context, own *gitStorage) error {
	ref, err := storer.ResolveReference(own, plumbing.HEAD)
	if err != nil {
		return fmt.Errorf("HEAD: %w", err)
	}
	if w.head, err = object.GetCommit(w.objects, ref.Hash()); err != nil {
		return fmt.Errorf("HEAD %s: %w", ref.Hash(), err)
	}
	idx := &index.Index{}
	fi, err := w.root.Lstat(".git/index")
	switch {
	case err == nil && fi.Size() > maxIndex:
		return fmt.Errorf(".git/index: %w: %d bytes, at most %d read", confine.ErrTooLarge, fi.Size(), maxIndex)
	case err == nil:
		if idx, err = w.readIndex(own); err != nil {
			return fmt.Errorf(".git/index: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return w.scan(ctx, idx, fi)
}

// readIndex reads the index of the repository own (through gitfs: a
// regular file, below it), bounded as readIndex says.
func (w *work) readIndex(own *gitStorage) (*index.Index, error) {
	f, err := own.Filesystem().Open("index")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readIndex(f, w.lim)
}

// scan walks the checkout and sets w.files. A file whose size and
// modification time are the index's, and that was not modified after
// the index was written, has the index's hash; any other is hashed.
// Untracked files count unless .gitignore or .git/info/exclude ignore
// them; an ignored directory that holds nothing tracked is not walked.
// The walk is bounded by w.lim: Files, PathBytes and PathsBytes for
// what it walks, IgnoreBytes and IgnoreMatches for the ignore files,
// HashBytes for the files hashed.
func (w *work) scan(ctx context.Context, idx *index.Index, idxInfo fs.FileInfo) error {
	sc := &scanner{w: w, ctx: ctx, tracked: map[string]*index.Entry{}, dirs: map[string]bool{}, idxInfo: idxInfo}
	for _, e := range idx.Entries {
		if e.Stage != 0 {
			sc.tracked[e.Name] = nil // a conflict: hashed
			continue
		}
		sc.tracked[e.Name] = e
		for d := path.Dir(e.Name); d != "."; d = path.Dir(d) {
			if sc.dirs[d] {
				break
			}
			sc.dirs[d] = true
		}
	}
	patterns, err := sc.ignoreFile(".git/info/exclude", nil, nil)
	if err != nil {
		return err
	}
	w.files = map[string]entry{}
	return sc.walk(".", nil, patterns)
}

// scanner is the state of work.scan.
type scanner struct {
	w       *work
	ctx     context.Context
	tracked map[string]*index.Entry
	dirs    map[string]bool // the directories of tracked files
	idxInfo fs.FileInfo     // the index's
	entries int             // files and directories walked
	paths   int64           // bytes of their paths
	ignore  int64           // bytes of ignore files read
	matches int64           // patterns tried on paths
	hashed  int64           // bytes of files hashed
}

// walk walks the directory dir, whose path is domain, under the ignore
// patterns of its parents.
func (sc *scanner) walk(dir string, domain []string, patterns []gitignore.Pattern) error {
	if err := sc.ctx.Err(); err != nil {
		return err
	}
	patterns, err := sc.ignoreFile(path.Join(dir, ".gitignore"), domain, patterns)
	if err != nil {
		return err
	}
	d, err := sc.w.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	lim := sc.w.lim
	for _, e := range ents {
		if sc.entries++; sc.entries > lim.Files {
			return &LimitError{What: fmt.Sprintf("the checkout has more than %d files and directories", lim.Files), Limit: "Files", Max: int64(lim.Files)}
		}
		rel := path.Join(dir, e.Name())
		if len(rel) > lim.PathBytes {
			return &LimitError{What: fmt.Sprintf("the checkout: %s: a path of %d bytes", shortPath(rel), len(rel)), Limit: "PathBytes", Max: int64(lim.PathBytes)}
		}
		if sc.paths += int64(len(rel)); sc.paths > lim.PathsBytes {
			return &LimitError{What: fmt.Sprintf("the checkout: the paths of its first %d files and directories hold %d bytes", sc.entries, sc.paths), Limit: "PathsBytes", Max: lim.PathsBytes}
		}
		if dir == "." && e.Name() == ".git" {
			continue
		}
		parts := append(slices.Clip(domain), e.Name())
		switch {
		case e.IsDir():
			if !sc.dirs[rel] {
				ignored, err := sc.ignored(patterns, parts, true)
				if err != nil {
					return err
				}
				if ignored {
					continue
				}
				if _, err := sc.w.root.Lstat(path.Join(rel, ".git")); err == nil {
					continue // another repository
				}
			}
			if te, ok := sc.tracked[rel]; ok && te != nil && te.Mode == filemode.Submodule {
				sc.w.files[rel] = entry{Hash: te.Hash, Mode: te.Mode}
				continue
			}
			if err := sc.walk(rel, parts, patterns); err != nil {
				return err
			}
		case e.Type().IsRegular() || e.Type() == fs.ModeSymlink:
			if err := sc.file(rel, e, parts, patterns); err != nil {
				return err
			}
		}
	}
	return nil
}

// file adds the regular file or symlink rel of the checkout, unless it
// is ignored.
func (sc *scanner) file(rel string, e fs.DirEntry, parts []string, patterns []gitignore.Pattern) error {
	te, isTracked := sc.tracked[rel]
	if !isTracked {
		ignored, err := sc.ignored(patterns, parts, false)
		if err != nil || ignored {
			return err
		}
	}
	fi, err := e.Info()
	if err != nil {
		return nil // gone meanwhile
	}
	mode := filemode.Regular
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		mode = filemode.Symlink
	case fi.Mode()&0o111 != 0:
		mode = filemode.Executable
	}
	if te != nil && te.Mode == mode && int64(te.Size) == fi.Size()&0xffffffff &&
		te.ModifiedAt.Equal(fi.ModTime()) && sc.idxInfo != nil && fi.ModTime().Before(sc.idxInfo.ModTime()) {
		sc.w.files[rel] = entry{Hash: te.Hash, Mode: mode}
		return nil
	}
	h, err := sc.hash(rel, mode)
	if err != nil {
		return err
	}
	sc.w.files[rel] = entry{Hash: h, Mode: mode, file: true}
	return nil
}

// ignoreFile returns patterns and those of the ignore file name (if
// any), whose directory is domain: the ignore files of one walk hold at
// most lim.IgnoreBytes.
func (sc *scanner) ignoreFile(name string, domain []string, patterns []gitignore.Pattern) ([]gitignore.Pattern, error) {
	b, err := confine.ReadFile(sc.w.root, name, confine.DefaultMaxRead)
	if err != nil {
		return patterns, nil
	}
	if sc.ignore += int64(len(b)); sc.ignore > sc.w.lim.IgnoreBytes {
		return nil, &LimitError{What: fmt.Sprintf("the checkout: its ignore files hold %d bytes or more", sc.ignore), Limit: "IgnoreBytes", Max: sc.w.lim.IgnoreBytes}
	}
	// Clipped: the patterns of a directory are its own and its
	// parents', never its siblings'.
	return append(slices.Clip(patterns), parseIgnore(b, domain)...), nil
}

// ignored reports whether patterns ignore the path parts: each pattern
// tried counts against lim.IgnoreMatches.
func (sc *scanner) ignored(patterns []gitignore.Pattern, parts []string, isDir bool) (bool, error) {
	if sc.matches += int64(len(patterns)); sc.matches > sc.w.lim.IgnoreMatches {
		return false, &LimitError{What: fmt.Sprintf("the checkout: its ignore patterns were tried %d times", sc.matches), Limit: "IgnoreMatches", Max: sc.w.lim.IgnoreMatches}
	}
	return gitignore.NewMatcher(patterns).Match(parts, isDir), nil
}

// hash returns the blob hash of the checkout's file rel, of mode mode,
// read as it streams by: at most maxBlob bytes, lim.HashBytes in all.
func (sc *scanner) hash(rel string, mode filemode.FileMode) (plumbing.Hash, error) {
	if mode == filemode.Symlink {
		t, err := sc.w.root.Readlink(rel)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		return plumbing.ComputeHash(plumbing.BlobObject, []byte(t)), nil
	}
	f, err := sc.w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return plumbing.ZeroHash, err
	case !fi.Mode().IsRegular():
		return plumbing.ZeroHash, fmt.Errorf("%s: %w", rel, confine.ErrNotRegular)
	case fi.Size() > maxBlob:
		return plumbing.ZeroHash, fmt.Errorf("%s: %w: %d bytes, at most %d read", rel, confine.ErrTooLarge, fi.Size(), int64(maxBlob))
	}
	if sc.hashed += fi.Size(); sc.hashed > sc.w.lim.HashBytes {
		return plumbing.ZeroHash, &LimitError{What: fmt.Sprintf("the checkout: the files to hash hold %d bytes or more", sc.hashed), Limit: "HashBytes", Max: sc.w.lim.HashBytes}
	}
	h := plumbing.NewHasher(plumbing.BlobObject, fi.Size())
	n, err := io.Copy(h, io.LimitReader(f, fi.Size()+1))
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("%s: %w", rel, err)
	}
	if n != fi.Size() {
		return plumbing.ZeroHash, fmt.Errorf("%s changed while being read", rel)
	}
	return h.Sum(), nil
}

func parseIgnore(b []byte, domain []string) []gitignore.Pattern {
	var out []gitignore.Pattern
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimRight(l, "\r")
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		out = append(out, gitignore.ParsePattern(l, domain))
	}
	return out
}

// readFile returns the content of the checkout's file rel as git stores
// it: a symlink's target, a regular file's bytes, at most max.
func (w *work) readFile(rel string, mode filemode.FileMode, max int64) ([]byte, error) {
	if mode == filemode.Symlink {
		t, err := w.root.Readlink(rel)
		return []byte(t), err
	}
	return confine.ReadFile(w.root, rel, max)
}

// treeFiles returns the files of the tree of commit c, bounded by lim:
// at most lim.Files entries walked (directories too: a tree may name
// another many times), each path at most lim.PathBytes long and through
// at most lim.TreeDepth directories, lim.PathsBytes of paths in all and
// as many of tree objects read.
func treeFiles(objects storer.EncodedObjectStorer, c *object.Commit, lim Limits) (map[string]entry, error) {
	tw := &treeWalk{objects: objects, lim: lim, files: map[string]entry{}}
	if err := tw.walk(c.TreeHash, "", 0); err != nil {
		return nil, fmt.Errorf("tree of %s: %w", c.Hash, err)
	}
	return tw.files, nil
}

// treeWalk is the state of treeFiles.
type treeWalk struct {
	objects storer.EncodedObjectStorer
	lim     Limits
	files   map[string]entry
	entries int
	paths   int64 // bytes of the paths walked
	trees   int64 // bytes of the tree objects read
}

// walk adds the files of the tree h, at the path dir ("" for the root)
// depth directories down.
func (tw *treeWalk) walk(h plumbing.Hash, dir string, depth int) error {
	o, err := tw.objects.EncodedObject(plumbing.TreeObject, h)
	if err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	if tw.trees += o.Size(); tw.trees > tw.lim.PathsBytes {
		return &LimitError{What: fmt.Sprintf("its trees hold more than %d bytes", tw.lim.PathsBytes), Limit: "PathsBytes", Max: tw.lim.PathsBytes}
	}
	t, err := object.DecodeTree(tw.objects, o)
	if err != nil {
		return fmt.Errorf("tree %s: %w", h, err)
	}
	for _, e := range t.Entries {
		if tw.entries++; tw.entries > tw.lim.Files {
			return &LimitError{What: fmt.Sprintf("more than %d files and directories", tw.lim.Files), Limit: "Files", Max: int64(tw.lim.Files)}
		}
		n := len(e.Name)
		if dir != "" {
			n += len(dir) + 1
		}
		if n > tw.lim.PathBytes {
			return &LimitError{What: fmt.Sprintf("tree %s: a path of %d bytes", h, n), Limit: "PathBytes", Max: int64(tw.lim.PathBytes)}
		}
		if tw.paths += int64(n); tw.paths > tw.lim.PathsBytes {
			return &LimitError{What: fmt.Sprintf("the paths of its first %d files and directories hold %d bytes", tw.entries, tw.paths), Limit: "PathsBytes", Max: tw.lim.PathsBytes}
		}
		p := e.Name
		if dir != "" {
			p = dir + "/" + e.Name
		}
		if e.Mode != filemode.Dir {
			tw.files[p] = entry{Hash: e.Hash, Mode: e.Mode}
			continue
		}
		if depth+1 > tw.lim.TreeDepth {
			return &LimitError{What: fmt.Sprintf("tree %s: a directory %d deep", h, depth+1), Limit: "TreeDepth", Max: int64(tw.lim.TreeDepth)}
		}
		if err := tw.walk(e.Hash, p, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// shortPath returns p, or its start when it is long, for a message.
func shortPath(p string) string {
	if len(p) > 200 {
		return p[:200] + "..."
	}
	return p
}

// blob returns the content of the file at p in the state e, at most max
// bytes: from the checkout when it was hashed from there, else from the
// objects.
func (w *work) blob(p string, e entry, max int64) ([]byte, error) {
	if e.file {
		b, err := w.readFile(p, e.Mode, max)
		if err == nil && plumbing.ComputeHash(plumbing.BlobObject, b) != e.Hash {
			err = fmt.Errorf("%s changed while being read", p)
		}
		return b, err
	}
	return readObject(w.objects, plumbing.BlobObject, e.Hash, max)
}

// blobSize returns the size of the file at p in the state e, as blob
// would read it, without reading it: the checkout's file's, or the one
// its object's header says. A submodule's is 0.
func (w *work) blobSize(p string, e entry) (int64, error) {
	switch {
	case e.Hash.IsZero() || e.Mode == filemode.Submodule:
		return 0, nil
	case e.file:
		fi, err := w.root.Lstat(p)
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	n, err := w.objects.EncodedObjectSize(e.Hash)
	if err != nil {
		return 0, fmt.Errorf("object %s: %w", e.Hash, err)
	}
	return n, nil
}

// readObject reads the object h of type t (any, for AnyObject), at most
// max bytes as its header says, and checks that its content is what h
// names.
func readObject(objects storer.EncodedObjectStorer, t plumbing.ObjectType, h plumbing.Hash, max int64) ([]byte, error) {
	o, err := objects.EncodedObject(t, h)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if o.Size() > max || o.Size() < 0 {
		return nil, fmt.Errorf("object %s: %w: %d bytes, at most %d read", h, confine.ErrTooLarge, o.Size(), max)
	}
	r, err := o.Reader()
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, io.LimitReader(r, o.Size()+1)); err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if int64(buf.Len()) != o.Size() || plumbing.ComputeHash(o.Type(), buf.Bytes()) != h {
		return nil, fmt.Errorf("object %s is corrupt: its content does not hash to its name", h)
	}
	return buf.Bytes(), nil
}
