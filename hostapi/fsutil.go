package hostapi

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// removeTree removes path and everything below it, like os.RemoveAll, also
// when directories below lack the owner's write or search permission: a
// guest may chmod the files of its writable layer, and overlayfs leaves its
// work directory at mode 0.
func removeTree(path string) error {
	err := os.RemoveAll(path)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	// WalkDir visits a directory before reading it: open it up first.
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
