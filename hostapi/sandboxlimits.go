package hostapi

import (
	"errors"
	"fmt"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/netstack"
)

// Limits bound what the host spends on one sandbox's behalf, so that a
// guest that floods a resource (connections, flows, DNS, buffers, logs)
// gets errors while the host and the other sandboxes keep working. The
// VM bounds the guest's own memory and CPUs (Config.MemoryMiB,
// Config.CPUs); these bound the runner's. A zero field means its
// default, which normal work never meets.
type Limits struct {
	// TCPConnections bounds the guest's TCP connections through krunbox's
	// network stack at once; past it a new connection is reset. Default
	// 512 (a browser keeps up to 256, npm or a build a few dozen).
	TCPConnections int `json:"tcp_connections,omitempty"`
	// UDPFlows bounds the guest's UDP flows at once (a guest address and
	// port with one destination, ended after a minute without traffic).
	// Default 512.
	UDPFlows int `json:"udp_flows,omitempty"`
	// DNSConnections bounds the guest's DNS-over-TCP connections to the
	// sandbox's DNS server at once. Default 16.
	DNSConnections int `json:"dns_connections,omitempty"`
	// DNSQueries bounds the DNS questions answered at once; a client that
	// pipelines questions without reading the answers stalls. Default 64.
	DNSQueries int `json:"dns_queries,omitempty"`
	// ConnectionBuffer bounds the bytes one TCP connection buffers each
	// way on the host. Default 4 MiB.
	ConnectionBuffer int `json:"connection_buffer,omitempty"`
	// NetworkBuffer bounds the bytes buffered at once by all of the
	// sandbox's connections that carry bulk data. Default 64 MiB.
	NetworkBuffer int64 `json:"network_buffer,omitempty"`
	// LogSize bounds each file of each log the guest can make grow (the
	// console, the runner's log, the network refusals): a full one is
	// rotated into one previous file, so a log takes at most twice this.
	// Default 4 MiB; at least 64 KiB.
	LogSize int64 `json:"log_size,omitempty"`
}

// DefaultLimits returns the limits that a zero field of Limits stands for.
func DefaultLimits() Limits {
	n := netstack.DefaultLimits()
	return Limits{
		TCPConnections:   n.TCPConns,
		UDPFlows:         n.UDPFlows,
		DNSConnections:   n.DNSConns,
		DNSQueries:       n.DNSQueries,
		ConnectionBuffer: n.ConnBuffer,
		NetworkBuffer:    n.Buffer,
		LogSize:          logfile.DefaultMax,
	}
}

// validate reports a negative field or a log size under the minimum.
func (l Limits) validate() error {
	var errs []error
	if err := l.netstack().Validate(); err != nil {
		errs = append(errs, err)
	}
	if l.LogSize < 0 || (l.LogSize > 0 && l.LogSize < logfile.MinMax) {
		errs = append(errs, fmt.Errorf("log size %d: want at least %d bytes (0: the default)", l.LogSize, logfile.MinMax))
	}
	return errors.Join(errs...)
}

// netstack returns the network stack's share of l.
func (l Limits) netstack() netstack.Limits {
	return netstack.Limits{
		TCPConns:   l.TCPConnections,
		UDPFlows:   l.UDPFlows,
		DNSConns:   l.DNSConnections,
		DNSQueries: l.DNSQueries,
		ConnBuffer: l.ConnectionBuffer,
		Buffer:     l.NetworkBuffer,
	}
}
