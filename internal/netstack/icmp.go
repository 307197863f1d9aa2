package netstack

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// maxEchoesInFlight bounds the guest's echo requests forwarded at once
// (more are dropped), and echoTimeout how long one waits for its reply.
const (
	maxEchoesInFlight = 16
	echoTimeout       = 5 * time.Second
)

// echoRequest is an ICMP echo request the guest sent beyond the gateway.
type echoRequest struct {
	src, dst netip.Addr
	id, seq  uint16
	data     []byte
}

// parseEcho returns the echo request in a frame from the guest (a copy of
// its data), if it is a well-formed one.
func parseEcho(frame []byte) (echoRequest, bool) {
	eth := header.Ethernet(frame)
	payload := frame[header.EthernetMinimumSize:]
	var e echoRequest
	switch eth.Type() {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(payload)
		if !ip.IsValid(len(payload)) || ip.TransportProtocol() != header.ICMPv4ProtocolNumber || ip.More() || ip.FragmentOffset() != 0 {
			return e, false
		}
		m := header.ICMPv4(ip.Payload())
		if len(m) < header.ICMPv4MinimumSize || m.Type() != header.ICMPv4Echo {
			return e, false
		}
		e.id, e.seq, e.data = m.Ident(), m.Sequence(), append([]byte(nil), m.Payload()...)
		e.src, e.dst = fromTCPIP(ip.SourceAddress()), fromTCPIP(ip.DestinationAddress())
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(payload)
		if !ip.IsValid(len(payload)) || ip.TransportProtocol() != header.ICMPv6ProtocolNumber {
			return e, false
		}
		m := header.ICMPv6(ip.Payload())
		if len(m) < header.ICMPv6MinimumSize || m.Type() != header.ICMPv6EchoRequest {
			return e, false
		}
		e.id, e.seq, e.data = m.Ident(), m.Sequence(), append([]byte(nil), m.Payload()...)
		e.src, e.dst = fromTCPIP(ip.SourceAddress()), fromTCPIP(ip.DestinationAddress())
	default:
		return e, false
	}
	return e, true
}

// forwardEcho sends the guest's echo request from the host, when the
// policy allows its destination (as a connection to it on every port),
// and delivers the reply to the guest. A refused echo gets no answer and
// is logged; one beyond maxEchoesInFlight, or one the host cannot send
// (no ICMP socket for the runner), gets none either. It reports whether
// the echo went on to the host.
func (st *Stack) forwardEcho(e echoRequest) bool {
	dst := netip.AddrPortFrom(e.dst, 0)
	if d := st.check(dst); !d.Allowed {
		st.refuse(Refusal{Proto: "icmp", Name: d.Name, Addr: e.dst.String(), Reason: d.Reason})
		return false
	}
	select {
	case st.echoSlots <- struct{}{}:
	default:
		return false
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer func() { <-st.echoSlots }()
		data, err := st.echo(st.hostAddr(dst).Addr(), e)
		if err != nil {
			st.cfg.Log.Debug("network: echo", "addr", e.dst, "err", err)
			return
		}
		proto, pkt := echoReply(e, data)
		if err := st.s.WritePacketToRemote(nicID, tcpipLinkAddr(GuestMAC), proto, buffer.MakeWithData(pkt)); err != nil {
			st.cfg.Log.Debug("network: echo reply", "addr", e.dst, "err", err)
		}
	}()
	return true
}

// echo sends e to to from the host and returns the data of its reply. It
// uses an unprivileged ICMP socket (a "ping socket", which needs
// net.ipv4.ping_group_range to include the runner's group) or, failing
// that, a raw one (root).
func (st *Stack) echo(to netip.Addr, e echoRequest) ([]byte, error) {
	network, raw, proto := "udp4", "ip4:icmp", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if to.Is6() {
		network, raw, proto = "udp6", "ip6:ipv6-icmp", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var dst net.Addr = &net.UDPAddr{IP: to.AsSlice()}
	c, err := icmp.ListenPacket(network, "")
	if err != nil {
		// Ping sockets are refused: a raw socket matches replies by
		// address, identifier and sequence number.
		if c, err = icmp.ListenPacket(raw, ""); err != nil {
			return nil, fmt.Errorf("no ICMP socket: %w", err)
		}
		dst = &net.IPAddr{IP: to.AsSlice()}
	}
	defer c.Close()
	stop := context.AfterFunc(st.ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(echoTimeout))
	b, err := (&icmp.Message{Type: reqType, Body: &icmp.Echo{ID: int(e.id), Seq: int(e.seq), Data: e.data}}).Marshal(nil)
	if err != nil {
		return nil, err
	}
	if _, err := c.WriteTo(b, dst); err != nil {
		return nil, err
	}
	_, isRaw := dst.(*net.IPAddr)
	buf := make([]byte, 1<<16)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return nil, err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != replyType {
			continue
		}
		r, ok := m.Body.(*icmp.Echo)
		// A ping socket's replies are its own, with the identifier the
		// kernel chose; a raw socket sees every reply to the host.
		if !ok || r.Seq != int(e.seq) || !bytes.Equal(r.Data, e.data) || isRaw && (r.ID != int(e.id) || from.String() != dst.String()) {
			continue
		}
		return r.Data, nil
	}
}

// echoReply is the IP packet answering e with data, from e's destination.
func echoReply(e echoRequest, data []byte) (proto tcpip.NetworkProtocolNumber, pkt []byte) {
	if e.dst.Is4() {
		pkt = make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize+len(data))
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber), SrcAddr: tcpipAddr(e.dst), DstAddr: tcpipAddr(e.src)})
		ip.SetChecksum(^ip.CalculateChecksum())
		m := header.ICMPv4(ip.Payload())
		m.SetType(header.ICMPv4EchoReply)
		m.SetIdent(e.id)
		m.SetSequence(e.seq)
		copy(m.Payload(), data)
		m.SetChecksum(^checksum.Checksum(m, 0))
		return header.IPv4ProtocolNumber, pkt
	}
	pkt = make([]byte, header.IPv6MinimumSize+header.ICMPv6MinimumSize+len(data))
	ip := header.IPv6(pkt)
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(pkt) - header.IPv6MinimumSize), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 64, SrcAddr: tcpipAddr(e.dst), DstAddr: tcpipAddr(e.src)})
	m := header.ICMPv6(ip.Payload())
	m.SetType(header.ICMPv6EchoReply)
	m.SetIdent(e.id)
	m.SetSequence(e.seq)
	copy(m.Payload(), data)
	m.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: m, Src: tcpipAddr(e.dst), Dst: tcpipAddr(e.src)}))
	return header.IPv6ProtocolNumber, pkt
}
