package netpolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Options are a Policy's facts about its surroundings.
type Options struct {
	// HostPrefixes returns the addresses of the host's interfaces with
	// the length of their on-link prefixes (203.0.113.1/24): public mode
	// refuses the host's addresses and its links' neighbours, whatever
	// their class (a LAN's addresses may be global). Nil means
	// InterfacePrefixes, read again at most once a second (interfaces
	// change).
	HostPrefixes func() []netip.Prefix
	// Public are prefixes counted as public whatever their class. Tests
	// only (servers on the host's loopback stand for the internet); the
	// runner sets it only under the libkrun test double.
	Public []netip.Prefix
}

// Policy decides, connection by connection, what a sandbox may reach. It
// is safe for concurrent use; its rules can change while it is used.
type Policy struct {
	opts Options

	mu    sync.Mutex
	spec  Spec
	names map[netip.Addr][]string // names the sandbox's DNS resolved to each address
	order []netip.Addr            // insertion order of names, for eviction

	hostMu       sync.Mutex
	hostPrefixes []netip.Prefix
	hostAt       time.Time
}

// maxNames bounds how many addresses the policy remembers names for, and
// maxNamesPerAddr how many names for one address.
const (
	maxNames        = 16384
	maxNamesPerAddr = 16
)

// New returns the policy of spec.
func New(spec Spec, opts Options) *Policy {
	return &Policy{spec: spec, opts: opts, names: map[netip.Addr][]string{}}
}

// Spec returns the current setting.
func (p *Policy) Spec() Spec {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Spec{Mode: p.spec.Mode, Rules: slices.Clone(p.spec.Rules)}
}

// ErrNotAllowMode is returned when rules are changed on a sandbox whose
// network is not allow=.
var ErrNotAllowMode = errors.New("rules apply to network allow=... only")

// Allow adds rules (a rule for a host or prefix already there replaces it).
func (p *Policy) Allow(rules []Rule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spec.Mode != Allow {
		return fmt.Errorf("network %s: %w", p.spec.Mode, ErrNotAllowMode)
	}
	for _, r := range rules {
		i := slices.IndexFunc(p.spec.Rules, r.SameTarget)
		if i >= 0 {
			p.spec.Rules[i] = r
		} else {
			p.spec.Rules = append(p.spec.Rules, r)
		}
	}
	return nil
}

// Deny removes the rules for the hosts or prefixes of rules (their ports
// are ignored). Connections open already stay open.
func (p *Policy) Deny(rules []Rule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spec.Mode != Allow {
		return fmt.Errorf("network %s: %w", p.spec.Mode, ErrNotAllowMode)
	}
	for _, r := range rules {
		p.spec.Rules = slices.DeleteFunc(p.spec.Rules, r.SameTarget)
	}
	return nil
}

// AllowsName reports whether the sandbox's DNS answers name: always
// except in allow mode, where a name rule must match it.
func (p *Policy) AllowsName(name string) bool {
	name = NormalizeName(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.spec.Mode != Allow {
		return true
	}
	return slices.ContainsFunc(p.spec.Rules, func(r Rule) bool { return r.MatchName(name) })
}

// Resolved records that the sandbox's DNS answered name with addrs.
func (p *Policy) Resolved(name string, addrs []netip.Addr) {
	name = NormalizeName(name)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range addrs {
		a = a.Unmap()
		ns, known := p.names[a]
		if i := slices.Index(ns, name); i >= 0 {
			ns = slices.Delete(ns, i, i+1)
		}
		if len(ns) >= maxNamesPerAddr {
			ns = ns[1:]
		}
		p.names[a] = append(ns, name) // the newest last
		if !known {
			p.order = append(p.order, a)
			if len(p.order) > maxNames {
				delete(p.names, p.order[0])
				p.order = p.order[1:]
			}
		}
	}
}

// NameOf returns the name the sandbox's DNS most recently resolved to a,
// or "".
func (p *Policy) NameOf(a netip.Addr) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := p.names[a.Unmap()]
	if len(ns) == 0 {
		return ""
	}
	return ns[len(ns)-1]
}

// Decision is the policy's answer for one connection.
type Decision struct {
	// Allowed says whether the connection may be made.
	Allowed bool
	// Reason says why not (or why, for an allowed one: "open", "public",
	// the rule).
	Reason string
	// Name is the host name the connection was allowed by, or the name
	// the sandbox resolved to the address, "" if none.
	Name string
	// CheckSNI says that the connection is TLS to check with CheckSNI
	// before anything reaches the upstream: allow mode, port 443, allowed
	// by a name rule. The decision is the same for UDP, whose QUIC hides
	// its server name: the stack refuses such datagrams.
	CheckSNI bool
}

