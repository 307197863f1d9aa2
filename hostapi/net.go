package hostapi

import (
	"context"
	"fmt"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/netstack"
)

// guestNet is the guest agent's setup of the link to krunbox's network
// stack: the stack is the gateway and the name server.
func guestNet() *protocol.NetConfig {
	return &protocol.NetConfig{
		Interface: "eth0",
		Addresses: []string{
			fmt.Sprintf("%s/%d", netstack.GuestIPv4, netstack.PrefixIPv4.Bits()),
			fmt.Sprintf("%s/%d", netstack.GuestIPv6, netstack.PrefixIPv6.Bits()),
		},
		Gateways: []string{netstack.GatewayIPv4.String(), netstack.GatewayIPv6.String()},
		DNS:      []string{netstack.GatewayIPv4.String()},
		MTU:      netstack.MTU,
	}
}

// ChangeNetwork changes the rules of a running sandbox whose network is
// allow=...: op "allow" adds rules (a rule for a host or prefix already
// there replaces it), "deny" removes the rules for the hosts or prefixes
// given. It returns the network setting after the change, which is also
// recorded in the sandbox's configuration: it holds at the next start
// (this Sandbox value keeps reporting the configuration it was opened
// with; [Host.Get] returns the new one).
func (s *Sandbox) ChangeNetwork(_ context.Context, op string, rules []string) (string, error) {
	switch op {
	case "allow", "deny":
	default:
		return "", fmt.Errorf("change the network of %s: unknown operation %q: want allow or deny", s.name, op)
	}
	n, err := vmm.ChangeNetwork(s.Dir(), op, rules)
	if err != nil {
		return "", fmt.Errorf("sandbox %s: %w", s.name, err)
	}
	rec, err := readRecord(s.Dir())
	if err == nil {
		rec.Config.Network = Network(n)
		err = writeRecord(s.Dir(), rec)
	}
	if err != nil {
		return n, fmt.Errorf("sandbox %s: the network changed to %s, but it could not be recorded for the next start: %w", s.name, n, err)
	}
	return n, nil
}
