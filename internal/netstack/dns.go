package netstack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// dnsTTL is the TTL of the stack's answers: short, so that a rule change
// or a new address is seen soon.
const dnsTTL = 10

// lookupTimeout bounds one upstream lookup; dnsConnIdle ends a DNS-over-TCP
// connection that sends no question, or takes no answer, for that long;
// dnsConnBuffer is such a connection's endpoint buffer each way (a
// message is at most 64 KiB).
const (
	lookupTimeout = 5 * time.Second
	dnsConnIdle   = 30 * time.Second
	dnsConnBuffer = 64 << 10
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

// serveDNS answers DNS over UDP on port 53 of the gateway's addresses
// (forwardDNS takes TCP).
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
		st.closers = append(st.closers, uc)
		st.wg.Add(1)
		go func() {
			defer st.wg.Done()
			st.serveDNSUDP(uc, netip.AddrPortFrom(a, 53))
		}()
	}
	return nil
}

// serveDNSUDP answers the questions sent to at on c, up to
// Limits.DNSQueries at once.
func (st *Stack) serveDNSUDP(c *gonet.UDPConn, at netip.AddrPort) {
	buf := make([]byte, 65535)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		select {
		case st.dnsSlots <- struct{}{}:
		default:
			// Too many questions at once: dropped, as a loaded server would.
			st.refuseAtLimit("dns", at, fmt.Sprintf("%d DNS questions at once (limits.dns_queries)", st.limits.DNSQueries))
			continue
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			defer func() { <-st.dnsSlots }()
			if resp := st.answer(q, 512); resp != nil {
				c.WriteTo(resp, from)
			}
		}()
	}
}

// forwardDNS serves a guest's DNS-over-TCP connection to the gateway, if
// it is within Limits.DNSConns.
func (st *Stack) forwardDNS(r *tcp.ForwarderRequest, dst netip.AddrPort) {
	if !st.dnsConns.take(1) {
		st.refuseAtLimit("dns", dst, fmt.Sprintf("%d DNS-over-TCP connections at once (limits.dns_connections)", st.limits.DNSConns))
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	r.Complete(false)
	if err != nil {
		st.dnsConns.give(1)
		st.cfg.Log.Debug("network: accept", "addr", dst, "err", err.String())
		return
	}
	setBuffers(ep, dnsConnBuffer)
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		defer st.dnsConns.give(1)
		stop := context.AfterFunc(st.ctx, ep.Abort)
		defer stop()
		st.serveDNSConn(gonet.NewTCPConn(&wq, ep))
	}()
}

// serveDNSConn answers the questions on a DNS-over-TCP connection one at
// a time: a guest that sends more without reading the answers finds the
// connection's buffers full, and waits.
func (st *Stack) serveDNSConn(c net.Conn) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(dnsConnIdle))
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(hdr[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		select {
		case st.dnsSlots <- struct{}{}:
		case <-st.ctx.Done():
			return
		}
		resp := st.answer(q, 65535)
		<-st.dnsSlots
		if resp == nil {
			return
		}
		binary.BigEndian.PutUint16(hdr[:], uint16(len(resp)))
		if _, err := c.Write(append(hdr[:], resp...)); err != nil {
			return
		}
	}
}

// answer answers one DNS query for a name the policy allows, resolved
// upstream: A and AAAA with addresses, TXT, MX, SRV, NS and CNAME with
// their records; NOERROR with no answer (NODATA) for a name that exists
// without records of the type asked, or for another type; NXDOMAIN for a
// name that does not exist or that no rule allows. It returns nil for a
// message not worth an answer.
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
	ctx, cancel := context.WithTimeout(st.ctx, lookupTimeout)
	defer cancel()
	switch q.Type {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA:
		resp.Answers, resp.RCode = st.answerAddrs(ctx, q)
	case dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeSRV, dnsmessage.TypeNS, dnsmessage.TypeCNAME:
		resp.Answers, err = st.records(ctx, q)
		if err != nil {
			resp.RCode = st.failure(ctx, name, err)
		}
	}
	return pack(&resp, maxSize)
}

// answerAddrs answers an A or AAAA question. It looks up both families at
// once (one lookup for the guest's two questions, which the resolver
// merges), so that a name with addresses of the other family only gets
// NODATA rather than NXDOMAIN: musl gives up a whole lookup when either
// of its two answers is NXDOMAIN. Every address found is recorded in the
// policy.
func (st *Stack) answerAddrs(ctx context.Context, q dnsmessage.Question) ([]dnsmessage.Resource, dnsmessage.RCode) {
	name := q.Name.String()
	addrs, err := st.resolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, rcodeOf(err)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	st.cfg.Policy.Resolved(name, addrs)
	var rrs []dnsmessage.Resource
	for _, a := range addrs {
		hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			rrs = append(rrs, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
		}
	}
	return rrs, dnsmessage.RCodeSuccess
}

