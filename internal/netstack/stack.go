package netstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

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
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/krunbox/krunbox/internal/netpolicy"
)

// Refusal is a connection or a DNS question the policy refused, or a new
// flow refused past one of the Limits.
type Refusal struct {
	Time time.Time `json:"time"`
	// Proto is "tcp", "udp", "icmp", "dns" or "tls".
	Proto string `json:"proto"`
	// Name is the host name: the one asked for (dns), the TLS server
	// name (tls), or the name the sandbox resolved to Addr.
	Name string `json:"name,omitempty"`
	// Addr is the destination address and port ("" for a dns question).
	Addr string `json:"addr,omitempty"`
	// Reason says why; past a limit it begins with "limit: " and names
	// the Limits field.
	Reason string `json:"reason"`
}

// Config configures a Stack.
type Config struct {
	// Policy decides every connection and DNS answer.
	Policy *netpolicy.Policy
	// DNS is the upstream DNS server (host:port) the stack's resolver
	// asks; empty means the host's resolver.
	DNS string
	// Redirect, when not nil, maps a destination the policy allowed to
	// the address dialed on the host. Tests only: servers on the host's
	// loopback stand for the internet.
	Redirect func(netip.AddrPort) netip.AddrPort
	// Interceptor, when not nil, is offered every TCP connection the
	// policy allowed.
	Interceptor Interceptor
	// OnRefuse is called for each refusal (besides the log).
	OnRefuse func(Refusal)
	// Limits bound what the guest makes the stack hold; zero fields
	// mean their defaults.
	Limits Limits
	// Log receives what the stack has to say; nil discards it.
	Log *slog.Logger
}

// Stack is a userspace TCP/IP stack serving one guest link.
type Stack struct {
	cfg      Config
	s        *stack.Stack
	link     *streamLink
	resolver *net.Resolver
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closers  []io.Closer

	refusedMu sync.Mutex
	refused   map[string]time.Time
	echoSlots chan struct{}

	limits   Limits
	udpFwd   *udp.Forwarder
	tcpConns quota
	udpFlows quota
	dnsConns quota
	// dnsSlots holds a token for each DNS question being answered.
	dnsSlots chan struct{}
	// buffers is what connections carrying bulk data were granted.
	buffers quota
}

const nicID = 1

// dialTimeout bounds an upstream connect; udpIdle ends a UDP flow when
// one side sent nothing for that long; maxHalfOpen bounds the guest's TCP
// connections being set up (a handshake and the upstream's connect).
const (
	dialTimeout = 10 * time.Second
	udpIdle     = 60 * time.Second
	maxHalfOpen = 1024
)

