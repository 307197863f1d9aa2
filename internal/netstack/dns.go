package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// dnsTTL is the TTL of the stack's answers: short, so that a rule change
// or a new address is seen soon.
const dnsTTL = 10

// lookupTimeout bounds one upstream lookup, and maxDNSInFlight how many
// UDP questions are answered at once.
const (
	lookupTimeout  = 5 * time.Second
	maxDNSInFlight = 64
)

// newResolver returns the resolver the stack asks: server (host:port), or
// the host's when empty.
func newResolver(server string) *net.Resolver {
	if server == "" {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}

// serveDNS answers DNS on port 53 of the gateway's addresses, UDP and TCP.
func (st *Stack) serveDNS() error {
	for _, a := range []netip.Addr{GatewayIPv4, GatewayIPv6} {
		proto := ipv4.ProtocolNumber
		if a.Is6() {
			proto = ipv6.ProtocolNumber
		}
		fa := tcpip.FullAddress{NIC: nicID, Addr: tcpipAddr(a), Port: 53}
		uc, err := gonet.DialUDP(st.s, &fa, nil, proto)
		if err != nil {
			return fmt.Errorf("netstack: DNS on %s: %w", a, err)
		}
		tl, err := gonet.ListenTCP(st.s, fa, proto)
		if err != nil {
			uc.Close()
			return fmt.Errorf("netstack: DNS on %s: %w", a, err)
		}
		st.closers = append(st.closers, uc, tl)
		st.wg.Add(2)
		go func() {
			defer st.wg.Done()
			st.serveDNSUDP(uc)
		}()
		go func() {
			defer st.wg.Done()
			st.serveDNSTCP(tl)
		}()
	}
	return nil
}

func (st *Stack) serveDNSUDP(c *gonet.UDPConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		select {
		case st.dnsSlots <- struct{}{}:
		default:
			continue // too many questions at once: dropped, as a loaded server would
		}
		go func() {
			defer func() { <-st.dnsSlots }()
			if resp := st.answer(q, 512); resp != nil {
				c.WriteTo(resp, from)
			}
		}()
	}
}

func (st *Stack) serveDNSTCP(l *gonet.TCPListener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				c.SetDeadline(time.Now().Add(30 * time.Second))
				var hdr [2]byte
				if _, err := io.ReadFull(c, hdr[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(hdr[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				resp := st.answer(q, 65535)
				if resp == nil {
					return
				}
				binary.BigEndian.PutUint16(hdr[:], uint16(len(resp)))
				if _, err := c.Write(append(hdr[:], resp...)); err != nil {
					return
				}
			}
		}()
	}
}

// answer answers one DNS query: A and AAAA questions for names the policy
// allows, resolved upstream; NXDOMAIN for the others; an empty answer for
// other types. It returns nil for a message not worth an answer.
func (st *Stack) answer(query []byte, maxSize int) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}}
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			resp.RCode = dnsmessage.RCodeNotImplemented
		}
		return pack(&resp, maxSize)
	}
	q := qs[0]
	resp.Questions = qs
	name := q.Name.String()
	if !st.cfg.Policy.AllowsName(name) {
		resp.RCode = dnsmessage.RCodeNameError
		st.refuse(Refusal{Proto: "dns", Name: trimDot(name), Reason: "no rule allows this name"})
		return pack(&resp, maxSize)
	}
	network := ""
	switch q.Type {
	case dnsmessage.TypeA:
		network = "ip4"
	case dnsmessage.TypeAAAA:
		network = "ip6"
	default:
		return pack(&resp, maxSize) // no data of that type here
	}
	ctx, cancel := context.WithTimeout(st.ctx, lookupTimeout)
	defer cancel()
	addrs, err := st.resolver.LookupNetIP(ctx, network, trimDot(name))
	if err != nil {
		var de *net.DNSError
		switch {
		case errors.As(err, &de) && de.IsNotFound:
			// An empty answer for the other family of a name that
			// exists would be better; NXDOMAIN for both is what the
			// resolver tells us.
			resp.RCode = dnsmessage.RCodeNameError
		default:
			resp.RCode = dnsmessage.RCodeServerFailure
		}
		return pack(&resp, maxSize)
	}
	var kept []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
		default:
			continue
		}
		kept = append(kept, a)
	}
	st.cfg.Policy.Resolved(name, kept)
	return pack(&resp, maxSize)
}

// pack packs m, truncated to maxSize (answers dropped, TC set).
func pack(m *dnsmessage.Message, maxSize int) []byte {
	b, err := m.Pack()
	for err == nil && len(b) > maxSize && len(m.Answers) > 0 {
		m.Answers = m.Answers[:len(m.Answers)/2]
		m.Truncated = true
		b, err = m.Pack()
	}
	if err != nil {
		return nil
	}
	return b
}

func trimDot(n string) string {
	if len(n) > 1 && n[len(n)-1] == '.' {
		return n[:len(n)-1]
	}
	return n
}
