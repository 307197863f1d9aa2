package treecopy

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errNoXattr reports an extended attribute that does not exist (removed
// since it was listed).
const errNoXattr = unix.ENODATA

// errCannotClone reports a file system that cannot clone files.
var errCannotClone = errors.New("the file system cannot clone files")

// cloneTree clones nothing on Linux, which has no call to clone a tree.
func cloneTree(src, dst string) (bool, error) { return false, nil }

// cloneFile makes dst share src's data with the FICLONE ioctl. It returns
// errCannotClone where the file system (ext4, tmpfs...) or the pair of
// files (on two file systems) does not allow it.
func cloneFile(dst, src *os.File) error {
	err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EBADF):
		return errCannotClone
	}
	return err
}

// syncFS writes out the file system holding path (syncfs(2)).
func syncFS(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return &os.PathError{Op: "syncfs", Path: path, Err: err}
	}
	return nil
}
