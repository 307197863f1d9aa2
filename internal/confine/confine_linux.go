package confine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openNoSymlinks opens p with openat2(RESOLVE_NO_SYMLINKS): a symlink in
// any component fails with ELOOP, which is reported as such.
func openNoSymlinks(p string, flags int) (*os.File, error) {
	if !filepath.IsAbs(p) {
		return nil, &fs.PathError{Op: "open", Path: p, Err: errors.New("not an absolute path")}
	}
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, p, how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ELOOP:
			return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("a component is a symlink (%w)", err)}
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		return os.NewFile(uintptr(fd), p), nil
	}
}
