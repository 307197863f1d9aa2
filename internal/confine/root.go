package confine

import (
	"errors"
	"io/fs"
	"os"
)

// OpenRootNoSymlinks opens the directory at the absolute path p as an
// [os.Root], refusing a symlink in any component of p as
// [OpenDirNoSymlinks] does: for a path resolved once and recorded, the
// root is the directory found then, not one a link planted since leads
// to. Names below the root are then resolved as [os.Root] does.
func OpenRootNoSymlinks(p string) (*os.Root, error) {
	f, err := OpenDirNoSymlinks(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want, err := f.Stat()
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(p)
	if err != nil {
		return nil, err
	}
	// os.OpenRoot resolved p again: it must have found the directory
	// opened without symlinks, or a link was planted in between.
	got, err := root.Stat(".")
	if err == nil && !os.SameFile(want, got) {
		err = &fs.PathError{Op: "open", Path: p, Err: errors.New("replaced while being opened")}
	}
	if err != nil {
		root.Close()
		return nil, err
	}
	return root, nil
}