// Start serves the guest link on conn (a stream socket carrying
// length-prefixed Ethernet frames) until Close or the socket ends.
func Start(conn net.Conn, cfg Config) (*Stack, error) {
	if cfg.Policy == nil {
		return nil, errors.New("netstack: no policy")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("netstack: %w", err)
	}
	lim := cfg.Limits.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	st := &Stack{cfg: cfg, link: newStreamLink(conn), ctx: ctx, cancel: cancel, refused: map[string]time.Time{}, echoSlots: make(chan struct{}, maxEchoesInFlight), resolver: newResolver(cfg.DNS), limits: lim}
	st.tcpConns.max, st.udpFlows.max, st.dnsConns.max = int64(lim.TCPConns), int64(lim.UDPFlows), int64(lim.DNSConns)
	st.dnsSlots = make(chan struct{}, lim.DNSQueries)
	st.buffers.max = lim.Buffer
	st.link.onEcho = st.forwardEcho
	st.s = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
	})
	fail := func(what string, err tcpip.Error) (*Stack, error) {
		st.s.Close()
		cancel()
		return nil, fmt.Errorf("netstack: %s: %s", what, err)
	}
	if err := st.s.CreateNIC(nicID, ethernet.New(st.link.ch)); err != nil {
		return fail("create the NIC", err)
	}
	for _, a := range []netip.Addr{GatewayIPv4, GatewayIPv6} {
		proto := ipv4.ProtocolNumber
		if a.Is6() {
			proto = ipv6.ProtocolNumber
		}
		pa := tcpip.ProtocolAddress{Protocol: proto, AddressWithPrefix: tcpipAddr(a).WithPrefix()}
		if err := st.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			return fail("add "+a.String(), err)
		}
	}
	if err := st.s.SetSpoofing(nicID, true); err != nil {
		return fail("spoofing", err)
	}
	if err := st.s.SetPromiscuousMode(nicID, true); err != nil {
		return fail("promiscuous mode", err)
	}
	st.s.SetRouteTable([]tcpip.Route{
		{Destination: header4Subnet(), NIC: nicID},
		{Destination: header6Subnet(), NIC: nicID},
	})
	sack := tcpip.TCPSACKEnabled(true)
	st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// A guest's connections start at baseConnBuffer and grow to
	// ConnBuffer when granted (guestConn); gVisor's tuning grows a
	// published port's connections up to ConnBuffer too.
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: 4 << 10, Default: baseConnBuffer, Max: lim.ConnBuffer}
	st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd)
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4 << 10, Default: baseConnBuffer, Max: lim.ConnBuffer}
	st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv)
	moderate := tcpip.TCPModerateReceiveBufferOption(true)
	st.s.SetTransportProtocolOption(tcp.ProtocolNumber, &moderate)
	st.s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcp.NewForwarder(st.s, 0, maxHalfOpen, st.forwardTCP).HandlePacket)
	st.udpFwd = udp.NewForwarder(st.s, st.forwardUDP)
	st.s.SetTransportProtocolHandler(udp.ProtocolNumber, st.handleUDP)
	if err := st.serveDNS(); err != nil {
		st.Close()
		return nil, err
	}
	st.wg.Add(2)
	go func() {
		defer st.wg.Done()
		if err := st.link.readLoop(); err != nil {
			cfg.Log.Warn("guest link", "err", err)
		}
		cancel()
	}()
	go func() {
		defer st.wg.Done()
		if err := st.link.writeLoop(ctx); err != nil {
			cfg.Log.Warn("guest link", "err", err)
		}
	}()
	return st, nil
}

// Done is closed when the stack stops: Close, or the guest link ended.
func (st *Stack) Done() <-chan struct{} { return st.ctx.Done() }

// Close stops the stack and closes the guest link.
func (st *Stack) Close() error {
	st.cancel()
	err := st.link.conn.Close()
	for _, c := range st.closers {
		c.Close()
	}
	st.wg.Wait()
	st.link.ch.Close()
	st.s.Close()
	return err
}

// refuse logs r once per burst of refusals for the same destination: not
// again until a second passes without one (a guest retrying, or sending
// datagrams, would flood the log).
func (st *Stack) refuse(r Refusal) {
	r.Name = printable(r.Name) // a guest's DNS question can hold any byte
	st.report(r.Proto+" "+r.Name+" "+r.Addr, r)
}

// refuseAtLimit logs the refusal of a new flow to dst past the limit
// what, once per burst of refusals at that limit whatever their
// destinations (a flood of new flows would log each).
func (st *Stack) refuseAtLimit(proto string, dst netip.AddrPort, what string) {
	st.report("limit "+what, Refusal{Proto: proto, Addr: dst.String(), Reason: "limit: " + what})
}

// report logs r unless the last refusal of key was less than a second ago.
func (st *Stack) report(key string, r Refusal) {
	r.Time = time.Now()
	st.refusedMu.Lock()
	last, seen := st.refused[key]
	if len(st.refused) > 1024 {
		clear(st.refused)
	}
	st.refused[key] = r.Time
	st.refusedMu.Unlock()
	if seen && r.Time.Sub(last) < time.Second {
		return
	}
	st.cfg.Log.Warn("network: refused", "proto", r.Proto, "name", r.Name, "addr", r.Addr, "reason", r.Reason)
	if st.cfg.OnRefuse != nil {
		st.cfg.OnRefuse(r)
	}
}

// check asks the policy about dst; the gateway is the host, which only
// open mode reaches (its DNS server is served apart).
func (st *Stack) check(dst netip.AddrPort) netpolicy.Decision {
	if isGateway(dst.Addr()) {
		if st.cfg.Policy.Spec().Mode == netpolicy.Open {
			return netpolicy.Decision{Allowed: true, Reason: "open: the host"}
		}
		return netpolicy.Decision{Reason: "the host (only network open reaches it)"}
	}
	return st.cfg.Policy.Check(dst)
}

