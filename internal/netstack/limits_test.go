package netstack

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func withLimits(l Limits) func(*Config) { return func(c *Config) { c.Limits = l } }

// eventually waits until cond holds, polling, and fails t if it does not
// within 20 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// limitRefusals returns the refusals logged for the limit of the
// configuration key (limits.KEY) they name.
func (tn *testNet) limitRefusals(key string) []Refusal {
	var out []Refusal
	for _, r := range tn.refusals() {
		if strings.HasPrefix(r.Reason, "limit: ") && strings.Contains(r.Reason, "(limits."+key+")") {
			out = append(out, r)
		}
	}
	return out
}

// openFDs counts the test process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("count open descriptors: %v", err)
	}
	return len(ents)
}

// tcpEndpoints returns s's connected TCP endpoints whose local port, or
// remote port when remote, is port.
func tcpEndpoints(s *stack.Stack, port uint16, remote bool) []tcpip.Endpoint {
	var out []tcpip.Endpoint
	for _, te := range s.RegisteredEndpoints() {
		ep, ok := te.(tcpip.Endpoint)
		if !ok {
			continue
		}
		la, lerr := ep.GetLocalAddress()
		ra, rerr := ep.GetRemoteAddress()
		if lerr != nil || rerr != nil || !remote && la.Port != port || remote && ra.Port != port {
			continue
		}
		out = append(out, ep)
	}
	return out
}

// received is what ep holds of what it received and its owner has not read.
func received(ep tcpip.Endpoint) int {
	n, _ := ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	return n
}

