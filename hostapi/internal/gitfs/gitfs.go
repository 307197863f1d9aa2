// Package gitfs is a billy file system confined to one directory, for
// go-git to read (and, for the user's repository, write) a .git directory
// that something untrusted may have shaped: a sandbox's .git, which the
// guest writes, or a cloned repository's.
//
// Every name is resolved below an [os.Root] (a symlink may not lead out,
// an absolute one is refused); a file is opened without following a last
// symlink and without blocking, and only a regular file or a directory is
// used (a FIFO, a socket, a device is refused at once, never waited on); a
// file over MaxFile (a pack) or MaxMeta (anything else) bytes is refused.
// objects/info/alternates reads as absent: go-git would open the
// directories it names on the host, and they are whatever the guest wrote
// there.
package gitfs

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-git/go-billy/v5"

	"github.com/krunbox/krunbox/internal/confine"
)

// Bounds of the size of one file of a .git directory opened through the
// file system: a pack (objects/pack/) of a large repository, at most
// MaxFile; any other file (refs, packed-refs, the index, a loose object),
// MaxMeta.
const (
	MaxFile = 8 << 30
	MaxMeta = 256 << 20
)

// FS is a billy.Filesystem confined below a directory.
type FS struct {
	root *os.Root
	// base is the directory root was opened on, for Root().
	base string
	// dir is the path of this FS below root ("" for root itself).
	dir string
}

// Open opens the directory at the absolute path dir, with no symlink in
// any component, as an FS. Close releases it.
func Open(dir string) (*FS, error) {
	r, err := confine.OpenRootNoSymlinks(dir)
	if err != nil {
		return nil, err
	}
	return &FS{root: r, base: dir}, nil
}

// Close releases the directory.
func (f *FS) Close() error { return f.root.Close() }

// name maps a billy name to a name below the root.
func (f *FS) name(p string) (string, error) {
	p = filepath.ToSlash(p)
	if strings.HasPrefix(p, "/") {
		p = strings.TrimPrefix(path.Clean(p), "/")
	}
	p = path.Clean(path.Join(f.dir, p))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", &fs.PathError{Op: "open", Path: p, Err: billy.ErrCrossedBoundary}
	}
	if p == "objects/info/alternates" || strings.HasSuffix(p, "/objects/info/alternates") {
		return "", &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return p, nil
}

// Create creates or truncates the file filename.
func (f *FS) Create(filename string) (billy.File, error) {
	return f.OpenFile(filename, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// Open opens filename for reading.
func (f *FS) Open(filename string) (billy.File, error) {
	return f.OpenFile(filename, os.O_RDONLY, 0)
}

// OpenFile opens filename with flag; a file it creates gets perm. Its
// parents are created when it is created.
func (f *FS) OpenFile(filename string, flag int, perm os.FileMode) (billy.File, error) {
	n, err := f.name(filename)
	if err != nil {
		return nil, err
	}
	if flag&os.O_CREATE != 0 {
		if d := path.Dir(n); d != "." {
			if err := confine.MkdirAll(f.root, d, 0o755, false); err != nil {
				return nil, err
			}
		}
	}
	fh, err := f.root.OpenFile(n, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, perm)
	if err != nil {
		return nil, err
	}
	fi, err := fh.Stat()
	if err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		err = &fs.PathError{Op: "open", Path: n, Err: confine.ErrNotRegular}
	}
	limit := int64(MaxMeta)
	if strings.HasPrefix(n, "objects/pack/") || strings.Contains(n, "/objects/pack/") {
		limit = MaxFile
	}
	if err == nil && fi.Size() > limit {
		err = &fs.PathError{Op: "open", Path: n, Err: fmt.Errorf("%w: %d bytes, at most %d", confine.ErrTooLarge, fi.Size(), limit)}
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	return &file{File: fh, name: filename}, nil
}

// Stat returns filename's information; a last symlink is not followed.
func (f *FS) Stat(filename string) (os.FileInfo, error) { return f.Lstat(filename) }

// Lstat returns filename's information without following a last symlink.
func (f *FS) Lstat(filename string) (os.FileInfo, error) {
	n, err := f.name(filename)
	if err != nil {
		return nil, err
	}
	return f.root.Lstat(n)
}

// Rename renames oldpath to newpath, replacing it.
func (f *FS) Rename(oldpath, newpath string) error {
	o, err := f.name(oldpath)
	if err != nil {
		return err
	}
	n, err := f.name(newpath)
	if err != nil {
		return err
	}
	if d := path.Dir(n); d != "." {
		if err := confine.MkdirAll(f.root, d, 0o755, false); err != nil {
			return err
		}
	}
	return f.root.Rename(o, n)
}

// Remove removes filename.
func (f *FS) Remove(filename string) error {
	n, err := f.name(filename)
	if err != nil {
		return err
	}
	return f.root.Remove(n)
}

// Join joins names.
func (f *FS) Join(elem ...string) string { return path.Join(elem...) }

// TempFile creates a new file in dir, named prefix and random letters.
func (f *FS) TempFile(dir, prefix string) (billy.File, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	return f.OpenFile(path.Join(dir, prefix+hex.EncodeToString(rnd[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
}

// ReadDir lists the directory dir.
func (f *FS) ReadDir(dir string) ([]os.FileInfo, error) {
	n, err := f.name(dir)
	if err != nil {
		return nil, err
	}
	d, err := f.root.OpenFile(n, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]os.FileInfo, 0, len(entries))
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			out = append(out, fi)
		}
	}
	return out, nil
}

// MkdirAll makes the directory filename and its parents; an entry on the
// way that is not a directory is an error.
func (f *FS) MkdirAll(filename string, perm os.FileMode) error {
	n, err := f.name(filename)
	if err != nil {
		return err
	}
	return confine.MkdirAll(f.root, n, perm, false)
}

// Symlink is not supported: git needs none in a .git directory.
func (f *FS) Symlink(target, link string) error {
	return &fs.PathError{Op: "symlink", Path: link, Err: billy.ErrNotSupported}
}

// Readlink reads the symlink link.
func (f *FS) Readlink(link string) (string, error) {
	n, err := f.name(link)
	if err != nil {
		return "", err
	}
	return f.root.Readlink(n)
}

// Chroot returns the FS confined to the directory p below this one (still
// confined to the root it was opened on).
func (f *FS) Chroot(p string) (billy.Filesystem, error) {
	n, err := f.name(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.root.Lstat(n)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, &fs.PathError{Op: "chroot", Path: n, Err: errors.New("not a directory")}
	}
	return &FS{root: f.root, base: f.base, dir: n}, nil
}

// Root returns the directory this FS is confined to.
func (f *FS) Root() string { return filepath.Join(f.base, f.dir) }

// Capabilities says what the FS does.
func (f *FS) Capabilities() billy.Capability {
	return billy.DefaultCapabilities &^ billy.LockCapability
}

type file struct {
	*os.File
	name string
}

func (f *file) Name() string  { return f.name }
func (f *file) Lock() error   { return nil }
func (f *file) Unlock() error { return nil }
