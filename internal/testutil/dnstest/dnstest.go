// Package dnstest serves DNS answers that a test sets, on 127.0.0.1 (UDP),
// as the resolver of krunbox's network stack in tests.
package dnstest

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers A and AAAA questions with the addresses Set gave a name,
// other questions with the records SetRecords gave it (and A, AAAA and
// CNAME questions with its CNAME record too), NOERROR with no answer for
// a name it has nothing of the type asked, and NXDOMAIN for a name it was
// not given.
type Server struct {
	// Addr is the server's address, "127.0.0.1:PORT".
	Addr    string
	mu      sync.Mutex
	names   map[string][]netip.Addr
	records map[string][]dnsmessage.ResourceBody
}

// Start serves until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &Server{Addr: pc.LocalAddr().String(), names: map[string][]netip.Addr{}, records: map[string][]dnsmessage.ResourceBody{}}
	go s.serve(pc)
	return s
}

// Set makes name resolve to addrs (IPv4 and IPv6 literals), replacing
// what it resolved to before.
func (s *Server) Set(name string, addrs ...string) {
	parsed := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		parsed[i] = netip.MustParseAddr(a)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[name] = parsed
}

// SetRecords gives name records of other types than A and AAAA (TXT, MX,
// SRV, NS, CNAME, ...), replacing those it had before.
func (s *Server) SetRecords(name string, rrs ...dnsmessage.ResourceBody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[name] = rrs
}

func (s *Server) serve(pc net.PacketConn) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var m dnsmessage.Message
		if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 {
			continue
		}
		q := m.Questions[0]
		m.Response, m.Authoritative = true, true
		name := strings.TrimSuffix(q.Name.String(), ".")
		s.mu.Lock()
		addrs, ok := s.names[name]
		rrs, hasRecords := s.records[name]
		s.mu.Unlock()
		if !ok && !hasRecords {
			m.RCode = dnsmessage.RCodeNameError
		}
		h := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
		for _, rr := range rrs {
			t := typeOf(rr)
			if t == q.Type || t == dnsmessage.TypeCNAME && (q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeAAAA) {
				m.Answers = append(m.Answers, dnsmessage.Resource{Header: h, Body: rr})
			}
		}
		for _, a := range addrs {
			if a.Is4() && q.Type == dnsmessage.TypeA {
				m.Answers = append(m.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AResource{A: a.As4()}})
			}
			if a.Is6() && q.Type == dnsmessage.TypeAAAA {
				m.Answers = append(m.Answers, dnsmessage.Resource{Header: h, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
		b, _ := m.Pack()
		pc.WriteTo(b, from)
	}
}

// typeOf is the type of the records SetRecords takes.
func typeOf(rr dnsmessage.ResourceBody) dnsmessage.Type {
	switch rr.(type) {
	case *dnsmessage.CNAMEResource:
		return dnsmessage.TypeCNAME
	case *dnsmessage.MXResource:
		return dnsmessage.TypeMX
	case *dnsmessage.NSResource:
		return dnsmessage.TypeNS
	case *dnsmessage.SRVResource:
		return dnsmessage.TypeSRV
	case *dnsmessage.TXTResource:
		return dnsmessage.TypeTXT
	}
	panic(fmt.Sprintf("dnstest: records of type %T", rr))
}