// records looks up a TXT, MX, SRV, NS or CNAME question's records. The
// names in them grant nothing: a connection to a target still needs the
// target resolved through answer, which the policy checks.
func (st *Stack) records(ctx context.Context, q dnsmessage.Question) ([]dnsmessage.Resource, error) {
	name := q.Name.String()
	var bodies []dnsmessage.ResourceBody
	// The resolver drops records with malformed names and returns an
	// error along with the others: those others are answered.
	switch q.Type {
	case dnsmessage.TypeTXT:
		txts, err := st.resolver.LookupTXT(ctx, name)
		if len(txts) == 0 {
			return nil, err
		}
		for _, t := range txts {
			bodies = append(bodies, &dnsmessage.TXTResource{TXT: splitTXT(t)})
		}
	case dnsmessage.TypeMX:
		mxs, err := st.resolver.LookupMX(ctx, name)
		if len(mxs) == 0 {
			return nil, err
		}
		for _, mx := range mxs {
			if n, err := dnsmessage.NewName(fqdn(mx.Host)); err == nil {
				bodies = append(bodies, &dnsmessage.MXResource{Pref: mx.Pref, MX: n})
			}
		}
	case dnsmessage.TypeSRV:
		_, srvs, err := st.resolver.LookupSRV(ctx, "", "", name)
		if len(srvs) == 0 {
			return nil, err
		}
		for _, s := range srvs {
			if n, err := dnsmessage.NewName(fqdn(s.Target)); err == nil {
				bodies = append(bodies, &dnsmessage.SRVResource{Priority: s.Priority, Weight: s.Weight, Port: s.Port, Target: n})
			}
		}
	case dnsmessage.TypeNS:
		nss, err := st.resolver.LookupNS(ctx, name)
		if len(nss) == 0 {
			return nil, err
		}
		for _, ns := range nss {
			if n, err := dnsmessage.NewName(fqdn(ns.Host)); err == nil {
				bodies = append(bodies, &dnsmessage.NSResource{NS: n})
			}
		}
	case dnsmessage.TypeCNAME:
		cname, err := st.resolver.LookupCNAME(ctx, name)
		if err != nil {
			return nil, err
		}
		// The resolver gives the name itself when it has no CNAME.
		if n, err := dnsmessage.NewName(fqdn(cname)); err == nil && !strings.EqualFold(n.String(), name) {
			bodies = append(bodies, &dnsmessage.CNAMEResource{CNAME: n})
		}
	}
	rrs := make([]dnsmessage.Resource, len(bodies))
	for i, b := range bodies {
		rrs[i] = dnsmessage.Resource{Header: dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}, Body: b}
	}
	return rrs, nil
}

// failure is the rcode for a failed lookup of a record type other than
// addresses. The resolver says "not found" both for a name that does not
// exist and for one without records of that type: a name with addresses
// exists, and gets NODATA.
func (st *Stack) failure(ctx context.Context, name string, err error) dnsmessage.RCode {
	rc := rcodeOf(err)
	if rc != dnsmessage.RCodeNameError {
		return rc
	}
	if addrs, err := st.resolver.LookupNetIP(ctx, "ip", name); err == nil && len(addrs) > 0 {
		return dnsmessage.RCodeSuccess
	}
	return rc
}

// rcodeOf is the rcode for a failed upstream lookup: NXDOMAIN when the
// resolver found nothing, SERVFAIL otherwise.
func rcodeOf(err error) dnsmessage.RCode {
	if de, ok := errors.AsType[*net.DNSError](err); ok && de.IsNotFound {
		return dnsmessage.RCodeNameError
	}
	return dnsmessage.RCodeServerFailure
}

// splitTXT splits a TXT record's text, which the resolver gives joined,
// into character strings of at most 255 bytes.
func splitTXT(s string) []string {
	var parts []string
	for len(s) > 255 {
		parts = append(parts, s[:255])
		s = s[255:]
	}
	return append(parts, s)
}

// fqdn returns n with a trailing dot.
func fqdn(n string) string {
	if strings.HasSuffix(n, ".") {
		return n
	}
	return n + "."
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
