package netpolicy

import (
	"net/netip"
)

// blockedPrefixes are the ranges public mode refuses besides what
// netip.Addr's own predicates classify (loopback, private, link-local,
// multicast, unspecified).
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // CGNAT, RFC 6598
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking, often internal
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast included
	netip.MustParsePrefix("fc00::/7"),       // ULA
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("::/96"),          // IPv4-compatible
	netip.MustParsePrefix("100::/64"),       // discard
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("2002::/16"),      // 6to4: embeds any IPv4
	netip.MustParsePrefix("2001::/32"),      // Teredo: embeds any IPv4
}

// nat64 is the well-known NAT64 prefix: its last 32 bits are an IPv4
// address, classified as that address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Class says why an address is not public, or "" when it is.
func Class(a netip.Addr) string {
	a = a.Unmap()
	if nat64.Contains(a) {
		b := a.As16()
		return Class(netip.AddrFrom4([4]byte(b[12:])))
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return "reserved " + p.String()
		}
	}
	return ""
}