// Check decides whether the sandbox may connect to dst.
func (p *Policy) Check(dst netip.AddrPort) Decision {
	a, port := dst.Addr().Unmap(), dst.Port()
	p.mu.Lock()
	spec := p.spec
	rules := slices.Clone(spec.Rules)
	names := slices.Clone(p.names[a])
	p.mu.Unlock()
	d := Decision{}
	if len(names) > 0 {
		d.Name = names[len(names)-1]
	}
	switch spec.Mode {
	case Open, TSI:
		d.Allowed, d.Reason = true, "open"
		return d
	case Public:
		if why := p.notPublic(a); why != "" {
			d.Reason = "not public: " + why
			return d
		}
		d.Allowed, d.Reason = true, "public"
		return d
	case Allow:
		for _, r := range rules {
			if r.Name == "" && r.Prefix.Contains(a) && r.allowsPort(port) {
				d.Allowed, d.Reason = true, "rule "+r.String()
				return d
			}
		}
		for i := len(names) - 1; i >= 0; i-- {
			for _, r := range rules {
				if !r.MatchName(names[i]) || !r.allowsPort(port) {
					continue
				}
				if why := p.notPublic(a); why != "" {
					d.Name, d.Reason = names[i], fmt.Sprintf("%s resolved to a non-public address (%s): allow it by address", names[i], why)
					return d
				}
				d.Allowed, d.Name, d.Reason = true, names[i], "rule "+r.String()
				d.CheckSNI = port == 443
				return d
			}
		}
		switch {
		case d.Name != "":
			d.Reason = "no rule allows " + d.Name + " on port " + fmt.Sprint(port)
		default:
			d.Reason = "no rule allows this address (connect by a name the sandbox resolved, or allow the address)"
		}
		return d
	}
	d.Reason = "network " + string(spec.Mode)
	return d
}

// CheckSNI checks the server name a TLS client sent to dst on a connection
// that Check allowed with CheckSNI: a name rule must allow it on port 443
// and the sandbox must have resolved it to dst.
func (p *Policy) CheckSNI(sni string, dst netip.AddrPort) error {
	if sni == "" {
		return errors.New("TLS without a server name (SNI)")
	}
	sni = NormalizeName(sni)
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.ContainsFunc(p.spec.Rules, func(r Rule) bool { return r.MatchName(sni) && r.allowsPort(dst.Port()) }) {
		return fmt.Errorf("TLS server name %s: no rule allows it", sni)
	}
	if !slices.Contains(p.names[dst.Addr().Unmap()], sni) {
		return fmt.Errorf("TLS server name %s: the sandbox did not resolve it to %s", sni, dst.Addr())
	}
	return nil
}

// notPublic says why a is not a public address for this policy, or "".
func (p *Policy) notPublic(a netip.Addr) string {
	a = a.Unmap()
	for _, pub := range p.opts.Public {
		if pub.Contains(a) {
			return ""
		}
	}
	if c := Class(a); c != "" {
		return c
	}
	// A NAT64 address reaches the IPv4 address it embeds.
	targets := []netip.Addr{a}
	if nat64.Contains(a) {
		targets = append(targets, netip.AddrFrom4([4]byte(a.AsSlice()[12:])))
	}
	for _, hp := range p.hostPrefixesNow() {
		for _, t := range targets {
			switch {
			case hp.Addr() == t:
				return "an address of the host"
			case hp.Masked().Contains(t):
				return "on a network of the host's (" + hp.Masked().String() + ")"
			}
		}
	}
	return ""
}

func (p *Policy) hostPrefixesNow() []netip.Prefix {
	if p.opts.HostPrefixes != nil {
		return normalize(p.opts.HostPrefixes())
	}
	p.hostMu.Lock()
	defer p.hostMu.Unlock()
	if time.Since(p.hostAt) < time.Second {
		return p.hostPrefixes
	}
	// A new slice: callers keep reading the old one.
	p.hostPrefixes, p.hostAt = InterfacePrefixes(), time.Now()
	return p.hostPrefixes
}

// normalize unmaps the addresses of prefixes given as IPv4-mapped IPv6.
func normalize(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, hp := range ps {
		if a := hp.Addr(); a.Is4In6() {
			hp = netip.PrefixFrom(a.Unmap(), max(hp.Bits()-96, 0))
		}
		out = append(out, hp)
	}
	return out
}

// InterfacePrefixes returns the addresses of the host's interfaces with
// the lengths of their on-link prefixes, or none if they cannot be read.
func InterfacePrefixes() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, ad := range addrs {
		n, ok := ad.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		ones, bits := n.Mask.Size()
		if a.Is4() && bits == 128 {
			ones -= 96
		}
		if bits == 0 || ones < 0 || ones > a.BitLen() {
			ones = a.BitLen() // not a prefix's mask: the address alone
		}
		out = append(out, netip.PrefixFrom(a, ones))
	}
	return out
}
