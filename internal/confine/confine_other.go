//go:build !linux

package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// openNoSymlinks opens p one component at a time, each with O_NOFOLLOW
// below the descriptor of its parent.
func openNoSymlinks(p string, flags int) (*os.File, error) {
	if !filepath.IsAbs(p) {
		return nil, &fs.PathError{Op: "open", Path: p, Err: errors.New("not an absolute path")}
	}
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	parts := strings.Split(strings.Trim(filepath.Clean(p), "/"), "/")
	if len(parts) == 1 && parts[0] == "" {
		parts = nil
	}
	for i, part := range parts {
		fl := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(parts)-1 {
			fl = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		next, err := unix.Openat(fd, part, fl, 0)
		unix.Close(fd)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), p), nil
}