func (st *Stack) dial(ctx context.Context, network string, dst netip.AddrPort) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	return d.DialContext(ctx, network, st.hostAddr(dst).String())
}

// hostAddr is where dst is dialed on the host: the gateway stands for the
// host's loopback; Redirect applies to the rest.
func (st *Stack) hostAddr(dst netip.AddrPort) netip.AddrPort {
	switch dst.Addr().Unmap() {
	case GatewayIPv4:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), dst.Port())
	case GatewayIPv6:
		return netip.AddrPortFrom(netip.IPv6Loopback(), dst.Port())
	}
	if st.cfg.Redirect != nil {
		return st.cfg.Redirect(dst)
	}
	return dst
}

func (st *Stack) forwardTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(fromTCPIP(id.LocalAddress), id.LocalPort)
	if isGateway(dst.Addr()) && dst.Port() == 53 {
		st.forwardDNS(r, dst)
		return
	}
	d := st.check(dst)
	if !d.Allowed {
		// Logged before the reset, so that whoever sees the reset finds
		// the refusal in the log.
		st.refuse(Refusal{Proto: "tcp", Name: d.Name, Addr: dst.String(), Reason: d.Reason})
		r.Complete(true)
		return
	}
	if !st.tcpConns.take(1) {
		st.refuseAtLimit("tcp", dst, fmt.Sprintf("%d TCP connections at once (limits.tcp_connections)", st.limits.TCPConns))
		r.Complete(true)
		return
	}
	intercept := st.cfg.Interceptor != nil && st.cfg.Interceptor.Intercepts(d.Name, dst.Port())
	var up net.Conn
	if !d.CheckSNI && !intercept {
		// Dial first: a guest whose upstream refuses gets a reset, as it
		// would from the server.
		var err error
		if up, err = st.dial(st.ctx, "tcp", dst); err != nil {
			st.tcpConns.give(1)
			st.cfg.Log.Debug("network: dial", "addr", dst, "err", err)
			r.Complete(true)
			return
		}
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	r.Complete(false)
	if terr != nil {
		st.tcpConns.give(1)
		if up != nil {
			up.Close()
		}
		st.cfg.Log.Debug("network: accept", "addr", dst, "err", terr.String())
		return
	}
	guest := gonet.NewTCPConn(&wq, ep)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer st.tcpConns.give(1)
		st.serveTCP(guest, ep, dst, d, intercept, up)
	}()
}

func (st *Stack) serveTCP(guest *gonet.TCPConn, ep tcpip.Endpoint, dst netip.AddrPort, d netpolicy.Decision, intercept bool, up net.Conn) {
	// Close ends every connection: the guest's here, the upstream's in
	// relay (an interceptor sees the guest's end).
	stop := context.AfterFunc(st.ctx, ep.Abort)
	defer stop()
	var g net.Conn = guest
	name := d.Name
	if d.CheckSNI {
		sni, conn, err := peekSNI(guest)
		if err == nil {
			err = st.cfg.Policy.CheckSNI(sni, dst)
		}
		if err != nil {
			st.refuse(Refusal{Proto: "tls", Name: sni, Addr: dst.String(), Reason: err.Error()})
			ep.Abort()
			return
		}
		g, name = conn, netpolicy.NormalizeName(sni)
		intercept = st.cfg.Interceptor != nil && st.cfg.Interceptor.Intercepts(name, dst.Port())
	} else if st.cfg.Interceptor != nil && dst.Port() == 443 {
		// Names share addresses (a CDN's): the interceptor decides by the
		// name the guest's TLS asks for, not by the last name that
		// resolved to the address.
		sni, conn, err := peekSNI(guest)
		g = conn
		if err == nil && sni != "" {
			name = netpolicy.NormalizeName(sni)
			if intercept = st.cfg.Interceptor.Intercepts(name, dst.Port()); intercept && up != nil {
				up.Close()
				up = nil
			}
		}
	}
	gc := st.newGuestConn(g, ep)
	defer gc.release()
	dial := func(ctx context.Context) (net.Conn, error) {
		if d := st.check(dst); !d.Allowed {
			return nil, fmt.Errorf("connect %s: refused by the network policy: %s", dst, d.Reason)
		}
		return st.dial(ctx, "tcp", dst)
	}
	if intercept {
		if err := st.cfg.Interceptor.Serve(st.ctx, gc, name, dst, dial); err != nil {
			st.cfg.Log.Debug("network: intercepted connection", "name", name, "addr", dst, "err", err)
		}
		gc.Close()
		return
	}
	if up == nil {
		var err error
		if up, err = dial(st.ctx); err != nil {
			ep.Abort()
			st.cfg.Log.Debug("network: dial", "addr", dst, "err", err)
			return
		}
	}
	relay(st.ctx, gc, up)
}

