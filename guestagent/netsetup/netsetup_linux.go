// Package netsetup sets up the guest's network interface at boot: its
// MTU, addresses, default routes and name servers, with netlink and
// ioctls only (the agent stays small and static).
package netsetup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// ResolvConf is where the name servers are written.
const ResolvConf = "/etc/resolv.conf"

// Configure brings loopback and c's interface up, with c's addresses,
// default routes and name servers. It sets up all it can and returns what
// failed (an IPv6 address on a kernel without IPv6 does not cost the IPv4
// network).
func Configure(c *protocol.NetConfig) error {
	if err := linkUp("lo", 0); err != nil {
		return err
	}
	ifi, err := net.InterfaceByName(c.Interface)
	if err != nil {
		return fmt.Errorf("network interface %s: %w", c.Interface, err)
	}
	if err := linkUp(c.Interface, c.MTU); err != nil {
		return err
	}
	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer unix.Close(nl)
	// Each address and route on its own: a guest kernel without IPv6
	// still gets its IPv4 network.
	var errs []error
	routed := map[uint8]bool{}
	for _, s := range c.Addresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("address %q: %w", s, err))
			continue
		}
		if err := request(nl, unix.RTM_NEWADDR, addrMsg(ifi.Index, p)); err != nil {
			errs = append(errs, fmt.Errorf("add address %s to %s: %w", p, c.Interface, err))
			continue
		}
		routed[family(p.Addr())] = true
	}
	for _, s := range c.Gateways {
		gw, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("gateway %q: %w", s, err))
			continue
		}
		if !routed[family(gw)] {
			continue // no address of that family: said above
		}
		if err := request(nl, unix.RTM_NEWROUTE, routeMsg(ifi.Index, gw)); err != nil {
			errs = append(errs, fmt.Errorf("default route via %s: %w", gw, err))
		}
	}
	if len(c.DNS) > 0 {
		var b strings.Builder
		b.WriteString("# written by the krunbox agent: the host's resolver for this sandbox\n")
		for _, d := range c.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		// An image's resolv.conf may be a symlink (systemd-resolved's
		// stub); this guest has its own.
		if fi, err := os.Lstat(ResolvConf); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			os.Remove(ResolvConf)
		}
		if err := os.WriteFile(ResolvConf, []byte(b.String()), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("name servers: %w", err))
		}
	}
	return errors.Join(errs...)
}

// linkUp sets an interface's MTU (when mtu > 0) and brings it up.
func linkUp(name string, mtu int) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	defer unix.Close(s)
	if mtu > 0 {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint32(uint32(mtu))
		if err := unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr); err != nil {
			return fmt.Errorf("set the MTU of %s: %w", name, err)
		}
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring %s up: %w", name, err)
	}
	return nil
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// rtattr appends a route attribute.
func rtattr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func addrMsg(index int, p netip.Prefix) []byte {
	a := p.Addr()
	var flags uint32
	if a.Is6() {
		flags = unix.IFA_F_NODAD // the link has one other end: the host's stack
	}
	b := []byte{family(a), uint8(p.Bits()), 0, unix.RT_SCOPE_UNIVERSE}
	b = binary.NativeEndian.AppendUint32(b, uint32(index))
	b = rtattr(b, unix.IFA_LOCAL, a.AsSlice())
	b = rtattr(b, unix.IFA_ADDRESS, a.AsSlice())
	b = rtattr(b, unix.IFA_FLAGS, binary.NativeEndian.AppendUint32(nil, flags))
	return b
}

func routeMsg(index int, gw netip.Addr) []byte {
	// struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type; flags.
	b := []byte{family(gw), 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST}
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = rtattr(b, unix.RTA_GATEWAY, gw.AsSlice())
	b = rtattr(b, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(index)))
	return b
}

// request sends one netlink request (creating or replacing) and waits for
// its acknowledgement.
func request(fd int, typ uint16, body []byte) error {
	const seq = 1
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.SizeofNlMsghdr+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_REPLACE)
	msg = binary.NativeEndian.AppendUint32(msg, seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error message")
			}
			if e := int32(binary.NativeEndian.Uint32(m.Data[:4])); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
	}
}
