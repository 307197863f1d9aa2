package hostapi

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// dialLongUnix connects to a socket whose path is too long for a
// sockaddr_un through a short name for it: /proc/self/fd/N/BASE, N being an
// O_PATH descriptor of its directory.
func dialLongUnix(ctx context.Context, path string) (net.Conn, error) {
	dir, base := filepath.Split(path)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	short := fmt.Sprintf("/proc/self/fd/%d/%s", fd, base)
	if len(short) > maxUnixPath {
		return nil, fmt.Errorf("socket name %q too long even relative to its directory", base)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", short)
}