// stall waits until data stops flowing: until progress, a count that
// grows while it flows, stays the same for half a second. It calls check
// at each look, and fails t if data still flows after 20 seconds.
func stall(t *testing.T, progress func() int64, check func()) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	last, since := progress(), time.Now()
	for {
		check()
		if p := progress(); p != last {
			last, since = p, time.Now()
		} else if p > 0 && time.Since(since) > 500*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("data still flows after 20 s (%d bytes)", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeForever writes b on c until that fails, counting what it wrote in
// n.
func writeForever(c net.Conn, b []byte, n *atomic.Int64) {
	for {
		w, err := c.Write(b)
		n.Add(int64(w))
		if err != nil {
			return
		}
	}
}

// TestTCPConnLimit: past Limits.TCPConns the guest's new connections are
// reset before anything is dialed, the connections open keep working, the
// refusals are logged once for the burst, and a connection closed makes
// room for a new one.
func TestTCPConnLimit(t *testing.T) {
	const limit = 4
	tn := newTestNet(t, "public", nil, withLimits(Limits{TCPConns: limit}))
	port, hits := echoServer(t, "127.0.0.2:0")
	dst := "198.51.100.2:" + portString(port)
	var conns []net.Conn
	for range limit {
		c, err := tn.dial(ctx10(t), dst)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for range 20 {
		wantRefused(t, tn, dst)
	}
	if hits() != limit {
		t.Errorf("the server saw %d connections, want %d", hits(), limit)
	}
	if _, err := conns[1].Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conns[1], buf); err != nil || string(buf) != "ping" {
		t.Fatalf("an open connection past the limit: got %q, %v", buf, err)
	}
	if refs := tn.limitRefusals("tcp_connections"); len(refs) != 1 || refs[0].Proto != "tcp" || refs[0].Addr != dst {
		t.Errorf("want the burst's refusals logged once, naming the limit: %+v", tn.refusals())
	}
	conns[0].Close()
	eventually(t, "a connection closed makes room for a new one", func() bool {
		c, err := tn.dial(ctx10(t), dst)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(c, make([]byte, 5))
		return err == nil
	})
}

// silentServer accepts connections on 127.0.0.2 and never reads them,
// with a small receive buffer so that the host's kernel holds little of
// what is sent to it.
func silentServer(t *testing.T) uint16 {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	l, err := lc.Listen(ctx10(t), "tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("listen: %v", err)
	}
	var mu sync.Mutex
	var accepted []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range accepted {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// TestTCPBuffersBounded: connections whose upstream never reads, the
// guest writing on each without end, hold no more in the stack than every
// connection's small buffers and the bulk budget (Limits.Buffer): not
// what gVisor's tuning would grow each to. A new connection still works.
func TestTCPBuffersBounded(t *testing.T) {
	const conns = 8
	lim := Limits{ConnBuffer: 1 << 20, Buffer: 2 << 20}
	tn := newTestNet(t, "public", nil, withLimits(lim))
	port := silentServer(t)
	dst := "198.51.100.2:" + portString(port)
	var written atomic.Int64
	for range conns {
		c, err := tn.dial(ctx10(t), dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		go writeForever(c, make([]byte, 16<<10), &written)
	}
	bound := int(lim.Buffer) + conns*baseConnBuffer
	stall(t, written.Load, func() {
		held := 0
		for _, ep := range tcpEndpoints(tn.st.s, port, false) {
			held += received(ep)
		}
		if held > bound {
			t.Fatalf("the stack holds %d bytes received, want at most %d", held, bound)
		}
	})
	echo, _ := echoServer(t, "127.0.0.2:0")
	wantHello(t, tn, "198.51.100.2:"+portString(echo))
}

// TestBufferGrants: a way of a connection that carries bulk data is
// granted big buffers out of Limits.Buffer, while it lasts; a way
// refused asks again after more bulk; a closed connection gives its
// grants back.
func TestBufferGrants(t *testing.T) {
	lim := Limits{ConnBuffer: 1 << 20, Buffer: 3 << 20}.withDefaults()
	st := &Stack{limits: lim, cfg: Config{Log: slog.New(slog.DiscardHandler)}}
	st.buffers.max = lim.Buffer
	cost := int64(lim.ConnBuffer - baseConnBuffer + bigRelay - smallRelay)
	newConn := func() *guestConn {
		g := &guestConn{st: st}
		g.in.next, g.out.next = bulkAfter, bulkAfter
		return g
	}
	var sizes []int64
	grow := func(n int64) { sizes = append(sizes, n) }
	a, b := newConn(), newConn()
	a.carried(&a.in, bulkAfter-1, grow)
	if len(sizes) != 0 || a.in.big.Load() {
		t.Fatal("granted before bulkAfter bytes")
	}
	a.carried(&a.in, 1, grow)
	a.carried(&a.out, bulkAfter, grow)
	b.carried(&b.in, bulkAfter, grow) // the budget holds two grants
	if !a.in.big.Load() || !a.out.big.Load() || b.in.big.Load() || len(sizes) != 2 || sizes[0] != int64(lim.ConnBuffer) {
		t.Fatalf("grants: a %v/%v, b %v, sizes %v; want a's two ways only, at %d", a.in.big.Load(), a.out.big.Load(), b.in.big.Load(), sizes, lim.ConnBuffer)
	}
	if got := st.buffers.used.Load(); got != 2*cost {
		t.Errorf("budget used %d, want %d", got, 2*cost)
	}
	a.release()
	b.carried(&b.in, bulkAfter-1, grow)
	if b.in.big.Load() {
		t.Error("a refused way asked again before another bulkAfter bytes")
	}
	b.carried(&b.in, 1, grow)
	if !b.in.big.Load() || st.buffers.used.Load() != cost {
		t.Errorf("after a's release: b granted %v, budget used %d; want granted, %d", b.in.big.Load(), st.buffers.used.Load(), cost)
	}
}

// TestUDPFlowLimit: a datagram to each of many ports opens no more flows
// (and host sockets) than Limits.UDPFlows; past it the guest gets port
// unreachable, the refusals are logged once, and an open flow keeps
// working.
func TestUDPFlowLimit(t *testing.T) {
	const limit = 8
	tn := newTestNet(t, "public", nil, withLimits(Limits{UDPFlows: limit}))
	port := udpEcho(t, "127.0.0.2:0", "re:")
	dial := func(p uint16) *gonet.UDPConn {
		c, err := gonet.DialUDP(tn.guest, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(netip.MustParseAddr("198.51.100.2")), Port: p}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	exchange := func(c *gonet.UDPConn, msg string) error {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		if err == nil && string(buf[:n]) != "re:"+msg {
			t.Fatalf("UDP echo: %q", buf[:n])
		}
		return err
	}
	open := dial(port)
	if err := exchange(open, "a"); err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	// Each from a port of its own: a flow each.
	const flood = 200
	for range flood {
		dial(port).Write([]byte("x"))
	}
	// The guest's frames reach the stack in order: the answer to a
	// datagram sent after the flood comes after the flood's flows.
	if err := exchange(open, "b"); err != nil {
		t.Fatalf("the open flow after the flood: %v", err)
	}
	if grown := openFDs(t) - fds; grown > limit {
		t.Errorf("%d datagrams to new ports opened %d descriptors, want at most %d", flood, grown, limit)
	}
	if refs := tn.limitRefusals("udp_flows"); len(refs) != 1 || refs[0].Proto != "udp" {
		t.Errorf("want the burst's refusals logged once, naming the limit: %d refusals, %+v", len(tn.refusals()), tn.limitRefusals("udp_flows"))
	}
	// Past the limit, the port is unreachable: no wait for a reply (sent
	// again while the stack's ICMP rate limit, which the flood used up,
	// holds it back).
	unreachable := tn.unreachables()
	c := dial(port)
	eventually(t, "a port unreachable for a new flow past the limit", func() bool {
		c.Write([]byte("y"))
		return tn.unreachables() > unreachable
	})
}

// unreachables counts the ICMP destination unreachables the guest got.
func (tn *testNet) unreachables() uint64 {
	return tn.guest.Stats().ICMP.V4.PacketsReceived.DstUnreachable.Value()
}

// tcpQuery asks one question on a DNS-over-TCP connection.
func tcpQuery(c net.Conn, name string) (*dnsmessage.Message, error) {
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 9, RecursionDesired: true}, Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)); err != nil {
		return nil, err
	}
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(hdr[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	var m dnsmessage.Message
	return &m, m.Unpack(resp)
}

// TestDNSConnLimit: past Limits.DNSConns the guest's new DNS-over-TCP
// connections are reset, the refusals logged once, and the open ones
// keep answering.
func TestDNSConnLimit(t *testing.T) {
	const limit = 2
	tn := newTestNet(t, "public", nil, withLimits(Limits{DNSConns: limit}))
	tn.setDNS("ok.test", "198.51.100.2")
	dns := GatewayIPv4.String() + ":53"
	var conns []net.Conn
	for range limit {
		c, err := tn.dial(ctx10(t), dns)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if m, err := tcpQuery(c, "ok.test"); err != nil || len(m.Answers) != 1 {
			t.Fatalf("DNS over TCP: %v %v", m, err)
		}
		conns = append(conns, c)
	}
	for range 10 {
		wantRefused(t, tn, dns)
	}
	if m, err := tcpQuery(conns[0], "ok.test"); err != nil || len(m.Answers) != 1 {
		t.Fatalf("an open DNS connection past the limit: %v %v", m, err)
	}
	if refs := tn.limitRefusals("dns_connections"); len(refs) != 1 || refs[0].Proto != "dns" {
		t.Errorf("want the burst's refusals logged once, naming the limit: %+v", tn.refusals())
	}
}

// TestDNSPipelineStalls: a guest that pipelines DNS questions on a TCP
// connection and reads no answer finds the connection stalled with the
// stack holding little: not the answers piling up in buffers that grow.
func TestDNSPipelineStalls(t *testing.T) {
	tn := newTestNet(t, "allow=ok.test", nil)
	c, err := tn.dial(ctx10(t), GatewayIPv4.String()+":53")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Names no rule allows: answered at once, with no upstream.
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 1}, Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("refused.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	one := append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
	var written atomic.Int64
	go writeForever(c, bytes.Repeat(one, (4<<10)/len(one)), &written)
	const bound = 3 * dnsConnBuffer
	stall(t, written.Load, func() {
		for _, ep := range tcpEndpoints(tn.st.s, 53, false) {
			if n := received(ep); n > bound {
				t.Fatalf("the stack holds %d bytes of questions, want at most %d", n, bound)
			}
		}
	})
	// Stalled, the stack's end waits to send answers: its send buffer is
	// full.
	eps := tcpEndpoints(tn.st.s, 53, false)
	if len(eps) != 1 {
		t.Fatalf("%d DNS connections in the stack, want 1", len(eps))
	}
	ep := eps[0]
	if held := received(ep) + int(ep.SocketOptions().GetSendBufferSize()); held > bound {
		t.Fatalf("the stack holds %d bytes for one DNS connection, want at most %d", held, bound)
	}
	// The stack still answers others.
	if rc, _ := tn.lookup(t, "ok.test"); rc != dnsmessage.RCodeNameError && rc != dnsmessage.RCodeSuccess {
		t.Errorf("a question over UDP while a TCP connection stalls: %v", rc)
	}
}

// TestQUICRefused: under a name rule, UDP to port 443 (QUIC, whose server
// name the stack cannot check) is refused at once and logged, so that
// clients fall back to TCP, where the name is checked; UDP that an
// address rule allows, or to another port, passes.
func TestQUICRefused(t *testing.T) {
	for _, tt := range []struct {
		name, spec string
		dstPort    uint16
		pass       bool
	}{
		{"name rule, port 443", "allow=good.test:443", 443, false},
		{"name rule, all ports", "allow=good.test", 443, false},
		{"name rule, another port", "allow=good.test", 8443, true},
		{"address rule", "allow=198.51.100.2:443", 443, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet(t, tt.spec, nil)
			port := udpEcho(t, "127.0.0.2:0", "re:")
			tn.st.cfg.Redirect = func(dst netip.AddrPort) netip.AddrPort {
				return netip.AddrPortFrom(redirectTest(dst).Addr(), port)
			}
			tn.setDNS("good.test", "198.51.100.2")
			tn.lookup(t, "good.test")
			c, err := gonet.DialUDP(tn.guest, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(netip.MustParseAddr("198.51.100.2")), Port: tt.dstPort}, ipv4.ProtocolNumber)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("quic"))
			if tt.pass {
				c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 100)
				if n, err := c.Read(buf); err != nil || string(buf[:n]) != "re:quic" {
					t.Fatalf("UDP: %q, %v; want it through", buf[:n], err)
				}
				return
			}
			eventually(t, "a port unreachable", func() bool { return tn.unreachables() > 0 })
			if r := tn.refusals(); len(r) != 1 || r[0].Proto != "udp" || !strings.Contains(r[0].Reason, "QUIC") || r[0].Name != "good.test" {
				t.Errorf("refusals %+v", r)
			}
		})
	}
}
