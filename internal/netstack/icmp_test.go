package netstack

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	icmpproto "gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// canPing reports whether this process can send ICMP echoes to the
// host's loopback (a ping socket or a raw socket).
func canPing() bool {
	for _, network := range []string{"udp4", "ip4:icmp"} {
		if c, err := icmp.ListenPacket(network, ""); err == nil {
			c.Close()
			return true
		}
	}
	return false
}

// guestPing is an ICMP echo endpoint of the test's guest stack.
type guestPing struct {
	ep tcpip.Endpoint
	ch chan struct{}
}

func newGuestPing(t *testing.T, tn *testNet) *guestPing {
	var wq waiter.Queue
	ep, err := tn.guest.NewEndpoint(icmpproto.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	we, ch := waiter.NewChannelEntry(waiter.EventIn)
	wq.EventRegister(&we)
	t.Cleanup(func() { wq.EventUnregister(&we) })
	return &guestPing{ep: ep, ch: ch}
}

// send sends an echo request with seq and data to dst.
func (g *guestPing) send(t *testing.T, dst string, seq uint16, data []byte) {
	m := header.ICMPv4(make([]byte, header.ICMPv4MinimumSize+len(data)))
	m.SetType(header.ICMPv4Echo)
	m.SetSequence(seq)
	copy(m.Payload(), data)
	var r bytes.Reader
	r.Reset(m)
	if _, err := g.ep.Write(&r, tcpip.WriteOptions{To: &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(netip.MustParseAddr(dst))}}); err != nil {
		t.Fatalf("ping %s: %v", dst, err)
	}
}

// reply waits for the next echo reply and returns its sequence number,
// its data and its source.
func (g *guestPing) reply(t *testing.T) (uint16, []byte, tcpip.Address) {
	deadline := time.After(10 * time.Second)
	for {
		var b bytes.Buffer
		res, err := g.ep.Read(&b, tcpip.ReadOptions{NeedRemoteAddr: true})
		if _, ok := err.(*tcpip.ErrWouldBlock); ok {
			select {
			case <-g.ch:
				continue
			case <-deadline:
				t.Fatal("no echo reply")
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		m := header.ICMPv4(b.Bytes())
		if m.Type() != header.ICMPv4EchoReply {
			t.Fatalf("ICMP type %d, want an echo reply", m.Type())
		}
		return m.Sequence(), m.Payload(), res.RemoteAddr.Addr
	}
}

// TestEchoForwarded: an echo request to a public address is sent from the
// host and its reply delivered; one to a private address is refused and
// logged, and never answered.
func TestEchoForwarded(t *testing.T) {
	if !canPing() {
		t.Skip("no ICMP socket for this process (ping_group_range, or root for a raw socket)")
	}
	tn := newTestNet(t, "public", nil)
	g := newGuestPing(t, tn)
	g.send(t, "10.0.0.5", 1, []byte("private"))
	poll.Until(t, "the refusal of the echo to 10.0.0.5", 10*time.Second, func() bool {
		r := tn.refusals()
		return len(r) == 1 && r[0].Proto == "icmp" && r[0].Addr == "10.0.0.5"
	})
	data := bytes.Repeat([]byte("krunbox"), 100)
	g.send(t, "198.51.100.2", 2, data) // 127.0.0.2 on the host
	seq, got, from := g.reply(t)
	if seq != 2 || !bytes.Equal(got, data) || from != tcpipAddr(netip.MustParseAddr("198.51.100.2")) {
		t.Errorf("reply: seq %d from %s, %d bytes (equal %v); want seq 2 from 198.51.100.2 with the data", seq, from, len(got), bytes.Equal(got, data))
	}
}

// TestEchoBounded: no more than maxEchoesInFlight echoes wait at once;
// the others are dropped, unanswered.
func TestEchoBounded(t *testing.T) {
	tn := newTestNet(t, "public", nil)
	for range maxEchoesInFlight {
		tn.st.echoSlots <- struct{}{}
	}
	e := echoRequest{src: GuestIPv4, dst: netip.MustParseAddr("198.51.100.2"), seq: 1}
	if tn.st.forwardEcho(e) {
		t.Errorf("an echo beyond %d in flight was sent", maxEchoesInFlight)
	}
	<-tn.st.echoSlots
	if !tn.st.forwardEcho(e) {
		t.Errorf("an echo with a slot free was not sent")
	}
	for range maxEchoesInFlight - 1 {
		<-tn.st.echoSlots
	}
}

func TestEchoReply(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"192.168.127.2", "198.51.100.7"},
		{"fd7b:6b62:6f78::2", "2001:db8::7"},
	} {
		e := echoRequest{src: netip.MustParseAddr(tc.src), dst: netip.MustParseAddr(tc.dst), id: 0x1234, seq: 9}
		data := []byte("payload")
		proto, pkt := echoReply(e, data)
		var m []byte
		var ok bool
		switch proto {
		case header.IPv4ProtocolNumber:
			ip := header.IPv4(pkt)
			ok = ip.IsValid(len(pkt)) && ip.IsChecksumValid() && fromTCPIP(ip.SourceAddress()) == e.dst && fromTCPIP(ip.DestinationAddress()) == e.src
			m = ip.Payload()
			ok = ok && checksum.Checksum(m, 0) == 0xffff && header.ICMPv4(m).Type() == header.ICMPv4EchoReply
		case header.IPv6ProtocolNumber:
			ip := header.IPv6(pkt)
			ok = ip.IsValid(len(pkt)) && fromTCPIP(ip.SourceAddress()) == e.dst && fromTCPIP(ip.DestinationAddress()) == e.src
			m = ip.Payload()
			h := header.ICMPv6(m)
			ok = ok && h.Type() == header.ICMPv6EchoReply && h.Checksum() == header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h, Src: ip.SourceAddress(), Dst: ip.DestinationAddress()})
		}
		parsed, err := icmp.ParseMessage(map[tcpip.NetworkProtocolNumber]int{header.IPv4ProtocolNumber: 1, header.IPv6ProtocolNumber: 58}[proto], m)
		if !ok || err != nil {
			t.Fatalf("%s: a bad reply packet (%v)", tc.dst, err)
		}
		if echo, _ := parsed.Body.(*icmp.Echo); echo == nil || echo.ID != 0x1234 || echo.Seq != 9 || string(echo.Data) != "payload" {
			t.Errorf("%s: reply body %+v", tc.dst, parsed.Body)
		}
	}
}

