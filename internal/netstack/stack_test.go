package netstack

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/internal/testutil/dnstest"
)

// testNet is a stack under test and a "guest": a second gvisor stack on
// the other end of the link, with the guest's addresses.
type testNet struct {
	st    *Stack
	guest *stack.Stack
	mu    sync.Mutex
	refs  []Refusal
	dns   *dnstest.Server // the upstream test DNS server
}

// testPublic is the range that stands for the internet in these tests: it
// is redirected to the host's loopback (198.51.100.N to 127.0.0.N).
var testPublic = netip.MustParsePrefix("198.51.100.0/24")

func redirectTest(dst netip.AddrPort) netip.AddrPort {
	if testPublic.Contains(dst.Addr()) {
		b := dst.Addr().As4()
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, b[3]}), dst.Port())
	}
	return dst
}

// newTestNet starts a stack with the policy spec and the interceptor ic,
// its Config changed by each of opts, and its guest.
func newTestNet(t testing.TB, spec string, ic Interceptor, opts ...func(*Config)) *testNet {
	t.Helper()
	sp, err := netpolicy.Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNet{dns: dnstest.Start(t)}
	dnsAddr := tn.dns.Addr
	hc, gc := socketPair(t)
	cfg := Config{
		Policy:      netpolicy.New(sp, netpolicy.Options{Public: []netip.Prefix{testPublic}}),
		DNS:         dnsAddr,
		Redirect:    redirectTest,
		Interceptor: ic,
		OnRefuse: func(r Refusal) {
			tn.mu.Lock()
			tn.refs = append(tn.refs, r)
			tn.mu.Unlock()
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	tn.st, err = Start(hc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tn.st.Close() })
	tn.guest = newGuestStack(t, gc)
	return tn
}

func socketPair(t testing.TB) (net.Conn, net.Conn) {
	l, err := net.Listen("unix", t.TempDir()+"/link.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return a, <-ch
}

// newGuestStack runs a gvisor stack as the guest would be set up.
func newGuestStack(t testing.TB, conn net.Conn) *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	link := &streamLink{conn: conn, ch: newStreamLink(conn).ch}
	link.ch.SetLinkAddress(tcpip.LinkAddress(GuestMAC))
	if err := s.CreateNIC(1, ethernet.New(link.ch)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Prefix{netip.PrefixFrom(GuestIPv4, 24), netip.PrefixFrom(GuestIPv6, 64)} {
		proto := ipv4.ProtocolNumber
		if a.Addr().Is6() {
			proto = ipv6.ProtocolNumber
		}
		s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: proto, AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpipAddr(a.Addr()), PrefixLen: a.Bits()}}, stack.AddressProperties{})
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header4Subnet(), Gateway: tcpipAddr(GatewayIPv4), NIC: 1},
		{Destination: header6Subnet(), Gateway: tcpipAddr(GatewayIPv6), NIC: 1},
	})
	ctx, cancel := context.WithCancel(context.Background())
	go link.readLoop()
	go link.writeLoop(ctx)
	t.Cleanup(func() { cancel(); conn.Close(); s.Close() })
	return s
}

func (tn *testNet) dial(ctx context.Context, dst string) (net.Conn, error) {
	ap := netip.MustParseAddrPort(dst)
	proto := ipv4.ProtocolNumber
	if ap.Addr().Is6() {
		proto = ipv6.ProtocolNumber
	}
	return gonet.DialContextTCP(ctx, tn.guest, tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(ap.Addr()), Port: ap.Port()}, proto)
}

// lookup asks the stack's DNS server for name's IPv4 addresses, as the
// guest would.
func (tn *testNet) lookup(t *testing.T, name string) (dnsmessage.RCode, []netip.Addr) {
	t.Helper()
	m := tn.query(t, name, dnsmessage.TypeA)
	var addrs []netip.Addr
	for _, a := range m.Answers {
		if r, ok := a.Body.(*dnsmessage.AResource); ok {
			addrs = append(addrs, netip.AddrFrom4(r.A))
		}
	}
	return m.RCode, addrs
}

