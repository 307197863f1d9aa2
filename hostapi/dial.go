package hostapi

import (
	"context"
	"fmt"
	"net"
)

// maxUnixPath is the longest path a sockaddr_un holds (108 bytes on Linux,
// 104 on macOS, both counting the terminating NUL).
const maxUnixPath = 104 - 1

// UnixDialer returns a DialFunc for the unix socket at path.
func UnixDialer(path string) DialFunc {
	return func(ctx context.Context) (net.Conn, error) { return DialUnix(ctx, path) }
}

// DialUnix connects to the unix socket at path. Sandbox state directories
// can be deep, so paths longer than a sockaddr_un holds are supported on
// Linux, by connecting through /proc/self/fd/N/ of the socket's directory.
func DialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxUnixPath {
		return d.DialContext(ctx, "unix", path)
	}
	c, err := dialLongUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("dial unix %s: %w", path, err)
	}
	return c, nil
}
