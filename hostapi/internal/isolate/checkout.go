package isolate

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/sync/errgroup"

	"github.com/krunbox/krunbox/internal/confine"
)

// checkoutFile is a file of the commit checked out, and, once written,
// its index entry.
type checkoutFile struct {
	path string
	hash plumbing.Hash
	mode filemode.FileMode
	e    index.Entry
}

// writeCheckout writes the files of the tree of commit c into the empty
// directory ws (its .git made already) and their index into ws/.git/index,
// as git read-tree -u would, with go-git: nothing of the repository is
// run or obeyed (no filters, attributes or hooks). A tree entry whose
// name git refuses to check out (.git in any case, .., a slash) fails
// the checkout. Blobs are read by open, one storage per worker.
func writeCheckout(ctx context.Context, open func() (*gitStorage, error), c *object.Commit, ws string) error {
	st, err := open()
	if err != nil {
		return err
	}
	t, err := object.GetTree(st, c.TreeHash)
	if err != nil {
		st.Close()
		return fmt.Errorf("tree of %s: %w", c.Hash, err)
	}
	var files []*checkoutFile
	dirs := map[string]bool{}
	walker := object.NewTreeWalker(t, true, nil)
	for {
		name, e, err := walker.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			walker.Close()
			st.Close()
			return fmt.Errorf("tree of %s: %w", c.Hash, err)
		}
		if err := checkTreeName(e.Name, e.Mode); err != nil {
			walker.Close()
			st.Close()
			return fmt.Errorf("tree of %s: %s: %w", c.Hash, name, err)
		}
		if e.Mode == filemode.Dir {
			dirs[name] = true
			continue
		}
		if len(files) >= maxWorkFiles {
			walker.Close()
			st.Close()
			return fmt.Errorf("tree of %s: more than %d files", c.Hash, maxWorkFiles)
		}
		files = append(files, &checkoutFile{path: name, hash: e.Hash, mode: e.Mode})
	}
	walker.Close()
	st.Close()
	root, err := os.OpenRoot(ws)
	if err != nil {
		return err
	}
	defer root.Close()
	dir, err := confine.OpenDirNoSymlinks(ws)
	if err != nil {
		return err
	}
	defer dir.Close()
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	slices.Sort(sorted) // parents first
	for _, d := range sorted {
		if err := root.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	workers := max(2, runtime.NumCPU())
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			st, err := open()
			if err != nil {
				return err
			}
			defer st.Close()
			for i := w; i < len(files); i += workers {
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := checkoutOne(st, root, dir, files[i]); err != nil {
					return fmt.Errorf("%s: %w", files[i].path, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	idx := &index.Index{Version: 2}
	for _, f := range files {
		idx.Entries = append(idx.Entries, &f.e)
	}
	slices.SortFunc(idx.Entries, func(a, b *index.Entry) int { return strings.Compare(a.Name, b.Name) })
	out, err := root.OpenFile(".git/index", os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	err = index.NewEncoder(out).Encode(idx)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// checkoutOne writes the file f below root and sets its index entry.
func checkoutOne(st *gitStorage, root *os.Root, dir *os.File, f *checkoutFile) error {
	f.e = index.Entry{Name: f.path, Hash: f.hash, Mode: f.mode}
	switch f.mode {
	case filemode.Submodule:
		return root.Mkdir(f.path, 0o755) // empty, as git leaves it
	case filemode.Symlink:
		b, err := readObject(st, plumbing.BlobObject, f.hash, maxBlob)
		if err != nil {
			return err
		}
		if err := root.Symlink(string(b), f.path); err != nil {
			return err
		}
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		o, err := st.EncodedObject(plumbing.BlobObject, f.hash)
		if err != nil {
			return err
		}
		r, err := o.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		perm := os.FileMode(0o644)
		if f.mode == filemode.Executable {
			perm = 0o755
		}
		out, err := confine.OpenBeneath(dir, f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		defer out.Close()
		n, err := io.Copy(out, io.LimitReader(r, o.Size()+1))
		if err == nil && n != o.Size() {
			err = fmt.Errorf("blob %s: %d bytes read, %d expected", f.hash, n, o.Size())
		}
		if err != nil {
			return err
		}
		if f.mode == filemode.Deprecated {
			f.e.Mode = filemode.Regular
		}
		fi, err := out.Stat()
		if err != nil {
			return err
		}
		return setStat(&f.e, fi)
	default:
		return fmt.Errorf("mode %o: %w", f.mode, confine.ErrNotRegular)
	}
	fi, err := root.Lstat(f.path)
	if err != nil {
		return err
	}
	return setStat(&f.e, fi)
}

// setStat records what git's index records of a file: its times, device,
// inode, owner and size.
func setStat(e *index.Entry, fi os.FileInfo) error {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.CreatedAt = statCtime(sys)
		e.Dev, e.Inode = uint32(sys.Dev), uint32(sys.Ino)
		e.UID, e.GID = sys.Uid, sys.Gid
	}
	e.ModifiedAt = fi.ModTime()
	e.Size = uint32(fi.Size())
	return nil
}
