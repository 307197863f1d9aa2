package treecopy

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errNoXattr reports an extended attribute that does not exist (removed
// since it was listed).
const errNoXattr = unix.ENOATTR

// errCannotClone reports a file system that cannot clone files.
var errCannotClone = errors.New("the file system cannot clone files")

// cloneTree clones the whole tree src to dst with one clonefile(2) call,
// which APFS serves without copying data: modes, owners (for root), times,
// extended attributes and symbolic links come with it. It returns false
// where the file system cannot clone (not APFS, or dst on another volume),
// for the caller to copy instead. clonefile(2) clones a directory's items
// "as if each was cloned individually", so hard links within the tree may
// come out as separate files sharing their data.
//
// This path is compile-checked only: krunbox's development and CI
// machines have no Mac.
func cloneTree(src, dst string) (bool, error) {
	err := unix.Clonefile(src, dst, unix.CLONE_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EXDEV):
		return false, nil
	}
	return false, &os.LinkError{Op: "clonefile", Old: src, New: dst, Err: err}
}

// cloneFile: where cloneTree failed, so would a clone of one file.
func cloneFile(dst, src *os.File) error { return errCannotClone }

// syncFS writes out the file systems (macOS has no syncfs).
func syncFS(string) error {
	unix.Sync()
	return nil
}
