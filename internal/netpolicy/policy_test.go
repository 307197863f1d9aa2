package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "", want: "public"},
		{in: "none", want: "none"},
		{in: "open", want: "open"},
		{in: "tsi", want: "tsi"},
		{in: "allow=registry.example.com", want: "allow=registry.example.com"},
		{in: "allow=API.Example.com.:443,*.cdn.example.com", want: "allow=api.example.com:443,*.cdn.example.com"},
		{in: "allow=10.0.0.0/8:22+80+22, 1.2.3.4", want: "allow=10.0.0.0/8:22+80,1.2.3.4"},
		{in: "allow=[2001:db8::/32]:443,2001:db8::1,::ffff:1.2.3.4", want: "allow=[2001:db8::/32]:443,2001:db8::1,1.2.3.4"},
		{in: "allow", err: "needs rules"},
		{in: "allow=", err: "no rule"},
		{in: "allow=,", err: "no rule"},
		{in: "public,open", err: "want none, public"},
		{in: "allow=exa mple.com", err: "not allowed in a host name"},
		{in: "allow=example.com:0", err: "port"},
		{in: "allow=example.com:65536", err: "port"},
		{in: "allow=example.com:", err: "empty port"},
		{in: "allow=example.com:http", err: "port"},
		{in: "allow=*.com", err: "wildcard needs a domain"},
		{in: "allow=a.*.com", err: "not allowed"},
		{in: "allow=10.0.0.1/8", err: "host bits"},
		{in: "allow=[2001:db8::1", err: "unclosed"},
		{in: "allow=-a.com", err: "begins or ends"},
		{in: "allow=a..com", err: "want a host name"},
		{in: "allow=" + strings.Repeat("a", 64) + ".com", err: "want a host name"},
		{in: "allow=fe80::1%eth0", err: "zone"},
	}
	for _, tt := range tests {
		s, err := Parse(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %v, %v; want an error with %q", tt.in, s, err, tt.err)
			}
			continue
		}
		if err != nil || s.String() != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tt.in, s.String(), err, tt.want)
		}
	}
}

func TestClass(t *testing.T) {
	tests := []struct {
		addr, class string
	}{
		{"8.8.8.8", ""},
		{"2606:4700::1111", ""},
		{"10.0.0.5", "private"},
		{"172.16.1.1", "private"},
		{"192.168.1.1", "private"},
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"100.64.0.1", "reserved 100.64.0.0/10"},
		{"fd00::1", "private"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"255.255.255.255", "reserved 240.0.0.0/4"},
		{"::ffff:10.0.0.1", "private"},
		{"64:ff9b::a00:1", "private"},
		{"64:ff9b::808:808", ""},
		{"2002:a00:1::", "reserved 2002::/16"},
	}
	for _, tt := range tests {
		if got := Class(netip.MustParseAddr(tt.addr)); got != tt.class {
			t.Errorf("Class(%s) = %q, want %q", tt.addr, got, tt.class)
		}
	}
}

