package netstack

import (
	"fmt"
	"sync/atomic"
)

// Limits bound what one guest makes the stack hold on the host: past a
// count limit, new flows are refused (a TCP reset, an ICMP port
// unreachable) and the refusal is logged once per burst; flows already
// open keep working. A zero field means its default ([DefaultLimits]).
type Limits struct {
	// TCPConns bounds the guest's TCP connections through the stack at
	// once, from the connect to the close (DNS over TCP apart). Default
	// 512: a browser keeps up to 256 sockets, npm or a build tool a few
	// dozen.
	TCPConns int `json:"tcp_conns,omitempty"`
	// UDPFlows bounds the guest's UDP flows at once: a flow is a guest
	// address and port with one destination, and ends after a minute
	// without a datagram from either side. Default 512 (the stack's own
	// DNS server takes no flow).
	UDPFlows int `json:"udp_flows,omitempty"`
	// DNSConns bounds the guest's DNS-over-TCP connections to the stack's
	// DNS server at once. Default 16: a resolver opens one for a
	// truncated answer, and closes it.
	DNSConns int `json:"dns_conns,omitempty"`
	// DNSQueries bounds the DNS questions the stack answers at once, UDP
	// and TCP together (a TCP connection's questions are answered one at
	// a time: a client that pipelines them and reads no answer stalls).
	// Past it, UDP questions are dropped and TCP ones wait. Default 64.
	DNSQueries int `json:"dns_queries,omitempty"`
	// ConnBuffer is the most one TCP connection buffers each way, in
	// bytes, once that way has carried bulk data (see Buffer); until then
	// it buffers 64 KiB each way, which carries 170 to 370 MB/s through
	// the stack: more than an internet link (the host's socket buffers
	// the internet's round trips). Default 4 MiB: the guest
	// link's bandwidth-delay product for a download from the host's
	// loopback (0.5 to 1 GB/s, a few ms of round trip on a loaded host);
	// 8 MiB, gVisor's former cap, measured no faster.
	ConnBuffer int `json:"conn_buffer,omitempty"`
	// Buffer bounds the bytes granted at once to connections that carry
	// bulk data, for their bigger buffers (ConnBuffer and 256 KiB relay
	// reads); a connection that finds it used up keeps its small buffers
	// (and asks again later). Default 64 MiB: 15 downloads at full speed
	// at once.
	Buffer int64 `json:"buffer,omitempty"`
}

// DefaultLimits returns the limits a zero field stands for.
func DefaultLimits() Limits {
	return Limits{
		TCPConns:   512,
		UDPFlows:   512,
		DNSConns:   16,
		DNSQueries: 64,
		ConnBuffer: 4 << 20,
		Buffer:     64 << 20,
	}
}

// Validate reports a negative field.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"TCPConns", int64(l.TCPConns)}, {"UDPFlows", int64(l.UDPFlows)}, {"DNSConns", int64(l.DNSConns)}, {"DNSQueries", int64(l.DNSQueries)}, {"ConnBuffer", int64(l.ConnBuffer)}, {"Buffer", l.Buffer}} {
		if f.v < 0 {
			return fmt.Errorf("network limit %s: %d is negative", f.name, f.v)
		}
	}
	return nil
}

// withDefaults fills the zero fields with their defaults, and raises
// ConnBuffer to the small buffer every connection has.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.TCPConns, d.TCPConns)
	set(&l.UDPFlows, d.UDPFlows)
	set(&l.DNSConns, d.DNSConns)
	set(&l.DNSQueries, d.DNSQueries)
	set(&l.ConnBuffer, d.ConnBuffer)
	l.ConnBuffer = max(l.ConnBuffer, baseConnBuffer)
	if l.Buffer == 0 {
		l.Buffer = d.Buffer
	}
	return l
}

// quota counts what the guest holds of one bounded resource.
type quota struct {
	used atomic.Int64
	max  int64
}

// take takes n if that stays within the bound, and reports whether it did.
func (q *quota) take(n int64) bool {
	for {
		u := q.used.Load()
		if u+n > q.max {
			return false
		}
		if q.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give gives back n taken before.
func (q *quota) give(n int64) { q.used.Add(-n) }
