package netstack

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// rrString is a record's type and data, for comparisons.
func rrString(rr dnsmessage.Resource) string {
	switch b := rr.Body.(type) {
	case *dnsmessage.AResource:
		return "A " + netip.AddrFrom4(b.A).String()
	case *dnsmessage.AAAAResource:
		return "AAAA " + netip.AddrFrom16(b.AAAA).String()
	case *dnsmessage.TXTResource:
		return "TXT " + strings.Join(b.TXT, "|")
	case *dnsmessage.MXResource:
		return fmt.Sprintf("MX %d %s", b.Pref, b.MX)
	case *dnsmessage.SRVResource:
		return fmt.Sprintf("SRV %d %d %d %s", b.Priority, b.Weight, b.Port, b.Target)
	case *dnsmessage.NSResource:
		return "NS " + b.NS.String()
	case *dnsmessage.CNAMEResource:
		return "CNAME " + b.CNAME.String()
	}
	return rr.Body.GoString()
}

func TestDNSAnswers(t *testing.T) {
	tn := newTestNet(t, "allow=*.ok.test", nil)
	tn.setDNS("a-only.ok.test", "198.51.100.2")
	tn.setDNS("aaaa-only.ok.test", "2001:db8::2")
	tn.setDNS("both.ok.test", "198.51.100.3", "2001:db8::3")
	tn.setDNS("denied.test", "198.51.100.2")
	tn.dns.SetRecords("rec.ok.test",
		&dnsmessage.TXTResource{TXT: []string{"hello ", "world"}},
		&dnsmessage.TXTResource{TXT: []string{strings.Repeat("a", 255), strings.Repeat("b", 45)}},
		&dnsmessage.MXResource{Pref: 10, MX: dnsmessage.MustNewName("mx1.ok.test.")},
		&dnsmessage.MXResource{Pref: 20, MX: dnsmessage.MustNewName("mx2.elsewhere.test.")},
		&dnsmessage.SRVResource{Priority: 1, Weight: 5, Port: 8443, Target: dnsmessage.MustNewName("srv.ok.test.")},
		&dnsmessage.NSResource{NS: dnsmessage.MustNewName("ns1.elsewhere.test.")},
	)
	tn.dns.SetRecords("alias.ok.test", &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("both.ok.test.")})

	for _, tc := range []struct {
		name  string
		qtype dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{"a-only.ok.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"A 198.51.100.2"}},
		// NODATA, not NXDOMAIN: musl drops the A answer too on NXDOMAIN.
		{"a-only.ok.test", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"aaaa-only.ok.test", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil},
		{"aaaa-only.ok.test", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"AAAA 2001:db8::2"}},
		{"both.ok.test", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"AAAA 2001:db8::3"}},
		{"nowhere.ok.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"nowhere.ok.test", dnsmessage.TypeAAAA, dnsmessage.RCodeNameError, nil},
		{"denied.test", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"denied.test", dnsmessage.TypeTXT, dnsmessage.RCodeNameError, nil},
		// The resolver joins a record's strings; they come back split at 255 bytes.
		{"rec.ok.test", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, []string{"TXT hello world", "TXT " + strings.Repeat("a", 255) + "|" + strings.Repeat("b", 45)}},
		{"rec.ok.test", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, []string{"MX 10 mx1.ok.test.", "MX 20 mx2.elsewhere.test."}},
		{"rec.ok.test", dnsmessage.TypeSRV, dnsmessage.RCodeSuccess, []string{"SRV 1 5 8443 srv.ok.test."}},
		{"rec.ok.test", dnsmessage.TypeNS, dnsmessage.RCodeSuccess, []string{"NS ns1.elsewhere.test."}},
		{"alias.ok.test", dnsmessage.TypeCNAME, dnsmessage.RCodeSuccess, []string{"CNAME both.ok.test."}},
		// A name that exists without records of the type asked: NODATA.
		{"a-only.ok.test", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, nil},
		{"a-only.ok.test", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, nil},
		{"a-only.ok.test", dnsmessage.TypeCNAME, dnsmessage.RCodeSuccess, nil},
		{"a-only.ok.test", dnsmessage.TypePTR, dnsmessage.RCodeSuccess, nil},
		{"nowhere.ok.test", dnsmessage.TypeTXT, dnsmessage.RCodeNameError, nil},
		{"nowhere.ok.test", dnsmessage.TypeSRV, dnsmessage.RCodeNameError, nil},
	} {
		t.Run(tc.name+"/"+tc.qtype.String(), func(t *testing.T) {
			m := tn.query(t, tc.name, tc.qtype)
			var got []string
			for _, rr := range m.Answers {
				got = append(got, rrString(rr))
			}
			if m.RCode != tc.rcode || !slices.Equal(got, tc.want) {
				t.Errorf("got %v %q, want %v %q", m.RCode, got, tc.rcode, tc.want)
			}
		})
	}

	refs := tn.refusals()
	if len(refs) != 1 || refs[0].Proto != "dns" || refs[0].Name != "denied.test" {
		t.Errorf("refusals: %+v, want denied.test's (logged once a second)", refs)
	}
	// An A question records the name's IPv6 addresses too, and a name
	// given only as a record target is not resolved.
	for a, want := range map[string]string{"198.51.100.3": "both.ok.test", "2001:db8::3": "both.ok.test", "198.51.100.2": "a-only.ok.test"} {
		if got := tn.st.cfg.Policy.NameOf(netip.MustParseAddr(a)); got != want {
			t.Errorf("policy: %s is %q, want %q", a, got, want)
		}
	}
}

// TestDNSRecordsRecordNothing: answering an MX or SRV question allows no
// connection to its target until the target itself is resolved.
func TestDNSRecordsRecordNothing(t *testing.T) {
	tn := newTestNet(t, "allow=*.ok.test", nil)
	port, _ := echoServer(t, "127.0.0.2:0")
	tn.setDNS("srv.ok.test", "198.51.100.2")
	tn.dns.SetRecords("rec.ok.test", &dnsmessage.SRVResource{Port: port, Target: dnsmessage.MustNewName("srv.ok.test.")})
	if m := tn.query(t, "rec.ok.test", dnsmessage.TypeSRV); len(m.Answers) != 1 {
		t.Fatalf("SRV: %v", m.Answers)
	}
	wantRefused(t, tn, "198.51.100.2:"+portString(port))
	tn.lookup(t, "srv.ok.test")
	wantHello(t, tn, "198.51.100.2:"+portString(port))
}

// BenchmarkDNSAddrs: the A and AAAA questions of a name, asked at once as
// the guest's libc asks them, answered from the upstream test server.
func BenchmarkDNSAddrs(b *testing.B) {
	tn := newTestNet(b, "public", nil)
	tn.setDNS("a-only.test", "198.51.100.2")
	for b.Loop() {
		var wg sync.WaitGroup
		for _, qt := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			wg.Go(func() {
				if m := tn.query(b, "a-only.test", qt); m.RCode == dnsmessage.RCodeServerFailure {
					b.Error(m.RCode)
				}
			})
		}
		wg.Wait()
	}
}