// query asks the stack's DNS server one question over UDP, as the guest
// would, and returns the answer.
func (tn *testNet) query(t testing.TB, name string, qtype dnsmessage.Type) *dnsmessage.Message {
	t.Helper()
	c, err := gonet.DialUDP(tn.guest, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(GatewayIPv4), Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := dnsmessage.Message{Header: dnsmessage.Header{ID: 7, RecursionDesired: true}, Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name + "."), Type: qtype, Class: dnsmessage.ClassINET}}}
	b, _ := q.Pack()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("query %s %v: %v", name, qtype, err)
	}
	var m dnsmessage.Message
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return &m
}

func (tn *testNet) setDNS(name string, addrs ...string) { tn.dns.Set(name, addrs...) }

func (tn *testNet) refusals() []Refusal {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return append([]Refusal(nil), tn.refs...)
}

// echoServer listens on addr (a loopback address) and answers each
// connection with "hello" and then what it reads.
// udpEcho serves UDP on addr (its port returned), answering each datagram
// with itself after prefix, until the test ends.
func udpEcho(t *testing.T, addr, prefix string) uint16 {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte(prefix), buf[:n]...), from)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

func echoServer(t *testing.T, addr string) (port uint16, hits func() int) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			go func() {
				defer c.Close()
				c.Write([]byte("hello"))
				io.Copy(c, c)
			}()
		}
	}()
	return uint16(l.Addr().(*net.TCPAddr).Port), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func ctx10(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantHello connects through the stack and reads the echo server's hello.
func wantHello(t *testing.T, tn *testNet, dst string) {
	t.Helper()
	c, err := tn.dial(ctx10(t), dst)
	if err != nil {
		t.Fatalf("connect %s: %v", dst, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read from %s: %q, %v", dst, buf, err)
	}
}

// wantRefused connects through the stack and wants a reset at once.
func wantRefused(t *testing.T, tn *testNet, dst string) {
	t.Helper()
	start := time.Now()
	c, err := tn.dial(ctx10(t), dst)
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("connect %s: want a reset at once, got %v after %v", dst, err, time.Since(start))
	}
}

func TestPublic(t *testing.T) {
	tn := newTestNet(t, "public", nil)
	port, hits := echoServer(t, "127.0.0.2:0")
	p := portString(port)
	wantHello(t, tn, "198.51.100.2:"+p)
	for _, dst := range []string{"100.64.0.1:" + p, "10.0.0.5:" + p, "169.254.169.254:80", "192.168.127.1:" + p} {
		wantRefused(t, tn, dst)
	}
	if hits() != 1 {
		t.Errorf("the server saw %d connections, want 1", hits())
	}
	refs := tn.refusals()
	if len(refs) != 4 || !strings.Contains(refs[1].Reason, "private") || refs[1].Addr != "10.0.0.5:"+p {
		t.Errorf("refusals: %+v", refs)
	}
}

func TestOpenReachesHost(t *testing.T) {
	tn := newTestNet(t, "open", nil)
	port, _ := echoServer(t, "127.0.0.1:0")
	wantHello(t, tn, "192.168.127.1:"+portString(port))
}

func TestDNSAndAllow(t *testing.T) {
	tn := newTestNet(t, "allow=ok.test,*.wild.test:1", nil)
	port, hits := echoServer(t, "127.0.0.2:0")
	p := portString(port)
	tn.setDNS("ok.test", "198.51.100.2")
	tn.setDNS("denied.test", "198.51.100.2")
	tn.setDNS("a.wild.test", "198.51.100.2")
	tn.setDNS("private.ok.test", "10.0.0.5")

	wantRefused(t, tn, "198.51.100.2:"+p) // not resolved yet: no name allows it
	if rc, _ := tn.lookup(t, "denied.test"); rc != dnsmessage.RCodeNameError {
		t.Errorf("denied.test: rcode %v, want NXDOMAIN", rc)
	}
	rc, addrs := tn.lookup(t, "ok.test")
	if rc != dnsmessage.RCodeSuccess || len(addrs) != 1 || addrs[0].String() != "198.51.100.2" {
		t.Fatalf("ok.test: %v %v", rc, addrs)
	}
	wantHello(t, tn, "198.51.100.2:"+p)
	if hits() != 1 {
		t.Errorf("hits %d", hits())
	}
	// A wildcard allowed on port 1 only: resolved, but not this port.
	tn.lookup(t, "a.wild.test")
	tn.st.cfg.Policy.Deny([]netpolicy.Rule{{Name: "ok.test"}})
	wantRefused(t, tn, "198.51.100.2:"+p)
	if rc, _ := tn.lookup(t, "ok.test"); rc != dnsmessage.RCodeNameError {
		t.Errorf("ok.test after deny: rcode %v", rc)
	}
	// Allowed at run time.
	tn.st.cfg.Policy.Allow([]netpolicy.Rule{{Name: "ok.test"}})
	tn.lookup(t, "ok.test")
	wantHello(t, tn, "198.51.100.2:"+p)
}

func TestRebinding(t *testing.T) {
	tn := newTestNet(t, "public", nil)
	port, hits := echoServer(t, "127.0.0.2:0")
	p := portString(port)
	tn.setDNS("rebind.test", "198.51.100.2")
	_, a := tn.lookup(t, "rebind.test")
	wantHello(t, tn, a[0].String()+":"+p)
	tn.setDNS("rebind.test", "10.0.0.2")
	_, a = tn.lookup(t, "rebind.test")
	if len(a) != 1 {
		t.Fatal(a)
	}
	wantRefused(t, tn, a[0].String()+":"+p)
	if hits() != 1 {
		t.Errorf("hits %d, want 1", hits())
	}
	if r := tn.refusals(); len(r) != 1 || r[0].Name != "rebind.test" {
		t.Errorf("want the refusal to carry the name: %+v", r)
	}
}

func TestSNI(t *testing.T) {
	tn := newTestNet(t, "allow=ok.test:443", nil)
	// A TLS server on 127.0.0.2:443 would need root; the stack dials what
	// Redirect says, so redirect 443 to a test port.
	port, hits := echoServer(t, "127.0.0.2:0")
	tn.st.cfg.Redirect = func(dst netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(redirectTest(dst).Addr(), port)
	}
	tn.setDNS("ok.test", "198.51.100.2")
	tn.setDNS("evil.test", "198.51.100.2")
	tn.lookup(t, "ok.test")
	hello := func(sni string) error {
		c, err := tn.dial(ctx10(t), "198.51.100.2:443")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		go tc.Handshake()
		buf := make([]byte, 5)
		_, err = io.ReadFull(c, buf)
		if err == nil && string(buf) != "hello" {
			err = errors.New("bad greeting")
		}
		return err
	}
	if err := hello("ok.test"); err != nil {
		t.Fatalf("SNI ok.test: %v", err)
	}
	if err := hello("evil.test"); err == nil {
		t.Fatal("SNI evil.test: want a reset")
	}
	if hits() != 1 {
		t.Errorf("hits %d, want 1", hits())
	}
	if r := tn.refusals(); len(r) != 1 || r[0].Proto != "tls" || r[0].Name != "evil.test" {
		t.Errorf("refusals %+v", r)
	}
}

type testInterceptor struct{ served chan string }

func (ti *testInterceptor) Intercepts(host string, port uint16) bool { return host == "ok.test" }

func (ti *testInterceptor) Serve(ctx context.Context, guest net.Conn, host string, dst netip.AddrPort, dial func(context.Context) (net.Conn, error)) error {
	ti.served <- host + " " + dst.String()
	up, err := dial(ctx)
	if err != nil {
		return err
	}
	relay(ctx, guest, up)
	return nil
}

func TestInterceptor(t *testing.T) {
	ti := &testInterceptor{served: make(chan string, 1)}
	tn := newTestNet(t, "public", ti)
	port, _ := echoServer(t, "127.0.0.2:0")
	tn.setDNS("ok.test", "198.51.100.2")
	tn.lookup(t, "ok.test")
	wantHello(t, tn, "198.51.100.2:"+portString(port))
	if got := <-ti.served; got != "ok.test 198.51.100.2:"+portString(port) {
		t.Errorf("interceptor got %q", got)
	}
}

func TestUDP(t *testing.T) {
	tn := newTestNet(t, "public", nil)
	port := udpEcho(t, "127.0.0.2:0", "re:")
	send := func(dst netip.Addr) (string, error) {
		c, err := gonet.DialUDP(tn.guest, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(dst), Port: port}, ipv4.ProtocolNumber)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("x"))
		buf := make([]byte, 100)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	if got, err := send(netip.MustParseAddr("198.51.100.2")); got != "re:x" {
		t.Fatalf("UDP to a public address: %q, %v", got, err)
	}
	if got, err := send(netip.MustParseAddr("10.0.0.2")); err == nil {
		t.Fatalf("UDP to a private address: got %q, want nothing", got)
	}
}

