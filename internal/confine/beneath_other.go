//go:build !linux

package confine

import (
	"io/fs"
	"os"
)

// OpenBeneath opens (or, with O_CREATE, creates with perm) the relative
// name below the directory dir, refusing a symlink in any of its
// components and any way out of dir: each component is opened with
// O_NOFOLLOW below the descriptor of its parent.
func OpenBeneath(dir *os.File, name string, flags int, perm fs.FileMode) (*os.File, error) {
	return openBeneathWalk(dir, name, flags, perm)
}
