package confine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The functions below walk or fill a tree one component at a time, below
// the descriptor of an open directory, so that what is checked is what is
// used: a name is looked up once, never through a symlink, and the type
// of what was opened is decided from its descriptor (f.Stat), never from
// an earlier look at its path. Every name is a single component.

// ErrSymlink is returned (wrapped) by OpenAt and OpenDirAt for a name that
// is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link")

// OpenParent opens the directory holding p, resolved by path once (so a
// symlink the user wrote in p is followed), and returns it with p's last
// component. For a p ending in ".", ".." or "/", p itself is opened and
// the name is ".".
func OpenParent(p string) (dir *os.File, name string, err error) {
	p = filepath.Clean(p)
	dirPath, name := filepath.Dir(p), filepath.Base(p)
	if name == "." || name == ".." || name == string(filepath.Separator) {
		dirPath, name = p, "."
	}
	fd, err := openRetry(unix.AT_FDCWD, dirPath, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, "", &fs.PathError{Op: "open", Path: dirPath, Err: err}
	}
	return os.NewFile(uintptr(fd), dirPath), name, nil
}

// OpenAt opens name in dir for reading without following a symlink at
// name (an error wrapping ErrSymlink), without blocking on a FIFO and
// without making a terminal the controlling one. The caller decides what
// it got from the file's Stat. A socket cannot be opened: the error then
// wraps ErrNotRegular.
func OpenAt(dir *os.File, name string) (*os.File, error) {
	return openAt(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
}

// OpenDirAt opens the directory name in dir, never through a symlink (an
// error wrapping ErrSymlink); for anything else but a directory the error
// wraps syscall.ENOTDIR.
func OpenDirAt(dir *os.File, name string) (*os.File, error) {
	return openAt(dir, name, unix.O_RDONLY|unix.O_DIRECTORY)
}

func openAt(dir *os.File, name string, flags int) (*os.File, error) {
	p := filepath.Join(dir.Name(), name)
	fd, err := openRetry(int(dir.Fd()), name, flags|unix.O_NOFOLLOW)
	if err == unix.ELOOP || (err == unix.ENOTDIR && flags&unix.O_DIRECTORY != 0) {
		// O_NOFOLLOW fails with ELOOP on a symlink (with O_DIRECTORY, some
		// systems say ENOTDIR): tell the two apart.
		var st unix.Stat_t
		if unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, &fs.PathError{Op: "open", Path: p, Err: ErrSymlink}
		}
	}
	if err == unix.ENXIO || err == unix.EOPNOTSUPP {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("%w (a socket)", ErrNotRegular)}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openRetry is openat, retried on EINTR; a file it creates gets mode 0600.
func openRetry(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, 0o600)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// ReadlinkAt returns the target of the symbolic link name in dir.
func ReadlinkAt(dir *os.File, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(int(dir.Fd()), name, buf)
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: filepath.Join(dir.Name(), name), Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// MkdirAt makes the directory name in dir (mode perm, less the umask), or
// takes the one there, and returns it open. A symlink at name is removed
// and replaced, never followed; anything else but a directory there is an
// error.
func MkdirAt(dir *os.File, name string, perm fs.FileMode) (*os.File, error) {
	p := filepath.Join(dir.Name(), name)
	for range 3 {
		err := unix.Mkdirat(int(dir.Fd()), name, uint32(perm.Perm()))
		if err != nil && err != unix.EEXIST {
			return nil, &fs.PathError{Op: "mkdir", Path: p, Err: err}
		}
		d, err := OpenDirAt(dir, name)
		switch {
		case errors.Is(err, ErrSymlink):
			if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && err != unix.ENOENT {
				return nil, &fs.PathError{Op: "remove", Path: p, Err: err}
			}
			continue
		case errors.Is(err, unix.ENOENT):
			continue // removed meanwhile: make it again
		case errors.Is(err, unix.ENOTDIR):
			return nil, &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("a file that is not a directory is in the way")}
		}
		return d, err
	}
	return nil, &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("replaced again and again while being made")}
}

// ReplaceAt puts a new entry at name in dir atomically, replacing (never
// following) whatever non-directory is there: create makes the entry
// under the temporary name it is given, in dir, and ReplaceAt renames it
// over name, or removes it when create or the rename fails.
func ReplaceAt(dir *os.File, name string, create func(tmp string) error) error {
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := "." + name + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	if len(tmp) > 255 {
		tmp = "." + hex.EncodeToString(rnd[:]) + ".tmp"
	}
	err := create(tmp)
	if err == nil {
		if err = unix.Renameat(int(dir.Fd()), tmp, int(dir.Fd()), name); err != nil {
			err = &os.LinkError{Op: "rename", Old: filepath.Join(dir.Name(), tmp), New: filepath.Join(dir.Name(), name), Err: err}
		}
	}
	if err != nil {
		unix.Unlinkat(int(dir.Fd()), tmp, 0)
		return err
	}
	return nil
}

// CreateAt creates the new file name in dir, exclusively (an existing
// entry, symlink or not, is an error) with mode 0600, for writing.
func CreateAt(dir *os.File, name string) (*os.File, error) {
	return openAt(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
}

// SymlinkAt creates name in dir as a symbolic link to target.
func SymlinkAt(target string, dir *os.File, name string) error {
	if err := unix.Symlinkat(target, int(dir.Fd()), name); err != nil {
		return &os.LinkError{Op: "symlink", Old: target, New: filepath.Join(dir.Name(), name), Err: err}
	}
	return nil
}

// TypeAt returns the type bits (fs.ModeType) of name in dir; a symlink
// is described itself.
func TypeAt(dir *os.File, name string) (fs.FileMode, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, &fs.PathError{Op: "lstat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return unixType(uint32(st.Mode)), nil
}

// unixType is the fs type bits of an st_mode.
func unixType(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return 0
}