func portString(p uint16) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), p).String()[len("0.0.0.0:"):]
}

// TestBadFrameEndsTheLink: a length prefix beyond any frame (a hostile or
// broken guest) ends the guest's link, and nothing else; the stack stops.
func TestBadFrameEndsTheLink(t *testing.T) {
	sp, _ := netpolicy.Parse("public")
	hc, gc := socketPair(t)
	defer gc.Close()
	st, err := Start(hc, Config{Policy: netpolicy.New(sp, netpolicy.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := gc.Write([]byte{0xff, 0xff, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the stack still serves a link that sent a 4 GiB frame length")
	}
}

func TestDropInbound(t *testing.T) {
	// An ICMP echo request to an address that is not the gateway is
	// dropped (the stack would answer it itself); to the gateway it is not.
	frame := func(dst netip.Addr, typ byte) []byte {
		f := make([]byte, 14+20+8)
		f[12], f[13] = 0x08, 0x00
		ip := f[14:]
		ip[0] = 0x45
		ip[2], ip[3] = 0, 28
		ip[8], ip[9] = 64, 1 // TTL, ICMP
		copy(ip[12:16], GuestIPv4.AsSlice())
		copy(ip[16:20], dst.AsSlice())
		ip[20] = typ
		return f
	}
	for _, tt := range []struct {
		dst  string
		typ  byte
		drop bool
	}{
		{"8.8.8.8", 8, true},
		{"192.168.127.1", 8, false},
		{"8.8.8.8", 0, false}, // an echo reply is the guest's business
	} {
		if got := dropInbound(frame(netip.MustParseAddr(tt.dst), tt.typ)); got != tt.drop {
			t.Errorf("ICMP type %d to %s: dropped %v, want %v", tt.typ, tt.dst, got, tt.drop)
		}
	}
}

// BenchmarkDownload: bytes from a host server to a guest (a second gvisor
// stack standing for the guest's kernel) through the stack, 64 MiB a round.
func BenchmarkDownload(b *testing.B) {
	tn := newTestNet(b, "public", nil)
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Skip(err)
	}
	defer l.Close()
	const size = 64 << 20
	go func() {
		buf := make([]byte, 1<<20)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for range size / len(buf) {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	dst := "198.51.100.2:" + portString(uint16(l.Addr().(*net.TCPAddr).Port))
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		c, err := tn.dial(ctx10(b), dst)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, c); err != nil || n != size {
			b.Fatalf("read %d, %v", n, err)
		}
		c.Close()
	}
	rx := tn.guest.NICInfo()[1].Stats.Rx
	b.ReportMetric(float64(rx.Bytes.Value())/float64(rx.Packets.Value()), "B/frame")
}

func TestRefusedNameIsPrintable(t *testing.T) {
	for in, want := range map[string]string{"ok.test": "ok.test", "a\x1b[2Jb": `"a\x1b[2Jb"`, "": ""} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestBigFrames: with the link's MTU of 65520, a TCP stream crosses it in
// frames of up to 64 KiB both ways, over IPv4 and IPv6, and a UDP datagram
// of 32 KiB crosses it whole.
func TestBigFrames(t *testing.T) {
	for _, tt := range []struct {
		name, policy, listen, dst string
	}{
		{"IPv4", "public", "127.0.0.2:0", "198.51.100.2"},
		{"IPv6", "open", "[::1]:0", "[fd7b:6b62:6f78::1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNet(t, tt.policy, nil)
			port, _ := echoServer(t, tt.listen)
			c, err := tn.dial(ctx10(t), tt.dst+":"+portString(port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			const size = 4 << 20
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(i * 7)
			}
			go c.Write(data)
			got := make([]byte, 5+size)
			if _, err := io.ReadFull(c, got); err != nil || string(got[:5]) != "hello" || !bytes.Equal(got[5:], data) {
				t.Fatalf("echo of %d bytes: %v (greeting %q, equal %v)", size, err, got[:5], bytes.Equal(got[5:], data))
			}
			// Average frame sizes: at MTU 1500 neither could pass 1514.
			for _, nic := range []struct {
				name string
				s    *stack.Stack
			}{{"to the guest", tn.guest}, {"from the guest", tn.st.s}} {
				rx := nic.s.NICInfo()[1].Stats.Rx
				if avg := rx.Bytes.Value() / max(rx.Packets.Value(), 1); avg < 8192 {
					t.Errorf("frames %s: %d bytes on average in %d frames, want more than 8 KiB", nic.name, avg, rx.Packets.Value())
				}
			}
		})
	}
	t.Run("UDP", func(t *testing.T) {
		tn := newTestNet(t, "public", nil)
		port := udpEcho(t, "127.0.0.2:0", "")
		c, err := gonet.DialUDP(tn.guest, nil, &tcpip.FullAddress{NIC: 1, Addr: tcpipAddr(netip.MustParseAddr("198.51.100.2")), Port: port}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		dgram := bytes.Repeat([]byte("udp!"), 8<<10)
		if _, err := c.Write(dgram); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], dgram) {
			t.Fatalf("a 32 KiB datagram: got %d bytes back, %v", n, err)
		}
		// The answer and the stack's ARP reply; at MTU 1500, 23 fragments.
		if rx := tn.guest.NICInfo()[1].Stats.Rx; rx.Packets.Value() > 2 {
			t.Errorf("the guest received %d frames, want the answer whole (and an ARP reply)", rx.Packets.Value())
		}
	})
}

// readSizeConn records the largest buffer its Read is given.
type readSizeConn struct {
	net.Conn
	max atomic.Int64
}

func (c *readSizeConn) Read(p []byte) (int, error) {
	if int64(len(p)) > c.max.Load() {
		c.max.Store(int64(len(p)))
	}
	return c.Conn.Read(p)
}

// TestRelayReadsFrames: the relay between a guest connection and a host
// one reads more than a frame's payload at a time both ways, so that the
// stack can send segments of the link's MTU (io.Copy's 32 KiB reads made
// it send 32 KiB segments).
func TestRelayReadsFrames(t *testing.T) {
	a1, a2 := net.Pipe()
	b1, b2 := net.Pipe()
	ra, rb := &readSizeConn{Conn: a1}, &readSizeConn{Conn: b1}
	done := make(chan struct{})
	go func() {
		relay(context.Background(), ra, rb)
		close(done)
	}()
	for _, p := range [][2]net.Conn{{a2, b2}, {b2, a2}} {
		go p[0].Write([]byte("x"))
		p[1].SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(p[1], make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	}
	a2.Close()
	b2.Close()
	<-done
	for name, c := range map[string]*readSizeConn{"guest": ra, "host": rb} {
		if c.max.Load() < MTU {
			t.Errorf("reads from the %s side: at most %d bytes, want at least the MTU (%d)", name, c.max.Load(), MTU)
		}
	}
}