// handleUDP takes the guest's datagrams that open a flow: a flow the
// policy refuses, QUIC that a name rule would let through unchecked, or
// one past Limits.UDPFlows is refused (false: the stack answers with an
// ICMP port unreachable); forwardUDP serves the others, holding a flow of
// udpFlows.
func (st *Stack) handleUDP(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
	dst := netip.AddrPortFrom(fromTCPIP(id.LocalAddress), id.LocalPort)
	d := st.check(dst)
	switch {
	case !d.Allowed:
		st.refuse(Refusal{Proto: "udp", Name: d.Name, Addr: dst.String(), Reason: d.Reason})
		return false
	case d.CheckSNI:
		// The TCP path checks the TLS server name of such a connection;
		// QUIC's is encrypted. Refused, a client falls back to TCP.
		st.refuse(Refusal{Proto: "udp", Name: d.Name, Addr: dst.String(), Reason: "QUIC to a name rule's address: only TCP has its server name checked"})
		return false
	case !st.udpFlows.take(1):
		st.refuseAtLimit("udp", dst, fmt.Sprintf("%d UDP flows at once (limits.udp_flows)", st.limits.UDPFlows))
		return false
	}
	return st.udpFwd.HandlePacket(id, pkt)
}

// forwardUDP serves a new flow, which handleUDP counted.
func (st *Stack) forwardUDP(r *udp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(fromTCPIP(id.LocalAddress), id.LocalPort)
	up, err := st.dial(st.ctx, "udp", dst)
	if err != nil {
		st.udpFlows.give(1)
		st.cfg.Log.Debug("network: dial", "proto", "udp", "addr", dst, "err", err)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		st.udpFlows.give(1)
		up.Close()
		st.cfg.Log.Debug("network: udp endpoint", "addr", dst, "err", terr.String())
		return
	}
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer st.udpFlows.give(1)
		relayUDP(st.ctx, ep, &wq, up.(*net.UDPConn))
	}()
}

func tcpipAddr(a netip.Addr) tcpip.Address {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return tcpip.AddrFrom4(b)
	}
	return tcpip.AddrFrom16(a.As16())
}

func fromTCPIP(a tcpip.Address) netip.Addr {
	ad, _ := netip.AddrFromSlice(a.AsSlice())
	return ad.Unmap()
}

func tcpipLinkAddr(mac net.HardwareAddr) tcpip.LinkAddress {
	return tcpip.LinkAddress(mac)
}

func header4Subnet() tcpip.Subnet {
	s, _ := tcpip.NewSubnet(tcpip.AddrFrom4([4]byte{}), tcpip.MaskFromBytes(make([]byte, 4)))
	return s
}

func header6Subnet() tcpip.Subnet {
	s, _ := tcpip.NewSubnet(tcpip.AddrFrom16([16]byte{}), tcpip.MaskFromBytes(make([]byte, 16)))
	return s
}

// Publish forwards each connection accepted on l to the guest's port, until
// the stack stops.
func (st *Stack) Publish(l net.Listener, port uint16) {
	st.closers = append(st.closers, l)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				ctx, cancel := context.WithTimeout(st.ctx, dialTimeout)
				g, err := gonet.DialContextTCP(ctx, st.s, tcpip.FullAddress{NIC: nicID, Addr: tcpipAddr(GuestIPv4), Port: port}, ipv4.ProtocolNumber)
				cancel()
				if err != nil {
					st.cfg.Log.Debug("network: published port", "port", port, "err", err)
					c.Close()
					return
				}
				relay(st.ctx, c, g)
			}()
		}
	}()
}

// printable returns s, or s quoted in ASCII when it holds anything but
// printable ASCII (a terminal escape in a logged name stays inert).
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}
