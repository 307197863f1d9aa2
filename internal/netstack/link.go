package netstack

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// maxFrame bounds a frame read from the guest: an Ethernet header and the
// MTU, with room for a VLAN tag. A longer length prefix ends the link.
const maxFrame = MTU + 18

// outQueue is how many frames the stack may queue for the guest (at most
// 64 MiB of MTU-sized frames); a full queue drops frames, which TCP then
// resends slowly. One connection's send buffer (Limits.ConnBuffer, 4 MiB
// by default) is 64 such frames.
const outQueue = 1024

// streamLink carries Ethernet frames between the stack and a stream socket
// in the framing of libkrun's krun_add_net_unixstream (passt's and qemu's
// stream netdev): each frame preceded by its length, 32-bit big-endian.
type streamLink struct {
	conn net.Conn
	ch   *channel.Endpoint
	// onEcho, when not nil, gets the guest's echo requests beyond the
	// gateway (which the stack does not see).
	onEcho func(echoRequest) bool
}

func newStreamLink(conn net.Conn) *streamLink {
	return &streamLink{conn: conn, ch: channel.New(outQueue, MTU+header.EthernetMinimumSize, tcpipLinkAddr(GatewayMAC))}
}

// readLoop delivers the guest's frames to the stack until the socket ends.
func (l *streamLink) readLoop() error {
	r := bufio.NewReaderSize(l.conn, 256<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read a frame from the guest: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > maxFrame || n < header.EthernetMinimumSize {
			return fmt.Errorf("read a frame from the guest: bad length %d", n)
		}
		// Read straight into a pooled view that the packet then owns: no
		// copy of a frame of up to 64 KiB.
		v := buffer.NewViewSize(int(n))
		if _, err := io.ReadFull(r, v.AsSlice()); err != nil {
			v.Release()
			return fmt.Errorf("read a frame from the guest: %w", err)
		}
		if dropInbound(v.AsSlice()) {
			if e, ok := parseEcho(v.AsSlice()); ok && l.onEcho != nil {
				l.onEcho(e)
			}
			v.Release()
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithView(v)})
		l.ch.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// maxBatch bounds how many frames writeLoop sends in one write.
const maxBatch = 64

// writeLoop sends the stack's frames to the guest until ctx ends: the
// frames queued at a time in one writev, straight from the packets'
// buffers.
func (l *streamLink) writeLoop(ctx context.Context) error {
	hdrs := make([]byte, 4*maxBatch)
	pkts := make([]*stack.PacketBuffer, 0, maxBatch)
	var iov net.Buffers
	for {
		pkt := l.ch.ReadContext(ctx)
		if pkt == nil {
			return nil
		}
		iov = iov[:0]
		for pkt != nil {
			slices := pkt.AsSlices()
			n := 0
			for _, s := range slices {
				n += len(s)
			}
			hdr := hdrs[4*len(pkts) : 4*len(pkts)+4]
			binary.BigEndian.PutUint32(hdr, uint32(n))
			iov = append(append(iov, hdr), slices...)
			pkts = append(pkts, pkt)
			if len(pkts) == maxBatch {
				break
			}
			pkt = l.ch.Read()
		}
		batch := iov // WriteTo consumes its receiver
		_, err := batch.WriteTo(l.conn)
		for _, p := range pkts {
			p.DecRef()
		}
		pkts = pkts[:0]
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("write a frame to the guest: %w", err)
		}
	}
}

// dropInbound reports whether a frame from the guest is an ICMP echo
// request to anything but the gateway. The stack accepts packets for every
// address (it forwards), so it would answer those echoes itself, telling
// the guest that any host is up: readLoop hands those to onEcho instead.
func dropInbound(frame []byte) bool {
	eth := header.Ethernet(frame)
	payload := frame[header.EthernetMinimumSize:]
	switch eth.Type() {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(payload)
		if !ip.IsValid(len(payload)) || ip.TransportProtocol() != header.ICMPv4ProtocolNumber {
			return false
		}
		if ip.DestinationAddress() == tcpipAddr(GatewayIPv4) {
			return false
		}
		icmp := header.ICMPv4(ip.Payload())
		return len(icmp) < header.ICMPv4MinimumSize || icmp.Type() == header.ICMPv4Echo
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(payload)
		if !ip.IsValid(len(payload)) || ip.TransportProtocol() != header.ICMPv6ProtocolNumber {
			return false
		}
		if ip.DestinationAddress() == tcpipAddr(GatewayIPv6) {
			return false
		}
		icmp := header.ICMPv6(ip.Payload())
		return len(icmp) < header.ICMPv6MinimumSize || icmp.Type() == header.ICMPv6EchoRequest
	}
	return false
}
