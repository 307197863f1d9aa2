//go:build unix

package hostapi

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// allocated is the host space a file takes: its blocks, not its size
// (a sparse file's holes take none).
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// availableSpace is what an unprivileged user may still write on the file
// system of dir.
func availableSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