// TestEchoPolicy: an echo goes on where a connection on every port would.
func TestEchoPolicy(t *testing.T) {
	for _, tc := range []struct {
		spec, dst, resolve string
		want               bool
	}{
		{"public", "198.51.100.2", "", true},
		{"public", "10.0.0.5", "", false},
		{"public", "192.168.127.9", "", false},
		{"allow=198.51.100.2", "198.51.100.2", "", true},
		{"allow=198.51.100.0/24", "198.51.100.3", "", true},
		{"allow=198.51.100.2:443", "198.51.100.2", "", false}, // a rule with ports
		{"allow=ok.test", "198.51.100.2", "", false},          // not resolved
		{"allow=ok.test", "198.51.100.2", "ok.test", true},
		{"allow=ok.test:443", "198.51.100.2", "ok.test", false},
		{"open", "198.51.100.3", "", true},
	} {
		t.Run(tc.spec+"/"+tc.dst, func(t *testing.T) {
			tn := newTestNet(t, tc.spec, nil)
			if tc.resolve != "" {
				tn.setDNS(tc.resolve, tc.dst)
				tn.lookup(t, tc.resolve)
			}
			if got := tn.st.forwardEcho(echoRequest{src: GuestIPv4, dst: netip.MustParseAddr(tc.dst), seq: 1}); got != tc.want {
				t.Errorf("echo sent: %v, want %v", got, tc.want)
			}
			if r := tn.refusals(); tc.want != (len(r) == 0) || !tc.want && (r[0].Proto != "icmp" || r[0].Addr != tc.dst) {
				t.Errorf("refusals: %+v", r)
			}
		})
	}
}
