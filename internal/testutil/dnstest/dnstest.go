// Package dnstest serves DNS answers that a test sets, on 127.0.0.1 (UDP),
// as the resolver of krunbox's network stack in tests.
package dnstest

import (
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers A and AAAA questions with the addresses Set gave a name,
// and NXDOMAIN for a name it was not given.
type Server struct {
	// Addr is the server's address, "127.0.0.1:PORT".
	Addr  string
	mu    sync.Mutex
	names map[string][]netip.Addr
}

// Start serves until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &Server{Addr: pc.LocalAddr().String(), names: map[string][]netip.Addr{}}
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

func (s *Server) serve(pc net.PacketConn) {
	buf := make([]byte, 1500)
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
		s.mu.Lock()
		addrs, ok := s.names[strings.TrimSuffix(q.Name.String(), ".")]
		s.mu.Unlock()
		if !ok {
			m.RCode = dnsmessage.RCodeNameError
		}
		for _, a := range addrs {
			h := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
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
