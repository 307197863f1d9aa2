//go:build !linux

package fileevents

import (
	"fmt"
	"os"

	"github.com/fsnotify/fsnotify"
)

// addWatch watches the directory f by its path p (fsnotify's kqueue opens
// it again), then checks that what p names is still f: a directory
// replaced by a link meanwhile is unwatched and refused.
func addWatch(fsw *fsnotify.Watcher, f *os.File, p string) (string, error) {
	if err := fsw.Add(p); err != nil {
		return "", err
	}
	want, err := f.Stat()
	if err != nil {
		fsw.Remove(p)
		return "", err
	}
	got, err := os.Lstat(p)
	if err != nil || !os.SameFile(want, got) {
		fsw.Remove(p)
		return "", fmt.Errorf("%s changed while it was being watched", p)
	}
	return p, nil
}
