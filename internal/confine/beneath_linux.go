package confine

import (
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// OpenBeneath opens (or, with O_CREATE, creates with perm) the relative
// name below the directory dir, in one openat2 call refusing a symlink in
// any of its components (RESOLVE_NO_SYMLINKS) and any way out of dir
// (RESOLVE_BENEATH). It is os.Root's OpenFile for code that opens many
// files below one directory: one system call each instead of one per
// component. A refused symlink is ELOOP, a way out EXDEV.
func OpenBeneath(dir *os.File, name string, flags int, perm fs.FileMode) (*os.File, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:    uint64(perm.Perm()),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(int(dir.Fd()), name, how)
		switch {
		case err == unix.EINTR || err == unix.EAGAIN:
			continue
		case err == unix.ENOSYS:
			return openBeneathWalk(dir, name, flags, perm)
		case err != nil:
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}
