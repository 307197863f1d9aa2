package confine

import (
	"io/fs"
	"path/filepath"
	"strings"
)

// Within reports whether path is dir or below it. Both are clean and
// absolute; nothing is resolved: it compares the names.
func Within(dir, path string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// LstatNoSymlinks is [os.Lstat] of the absolute path p, refusing a
// symlink in the directories on the way (ELOOP) as [OpenDirNoSymlinks]
// does: p itself may be a symlink, and is described as one.
func LstatNoSymlinks(p string) (fs.FileInfo, error) {
	root, err := OpenRootNoSymlinks(filepath.Dir(p))
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.Lstat(filepath.Base(p))
}
