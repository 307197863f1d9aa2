package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openBeneathWalk is OpenBeneath one component at a time, each opened
// with O_NOFOLLOW below the descriptor of its parent, for kernels without
// openat2.
func openBeneathWalk(dir *os.File, name string, flags int, perm fs.FileMode) (*os.File, error) {
	clean := filepath.Clean(name)
	if filepath.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return nil, &fs.PathError{Op: "open", Path: name, Err: unix.EXDEV}
	}
	parts := strings.Split(clean, "/")
	fd, err := unix.Dup(int(dir.Fd()))
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	for i, part := range parts {
		fl := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			fl = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(fd, part, fl, uint32(perm.Perm()))
		unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) && i < len(parts)-1 {
				err = unix.ELOOP // a symlink or a file on the way
			}
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), name), nil
}
