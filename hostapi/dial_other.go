//go:build !linux

package hostapi

import (
	"context"
	"errors"
	"net"
)

func dialLongUnix(ctx context.Context, path string) (net.Conn, error) {
	return nil, errors.New("socket path too long for a unix socket address; use a shorter KRUNBOX_HOME")
}
