package hostapi

import (
	"bytes"
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

// ErrNotIsolated is returned by Diff, Export and Land for a sandbox whose
// workspace is not isolated.
var ErrNotIsolated = errors.New("the sandbox's workspace is not isolated (create it with --isolate)")

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
	s       *Sandbox
	iso     *isolateRecord
	objects *layered
	close   func()
	root    *os.Root // the checkout
	head    *object.Commit
	// files is the checkout's content now: the index's entries whose
	// files did not change, hashes of those that did, the files not
	// ignored that are not in the index.
	files map[string]entry
	lim   GitLimits
}

// openWork reads the sandbox's isolated checkout: nothing there is run,
// every file is read below the checkout with a bound, no symlink is
// followed, and what the repository and the checkout name is bounded by
// GitLimits (the defaults).
func (s *Sandbox) openWork() (*work, error) {
	iso := s.rec.Isolate
	if iso == nil {
		return nil, fmt.Errorf("%s: %w", s.name, ErrNotIsolated)
	}
	checkout := s.path(isolatedWorkspace)
	own, err := openGitStorage(filepath.Join(checkout, ".git"), filepath.Join(checkout, ".git"), 1)
	if err != nil {
		return nil, fmt.Errorf("the repository of %s: %w", s.name, err)
	}
	base, err := openGitStorage(s.path("base"), s.path("base"), 1<<20)
	if err != nil {
		own.Close()
		return nil, fmt.Errorf("the base objects of %s: %w", s.name, err)
	}
	root, err := confine.OpenRootNoSymlinks(checkout)
	if err != nil {
		own.Close()
		base.Close()
		return nil, fmt.Errorf("the checkout of %s: %w", s.name, err)
	}
	w := &work{s: s, iso: iso, objects: &layered{own.Storage, base.Storage}, root: root,
		close: func() { own.Close(); base.Close(); root.Close() }, lim: DefaultGitLimits()}
	if err := w.read(own); err != nil {
		w.close()
		return nil, fmt.Errorf("the checkout of %s: %w", s.name, err)
	}
	return w, nil
}

func (w *work) read(own *gitStorage) error {
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
	return w.scan(idx, fi)
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
func (w *work) scan(idx *index.Index, idxInfo fs.FileInfo) error {
	tracked := map[string]*index.Entry{}
	dirs := map[string]bool{}
	for _, e := range idx.Entries {
		if e.Stage != 0 {
			tracked[e.Name] = nil // a conflict: hashed
			continue
		}
		tracked[e.Name] = e
		for d := path.Dir(e.Name); d != "."; d = path.Dir(d) {
			if dirs[d] {
				break
			}
			dirs[d] = true
		}
	}
	var patterns []gitignore.Pattern
	if b, err := confine.ReadFile(w.root, ".git/info/exclude", confine.DefaultMaxRead); err == nil {
		patterns = append(patterns, parseIgnore(b, nil)...)
	}
	w.files = map[string]entry{}
	n := 0
	var walk func(dir string, domain []string) error
	walk = func(dir string, domain []string) error {
		if b, err := confine.ReadFile(w.root, path.Join(dir, ".gitignore"), confine.DefaultMaxRead); err == nil {
			patterns = append(patterns, parseIgnore(b, domain)...)
		}
		matcher := gitignore.NewMatcher(patterns)
		d, err := w.root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			if n++; n > maxWorkFiles {
				return fmt.Errorf("more than %d files", maxWorkFiles)
			}
			rel := path.Join(dir, e.Name())
			if dir == "." && e.Name() == ".git" {
				continue
			}
			parts := append(slices.Clone(domain), e.Name())
			switch {
			case e.IsDir():
				if !dirs[rel] {
					if matcher.Match(parts, true) {
						continue
					}
					if _, err := w.root.Lstat(path.Join(rel, ".git")); err == nil {
						continue // another repository
					}
				}
				if te, ok := tracked[rel]; ok && te != nil && te.Mode == filemode.Submodule {
					w.files[rel] = entry{Hash: te.Hash, Mode: te.Mode}
					continue
				}
				if err := walk(rel, parts); err != nil {
					return err
				}
			case e.Type().IsRegular() || e.Type() == fs.ModeSymlink:
				te, isTracked := tracked[rel]
				if !isTracked && matcher.Match(parts, false) {
					continue
				}
				fi, err := e.Info()
				if err != nil {
					continue // gone meanwhile
				}
				mode := filemode.Regular
				switch {
				case fi.Mode()&fs.ModeSymlink != 0:
					mode = filemode.Symlink
				case fi.Mode()&0o111 != 0:
					mode = filemode.Executable
				}
				if te != nil && te.Mode == mode && int64(te.Size) == fi.Size()&0xffffffff &&
					te.ModifiedAt.Equal(fi.ModTime()) && idxInfo != nil && fi.ModTime().Before(idxInfo.ModTime()) {
					w.files[rel] = entry{Hash: te.Hash, Mode: mode}
					continue
				}
				h, err := w.hashFile(rel, mode)
				if err != nil {
					return err
				}
				w.files[rel] = entry{Hash: h, Mode: mode, file: true}
			}
		}
		return nil
	}
	return walk(".", nil)
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
// it: a symlink's target, a regular file's bytes, at most maxBlob.
func (w *work) readFile(rel string, mode filemode.FileMode) ([]byte, error) {
	if mode == filemode.Symlink {
		t, err := w.root.Readlink(rel)
		return []byte(t), err
	}
	return confine.ReadFile(w.root, rel, maxBlob)
}

func (w *work) hashFile(rel string, mode filemode.FileMode) (plumbing.Hash, error) {
	b, err := w.readFile(rel, mode)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return plumbing.ComputeHash(plumbing.BlobObject, b), nil
}

// treeFiles returns the files of the tree of commit c.
func treeFiles(objects storer.EncodedObjectStorer, c *object.Commit) (map[string]entry, error) {
	t, err := object.GetTree(objects, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("tree of %s: %w", c.Hash, err)
	}
	out := map[string]entry{}
	walker := object.NewTreeWalker(t, true, nil)
	defer walker.Close()
	for {
		name, e, err := walker.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tree of %s: %w", c.Hash, err)
		}
		if e.Mode == filemode.Dir {
			continue
		}
		if len(out) >= maxWorkFiles {
			return nil, fmt.Errorf("tree of %s: more than %d files", c.Hash, maxWorkFiles)
		}
		out[name] = entry{Hash: e.Hash, Mode: e.Mode}
	}
}

// blob returns the content of the file at p in the state e: from the
// checkout when it was hashed from there, else from the objects.
func (w *work) blob(p string, e entry) ([]byte, error) {
	if e.file {
		b, err := w.readFile(p, e.Mode)
		if err == nil && plumbing.ComputeHash(plumbing.BlobObject, b) != e.Hash {
			err = fmt.Errorf("%s changed while being read", p)
		}
		return b, err
	}
	return readObject(w.objects, plumbing.BlobObject, e.Hash)
}

// readObject reads the object h of type t (any, for AnyObject), at most
// maxBlob bytes, and checks that its content is what h names.
func readObject(objects storer.EncodedObjectStorer, t plumbing.ObjectType, h plumbing.Hash) ([]byte, error) {
	o, err := objects.EncodedObject(t, h)
	if err != nil {
		return nil, fmt.Errorf("object %s: %w", h, err)
	}
	if o.Size() > maxBlob || o.Size() < 0 {
		return nil, fmt.Errorf("object %s: %w: %d bytes, at most %d read", h, confine.ErrTooLarge, o.Size(), maxBlob)
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
