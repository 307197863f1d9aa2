// Package netstack is the host side of a sandbox's network: a userspace
// TCP/IP stack that a guest's virtio-net device is connected to, and the
// forwarding of the guest's connections through the sandbox's policy.
package netstack

import (
	"context"
	"net"
	"net/netip"
)

// Interceptor takes over a guest's TCP connection that the policy allowed.
type Interceptor interface {
	// Intercepts reports whether connections to host:port are handed to Serve.
	// host is the name the guest resolved through the sandbox's DNS ("" if none).
	Intercepts(host string, port uint16) bool
	// Serve handles guest, a connection the guest opened to host at dst; dial
	// opens the upstream connection (through the same policy).
	Serve(ctx context.Context, guest net.Conn, host string, dst netip.AddrPort,
		dial func(ctx context.Context) (net.Conn, error)) error
}
