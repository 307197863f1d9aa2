// Package confine is how krunbox's host-side code touches a file tree that
// something untrusted can shape: a sandbox's root (the image's files and
// whatever the guest wrote there), the workspace and every other share
// (the guest writes them live), a cloned repository's files.
//
// Such a tree may hold symlinks to anywhere on the host, hard links, FIFOs
// that block an open forever, sockets, devices, sparse files of any size
// and names with newlines, and may change between a check and a use. So
// nothing here re-resolves a path after checking it: names are resolved
// below a directory handle ([os.Root]: symlinks may not lead out of it,
// absolute ones are refused), files are opened without following a last
// symlink and without blocking, checked on the open descriptor, and read
// with a bound. Code outside this package must not call os.MkdirAll,
// os.WriteFile, os.ReadFile or os.Stat on such paths.
package confine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DefaultMaxRead bounds what ReadFile callers read of small metadata files
// (a .git file, a git config) when they have no better bound.
const DefaultMaxRead = 1 << 20

// ErrTooLarge is returned by the readers for a file larger than asked for.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is returned by the readers for anything but a regular
// file: a FIFO, a socket, a device, a directory, a symlink.
var ErrNotRegular = errors.New("not a regular file")

// ReadFile reads the regular file name below root, at most max bytes. A
// last component that is a symlink, a FIFO, a socket or a device is
// refused without blocking (ErrNotRegular), and so is a file over max
// bytes (ErrTooLarge), whatever size it claims.
func ReadFile(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRegular(f, filepath.Join(root.Name(), name), max)
}

// ReadFileNoSymlinks reads the regular file at the absolute path p, at
// most max bytes, refusing a symlink in any component of p, and anything
// ReadFile refuses.
func ReadFileNoSymlinks(p string, max int64) ([]byte, error) {
	f, err := openNoSymlinks(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readRegular(f, p, max)
}

func readRegular(f *os.File, name string, max int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))}
	}
	if fi.Size() > max {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: %d bytes, at most %d read", ErrTooLarge, fi.Size(), max)}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	if int64(len(b)) > max {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: over %d bytes", ErrTooLarge, max)}
	}
	return b, nil
}

// kind names a file type for errors.
func kind(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeDir:
		return "a directory"
	case fs.ModeSymlink:
		return "a symlink"
	case fs.ModeNamedPipe:
		return "a FIFO"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	}
	return "an irregular file"
}

// WriteFile replaces the file name below root with data, atomically:
// readers see the old content or the new. The temporary file is created
// exclusively in name's directory and renamed over name, so a symlink
// planted at name is replaced, never followed, and a directory on the
// way is resolved below root.
func WriteFile(root *os.Root, name string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(filepath.Clean(name))
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+base+"."+hex.EncodeToString(rnd[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// MkdirAll makes the directory name below root and its missing parents,
// like os.MkdirAll, except that an entry on the way that is not a
// directory (a symlink, a file, a FIFO) is replaced by one when replace is
// true, and is an error otherwise. It never creates anything outside root.
func MkdirAll(root *os.Root, name string, perm fs.FileMode, replace bool) error {
	name = filepath.Clean(name)
	if name == "." || name == "/" {
		return nil
	}
	if dir := filepath.Dir(name); dir != "." && dir != "/" {
		if err := MkdirAll(root, dir, perm, replace); err != nil {
			return err
		}
	}
	fi, err := root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil && !replace:
		return &fs.PathError{Op: "mkdir", Path: name, Err: fmt.Errorf("%s is in the way", kind(fi.Mode()))}
	case err == nil:
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := root.Mkdir(name, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	// Made, or made by someone else meanwhile: it must be a directory.
	fi, err = root.Lstat(name)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "mkdir", Path: name, Err: fmt.Errorf("%s is in the way", kind(fi.Mode()))}
	}
	return nil
}

// OpenDirNoSymlinks opens the directory at the absolute path p, refusing a
// symlink in any of its components: for a path resolved once (with
// filepath.EvalSymlinks) and recorded, it proves that nothing on the way
// was replaced by a link since. The file is opened for reading its
// entries (and as the base of *at calls).
func OpenDirNoSymlinks(p string) (*os.File, error) {
	f, err := openNoSymlinks(p, os.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	return f, nil
}