func mustSpec(t *testing.T, s string) Spec {
	t.Helper()
	sp, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestCheck(t *testing.T) {
	// The host: 203.0.113.7 on a /24 and 3fff:1::7 on a /64, both
	// global, as a LAN's addresses may be.
	opts := Options{HostPrefixes: func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("203.0.113.7/24"), netip.MustParsePrefix("3fff:1::7/64")}
	}}
	tests := []struct {
		spec    string
		names   map[string][]string // name -> addresses the DNS answered
		dst     string
		allowed bool
		sni     bool
		reason  string
	}{
		{spec: "open", dst: "10.0.0.1:22", allowed: true},
		{spec: "public", dst: "8.8.8.8:53", allowed: true},
		{spec: "public", dst: "10.0.0.5:80", reason: "private"},
		{spec: "public", dst: "[::ffff:127.0.0.1]:80", reason: "loopback"},
		{spec: "public", dst: "169.254.169.254:80", reason: "link-local"},
		{spec: "public", dst: "203.0.113.7:80", reason: "address of the host"},
		{spec: "public", dst: "[::ffff:203.0.113.7]:80", reason: "address of the host"},
		{spec: "public", dst: "[64:ff9b::203.0.113.7]:80", reason: "address of the host"},
		{spec: "public", dst: "[3fff:1::7]:80", reason: "address of the host"},
		// The host's neighbours on its links.
		{spec: "public", dst: "203.0.113.2:80", reason: "on a network of the host's (203.0.113.0/24)"},
		{spec: "public", dst: "[::ffff:203.0.113.2]:80", reason: "on a network of the host's"},
		{spec: "public", dst: "[64:ff9b::203.0.113.2]:80", reason: "on a network of the host's (203.0.113.0/24)"},
		{spec: "public", dst: "[3fff:1::2]:443", reason: "on a network of the host's (3fff:1::/64)"},
		{spec: "public", dst: "203.0.114.2:80", allowed: true},
		{spec: "public", dst: "[3fff:1:0:1::2]:80", allowed: true},
		{spec: "public", dst: "[64:ff9b::203.0.114.2]:80", allowed: true},
		{spec: "allow=lan.test", names: map[string][]string{"lan.test": {"203.0.113.2"}}, dst: "203.0.113.2:80", reason: "non-public"},
		{spec: "allow=203.0.113.2", dst: "203.0.113.2:80", allowed: true},
		{spec: "public", names: map[string][]string{"evil.test": {"10.0.0.5"}}, dst: "10.0.0.5:80", reason: "private"},
		{spec: "none", dst: "8.8.8.8:53", reason: "network none"},
		{spec: "allow=example.com", names: map[string][]string{"example.com": {"93.184.215.14"}}, dst: "93.184.215.14:80", allowed: true},
		{spec: "allow=example.com", names: map[string][]string{"example.com": {"93.184.215.14"}}, dst: "93.184.215.14:443", allowed: true, sni: true},
		{spec: "allow=example.com:443", names: map[string][]string{"example.com": {"93.184.215.14"}}, dst: "93.184.215.14:80", reason: "no rule allows example.com on port 80"},
		{spec: "allow=example.com", names: map[string][]string{"other.com": {"93.184.215.14"}}, dst: "93.184.215.14:80", reason: "no rule allows other.com"},
		{spec: "allow=example.com", dst: "93.184.215.14:80", reason: "no rule allows this address"},
		{spec: "allow=*.example.com", names: map[string][]string{"a.b.example.com": {"1.1.1.1"}}, dst: "1.1.1.1:80", allowed: true},
		{spec: "allow=*.example.com", names: map[string][]string{"example.com": {"1.1.1.1"}}, dst: "1.1.1.1:80", reason: "no rule"},
		{spec: "allow=example.com", names: map[string][]string{"example.com": {"10.1.2.3"}}, dst: "10.1.2.3:80", reason: "non-public"},
		{spec: "allow=10.0.0.0/8:22", dst: "10.1.2.3:22", allowed: true},
		{spec: "allow=10.0.0.0/8:22", dst: "10.1.2.3:23", reason: "no rule"},
		{spec: "allow=2001:db8::/32", dst: "[2001:db8::5]:443", allowed: true},
		{spec: "allow=1.2.3.4", dst: "[::ffff:1.2.3.4]:80", allowed: true},
	}
	for _, tt := range tests {
		p := New(mustSpec(t, tt.spec), opts)
		for n, addrs := range tt.names {
			var as []netip.Addr
			for _, a := range addrs {
				as = append(as, netip.MustParseAddr(a))
			}
			p.Resolved(n, as)
		}
		d := p.Check(netip.MustParseAddrPort(tt.dst))
		if d.Allowed != tt.allowed || d.CheckSNI != tt.sni || !strings.Contains(d.Reason, tt.reason) {
			t.Errorf("%s: Check(%s) = %+v; want allowed %v, sni %v, reason with %q", tt.spec, tt.dst, d, tt.allowed, tt.sni, tt.reason)
		}
	}
}

func TestPublicOverride(t *testing.T) {
	p := New(Spec{Mode: Public}, Options{Public: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}})
	if d := p.Check(netip.MustParseAddrPort("127.0.0.2:80")); !d.Allowed {
		t.Errorf("127.0.0.2 declared public: %+v", d)
	}
	if d := p.Check(netip.MustParseAddrPort("127.0.0.3:80")); d.Allowed {
		t.Errorf("127.0.0.3 not declared public: %+v", d)
	}
}

