package fileevents

import (
	"os"
	"strconv"

	"github.com/fsnotify/fsnotify"
)

// addWatch watches the open directory f through its descriptor
// (/proc/self/fd/N), which the kernel resolves to that very directory
// whatever links now lie on its path, and returns the watch's name. The
// descriptor must stay open while the watch lives: its number names it.
func addWatch(fsw *fsnotify.Watcher, f *os.File, _ string) (string, error) {
	name := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	return name, fsw.Add(name)
}
