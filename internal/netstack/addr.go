package netstack

import (
	"net"
	"net/netip"
)

// The guest's network: one link to the host's stack, which is the gateway
// and the DNS server. The guest agent sets the guest side up at boot.
var (
	// GatewayIPv4 is the host stack's IPv4 address: the guest's default
	// route and DNS server.
	GatewayIPv4 = netip.MustParseAddr("192.168.127.1")
	// GuestIPv4 is the guest's IPv4 address, in PrefixIPv4.
	GuestIPv4 = netip.MustParseAddr("192.168.127.2")
	// PrefixIPv4 is the guest link's IPv4 subnet.
	PrefixIPv4 = netip.MustParsePrefix("192.168.127.0/24")
	// GatewayIPv6 is the host stack's IPv6 address.
	GatewayIPv6 = netip.MustParseAddr("fd7b:6b62:6f78::1")
	// GuestIPv6 is the guest's IPv6 address, in PrefixIPv6.
	GuestIPv6 = netip.MustParseAddr("fd7b:6b62:6f78::2")
	// PrefixIPv6 is the guest link's IPv6 subnet (a ULA prefix).
	PrefixIPv6 = netip.MustParsePrefix("fd7b:6b62:6f78::/64")
	// GuestMAC is the MAC address of the guest's interface.
	GuestMAC = net.HardwareAddr{0x5a, 0x94, 0xef, 0xe4, 0x0c, 0xee}
	// GatewayMAC is the MAC address of the host stack on the link.
	GatewayMAC = net.HardwareAddr{0x5a, 0x94, 0xef, 0xe4, 0x0c, 0x01}
)

// MTU is the IP MTU of the guest link: passt's 65520, so that one frame
// carries up to 64 KiB of a TCP stream instead of 1460 bytes. The link
// needs no offloads for it: libkrun's unixstream device passes frames of
// up to 65550 bytes (MAX_BUFFER_SIZE less its virtio-net header), and the
// guest's driver receives them once it is offered guest TSO
// (hostapi/vmm's netFeatures: big receive buffers).
const MTU = 65520

// isGateway reports whether a is the host stack's own address.
func isGateway(a netip.Addr) bool {
	a = a.Unmap()
	return a == GatewayIPv4 || a == GatewayIPv6
}