func TestDNSAndSNI(t *testing.T) {
	p := New(mustSpec(t, "allow=api.example.com:443,*.cdn.test"), Options{})
	for _, tt := range []struct {
		name string
		ok   bool
	}{{"api.example.com", true}, {"API.example.com.", true}, {"x.cdn.test", true}, {"cdn.test", false}, {"example.com", false}, {"evil.com", false}} {
		if got := p.AllowsName(tt.name); got != tt.ok {
			t.Errorf("AllowsName(%s) = %v", tt.name, got)
		}
	}
	dst := netip.MustParseAddrPort("93.184.215.14:443")
	p.Resolved("api.example.com", []netip.Addr{dst.Addr()})
	p.Resolved("x.cdn.test", []netip.Addr{netip.MustParseAddr("1.1.1.1")})
	if err := p.CheckSNI("api.example.com", dst); err != nil {
		t.Error(err)
	}
	for sni, want := range map[string]string{"": "without a server name", "evil.com": "no rule", "x.cdn.test": "did not resolve"} {
		if err := p.CheckSNI(sni, dst); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckSNI(%q) = %v, want %q", sni, err, want)
		}
	}
}

func TestRuntimeRules(t *testing.T) {
	p := New(mustSpec(t, "allow=a.test"), Options{})
	if p.AllowsName("b.test") {
		t.Fatal("b.test allowed before the rule")
	}
	if err := p.Allow([]Rule{{Name: "b.test"}}); err != nil {
		t.Fatal(err)
	}
	if !p.AllowsName("b.test") {
		t.Fatal("b.test not allowed after Allow")
	}
	if err := p.Deny([]Rule{{Name: "a.test", Ports: []uint16{1}}}); err != nil {
		t.Fatal(err)
	}
	if p.AllowsName("a.test") || p.Spec().String() != "allow=b.test" {
		t.Fatalf("after Deny a.test: %s", p.Spec())
	}
	if err := New(Spec{Mode: Public}, Options{}).Allow([]Rule{{Name: "x.test"}}); err == nil {
		t.Fatal("Allow on public: want an error")
	}
}

func TestNamesBounded(t *testing.T) {
	p := New(Spec{Mode: Public}, Options{})
	a := netip.MustParseAddr("1.2.3.4")
	for i := range maxNamesPerAddr + 5 {
		p.Resolved("n"+string(rune('a'+i))+".test", []netip.Addr{a})
	}
	if n := len(p.names[a]); n != maxNamesPerAddr {
		t.Errorf("%d names kept for one address, want %d", n, maxNamesPerAddr)
	}
	if p.NameOf(a) != "n"+string(rune('a'+maxNamesPerAddr+4))+".test" {
		t.Errorf("NameOf = %s, want the newest", p.NameOf(a))
	}
}

// TestInterfacePrefixes: the host's interfaces are read with their on-link
// prefixes, not as single addresses (loopback's 127.0.0.1/8).
func TestInterfacePrefixes(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	ps := InterfacePrefixes()
	for _, p := range ps {
		if p.Addr() == lo {
			if p.Bits() != 8 {
				t.Errorf("loopback read as %s, want 127.0.0.1/8", p)
			}
			return
		}
	}
	t.Skipf("no 127.0.0.1 among the host's addresses %v", ps)
}

// TestHostPrefixesMapped: a prefix given in its IPv4-mapped form still
// covers the IPv4 addresses it stands for.
func TestHostPrefixesMapped(t *testing.T) {
	p := New(Spec{Mode: Public}, Options{HostPrefixes: func() []netip.Prefix {
		return []netip.Prefix{netip.MustParsePrefix("::ffff:203.0.113.7/120")}
	}})
	for _, dst := range []string{"203.0.113.7:80", "203.0.113.9:80"} {
		if d := p.Check(netip.MustParseAddrPort(dst)); d.Allowed {
			t.Errorf("%s: allowed, want refused: %+v", dst, d)
		}
	}
}
