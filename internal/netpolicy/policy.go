// Package netpolicy decides what a sandbox's network may reach: the modes
// (none, public, allow, open, tsi), the rules of allow mode, the classes of
// addresses that public mode refuses, and which names the sandbox's DNS
// answers. It holds no sockets: the stack (internal/netstack) asks it.
package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Mode is a sandbox's network mode.
type Mode string

// Modes.
const (
	// None: no interface but loopback.
	None Mode = "none"
	// Public: the internet, but no private, loopback, link-local,
	// multicast, CGNAT, ULA or host address (the default).
	Public Mode = "public"
	// Allow: only what the rules name (default deny).
	Allow Mode = "allow"
	// Open: everything, the LAN and the host included.
	Open Mode = "open"
	// TSI: libkrun's transparent socket impersonation, no stack of
	// krunbox's: the host's network identity, as open.
	TSI Mode = "tsi"
)

// Spec is a parsed network setting: a mode and, for Allow, its rules.
type Spec struct {
	Mode  Mode
	Rules []Rule
}

// UsesStack reports whether the mode runs krunbox's userspace stack
// (a virtio-net device in the guest).
func (s Spec) UsesStack() bool {
	return s.Mode == Public || s.Mode == Allow || s.Mode == Open
}

// String is the setting as Parse reads it.
func (s Spec) String() string {
	if s.Mode != Allow {
		return string(s.Mode)
	}
	r := make([]string, len(s.Rules))
	for i, rule := range s.Rules {
		r[i] = rule.String()
	}
	return "allow=" + strings.Join(r, ",")
}

// Parse reads a network setting: "none", "public", "open", "tsi" or
// "allow=RULE,..." (see ParseRule). An empty string is Public.
func Parse(s string) (Spec, error) {
	switch Mode(s) {
	case "":
		return Spec{Mode: Public}, nil
	case None, Public, Open, TSI:
		return Spec{Mode: Mode(s)}, nil
	}
	list, ok := strings.CutPrefix(s, "allow=")
	if !ok {
		if s == "allow" {
			return Spec{}, errors.New(`network "allow" needs rules: allow=RULE,... (a host name, *.domain, an IP or a CIDR, each optionally :PORT)`)
		}
		return Spec{}, fmt.Errorf("network %q: want none, public, open, tsi or allow=RULE[,RULE]", s)
	}
	rules, err := ParseRules(strings.Split(list, ","))
	if err != nil {
		return Spec{}, err
	}
	if len(rules) == 0 {
		return Spec{}, errors.New("network allow=: no rule given")
	}
	return Spec{Mode: Allow, Rules: rules}, nil
}

// Rule is one allow rule: a host name, a wildcard (*.example.com: the
// subdomains of example.com, not example.com itself), or an address prefix
// (an IP is a /32 or /128); Ports, when not empty, limits it to those ports.
type Rule struct {
	// Name is a lower-case host name without the trailing dot, or
	// "*.domain"; empty for an address rule.
	Name string
	// Prefix is the address rule's prefix (not valid for a name rule).
	Prefix netip.Prefix
	// Ports are the ports allowed; empty means all.
	Ports []uint16
}

// String is the rule as ParseRule reads it.
func (r Rule) String() string {
	var s string
	switch {
	case r.Name != "":
		s = r.Name
	case r.Prefix.IsSingleIP():
		s = r.Prefix.Addr().String()
		if r.Prefix.Addr().Is6() && len(r.Ports) > 0 {
			s = "[" + s + "]"
		}
	default:
		s = r.Prefix.String()
		if r.Prefix.Addr().Is6() && len(r.Ports) > 0 {
			s = "[" + s + "]"
		}
	}
	for i, p := range r.Ports {
		if i == 0 {
			s += ":"
		} else {
			s += "+"
		}
		s += strconv.Itoa(int(p))
	}
	return s
}

// ParseRules parses each rule, ignoring empty entries.
func ParseRules(list []string) ([]Rule, error) {
	var rules []Rule
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// ParseRule reads a rule: NAME, *.DOMAIN, IP or CIDR, optionally followed
// by :PORT or :PORT+PORT+... (an IPv6 address or prefix with ports goes in
// brackets: [2001:db8::/32]:443).
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("network rule %q: %s", s, why)
	}
	host, ports := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("unclosed [")
		}
		host, ports = s[1:end], s[end+1:]
		if ports != "" {
			var ok bool
			if ports, ok = strings.CutPrefix(ports, ":"); !ok || ports == "" {
				return bad("want [IPv6]:PORT")
			}
		}
	case strings.Count(s, ":") == 1:
		host, ports, _ = strings.Cut(s, ":")
		if ports == "" {
			return bad("empty port")
		}
	}
	var r Rule
	if ports != "" {
		for p := range strings.SplitSeq(ports, "+") {
			n, err := strconv.ParseUint(p, 10, 16)
			if err != nil || n == 0 {
				return bad(fmt.Sprintf("port %q: want 1 to 65535", p))
			}
			if !slices.Contains(r.Ports, uint16(n)) {
				r.Ports = append(r.Ports, uint16(n))
			}
		}
	}
	if p, err := netip.ParsePrefix(host); err == nil {
		if p != p.Masked() {
			return bad(fmt.Sprintf("prefix has host bits set (did you mean %s?)", p.Masked()))
		}
		r.Prefix = p
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return bad("an address with a zone")
		}
		a = a.Unmap()
		r.Prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	base, wild := strings.CutPrefix(name, "*.")
	if err := checkName(base); err != nil {
		return bad(err.Error())
	}
	if wild && !strings.Contains(base, ".") {
		return bad("a wildcard needs a domain with a dot (*.example.com, not *.com)")
	}
	r.Name = name
	return r, nil
}

// checkName checks a DNS host name: labels of letters, digits, '-' and '_'
// (not at a label's ends for '-'), 1 to 63 bytes, 253 bytes in all.
func checkName(n string) error {
	if n == "" {
		return errors.New("empty host name")
	}
	if len(n) > 253 {
		return errors.New("host name longer than 253 bytes")
	}
	for label := range strings.SplitSeq(n, ".") {
		if label == "" || len(label) > 63 {
			return errors.New("want a host name, *.domain, an IP or a CIDR")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q begins or ends with '-'", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q is not allowed in a host name (want a host name, *.domain, an IP or a CIDR)", c)
			}
		}
	}
	return nil
}

// MatchName reports whether the rule is a name rule matching host (lower
// case, no trailing dot).
func (r Rule) MatchName(host string) bool {
	if r.Name == "" {
		return false
	}
	if base, ok := strings.CutPrefix(r.Name, "*."); ok {
		return strings.HasSuffix(host, "."+base)
	}
	return host == r.Name
}

// allowsPort reports whether the rule covers port.
func (r Rule) allowsPort(port uint16) bool {
	return len(r.Ports) == 0 || slices.Contains(r.Ports, port)
}

// SameTarget reports whether r and o name the same host or prefix.
func (r Rule) SameTarget(o Rule) bool {
	return r.Name == o.Name && r.Prefix == o.Prefix
}

// NormalizeName lower-cases a DNS name and drops its trailing dot.
func NormalizeName(n string) string {
	return strings.ToLower(strings.TrimSuffix(n, "."))
}
