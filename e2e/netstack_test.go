package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/net/icmp"

	"github.com/krunbox/krunbox/internal/testutil/dnstest"
)

// netWorld is what the network scenarios reach: HTTP servers on the host's
// loopback standing for the internet and for private hosts, and a DNS
// server answering the test's names. The runner's stack is pointed at the
// DNS server and dials 198.51.100.N as 127.0.0.N (vmm.TestDNSEnv,
// vmm.TestLoopbackEnv; under real libkrun with vmm.TestRealEnv too: in
// hack/realvm the servers are on L1's loopback).
type netWorld struct {
	public  *hitServer // 127.0.0.2, seen by the guest as 198.51.100.2
	private *hitServer // 127.0.0.3, reached by its real address only
	dns     *dnstest.Server
}

type hitServer struct {
	port string
	hits atomic.Int32
}

func serveHits(t *testing.T, addr string) *hitServer {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	h := &hitServer{port: strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h.hits.Add(1)
		w.Write([]byte("pong"))
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return h
}

func (w *netWorld) setName(name string, addrs ...string) { w.dns.Set(name, addrs...) }

func newNetWorld(t *testing.T, e *env) *netWorld {
	w := &netWorld{public: serveHits(t, "127.0.0.2:0"), private: serveHits(t, "127.0.0.3:0"), dns: dnstest.Start(t)}
	e.extra = append(e.extra, "KRUNBOX_TEST_NET_DNS="+w.dns.Addr, "KRUNBOX_TEST_NET_LOOPBACK=1")
	if e.suite.mode == real {
		e.extra = append(e.extra, "KRUNBOX_TEST_NET_REAL=1")
	}
	return w
}

// wget fetches url in a sandbox run with network net: its stdout and code.
func wget(e *env, network, url string) result {
	return e.krunbox("run", "--rm", "--net", network, image, "--", "wget", "-q", "-O", "-", url)
}

func testNetStack(t *testing.T, e *env) {
	e.pull()
	w := newNetWorld(t, e)
	w.setName("ok.test", "198.51.100.2")
	w.setName("private.test", "10.0.0.5")
	pub := "http://198.51.100.2:" + w.public.port + "/"

	// public: the internet (by address and by name) but no private
	// address, not even through a name.
	if r := wget(e, "public", "http://ok.test:"+w.public.port+"/"); r.code != 0 || r.stdout != "pong" {
		t.Fatalf("public by name: %s", r)
	}
	if r := wget(e, "public", "http://private.test:"+w.public.port+"/"); r.code == 0 {
		t.Errorf("public: a name resolving to 10.0.0.5 was reached: %s", r)
	}
	// The host (the gateway stands for its loopback): only open reaches it.
	local := serveHits(t, "127.0.0.1:0")
	host := "http://192.168.127.1:" + local.port + "/"
	if r := wget(e, "public", host); r.code == 0 || local.hits.Load() != 0 {
		t.Errorf("public: the host's loopback was reached: %s", r)
	}
	if r := wget(e, "open", host); r.code != 0 || r.stdout != "pong" {
		t.Errorf("open: want the host's loopback reached: %s", r)
	}
	// allow: only what the rules name, by the names they name.
	allow := "allow=ok.test:" + w.public.port
	if r := wget(e, allow, "http://ok.test:"+w.public.port+"/"); r.code != 0 || r.stdout != "pong" {
		t.Errorf("allow: ok.test: %s", r)
	}
	if r := wget(e, allow, pub); r.code == 0 {
		t.Errorf("allow: the address without the name was reached: %s", r)
	}
	w.setName("other.test", "198.51.100.2")
	if r := wget(e, allow, "http://other.test:"+w.public.port+"/"); r.code == 0 {
		t.Errorf("allow: other.test was reached: %s", r)
	}
	// An allowed name on another port.
	if r := wget(e, "allow=ok.test:1", "http://ok.test:"+w.public.port+"/"); r.code == 0 {
		t.Errorf("allow: ok.test on a port not allowed was reached: %s", r)
	}
	// none: no interface.
	if r := wget(e, "none", pub); r.code == 0 {
		t.Errorf("none: %s", r)
	}
	// The guest's interface, as the agent set it up.
	r := e.krunbox("run", "--rm", "--net", "public", image, "--", "sh", "-c", "ip -o addr show eth0 | grep -c 'inet 192.168.127.2/24\\|inet6 fd7b:6b62:6f78::2/64'; ip route | grep -c default; grep -c nameserver /etc/resolv.conf")
	if r.code != 0 || r.stdout != "2\n1\n1\n" {
		t.Errorf("the guest's eth0: want an IPv4 and an IPv6 address, a default route and a name server: %s", r)
	}
}

func testNetRefusalsAndRules(t *testing.T, e *env) {
	e.pull()
	w := newNetWorld(t, e)
	w.setName("ok.test", "198.51.100.2")
	w.setName("later.test", "198.51.100.2")
	if r := e.krunbox("create", "--net", "allow=ok.test", "--name", "nb", image); r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	if r := e.krunbox("start", "nb"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	url := "http://later.test:" + w.public.port + "/"
	if r := e.krunbox("exec", "nb", "wget", "-q", "-O", "-", url); r.code == 0 {
		t.Fatalf("later.test reached before it was allowed: %s", r)
	}
	r := e.krunbox("logs", "--net", "nb")
	if r.code != 0 || !strings.Contains(r.stdout, "refused dns later.test") {
		t.Errorf("logs --net: want the refused DNS question: %s", r)
	}
	if r := e.krunbox("network", "nb", "allow", "later.test"); r.code != 0 || !strings.Contains(r.stdout, "later.test") {
		t.Fatalf("network allow: %s", r)
	}
	if r := e.krunbox("exec", "nb", "wget", "-q", "-O", "-", url); r.code != 0 || r.stdout != "pong" {
		t.Errorf("later.test after network allow: %s", r)
	}
	if r := e.krunbox("network", "nb", "deny", "later.test"); r.code != 0 || strings.Contains(r.stdout, "later.test") {
		t.Fatalf("network deny: %s", r)
	}
	if r := e.krunbox("exec", "nb", "wget", "-q", "-O", "-", url); r.code == 0 {
		t.Errorf("later.test after network deny: %s", r)
	}
	checkKrunboxError(t, e.krunbox("network", "nb", "allow", "bad rule"), "not allowed in a host name")
	if r := e.krunbox("network", "nb", "allow", "kept.test:8080"); r.code != 0 {
		t.Fatalf("network allow: %s", r)
	}
	if r := e.krunbox("inspect", "nb"); !strings.Contains(r.stdout, `"network": "allow=ok.test,kept.test:8080"`) {
		t.Errorf("inspect after network allow: want the rule recorded: %s", r)
	}
	e.ok("cp", netprobe(t), "nb:/netprobe")
	checkDNSAnswers(t, e, "nb")
	// ICMP under allow=: to the address of ok.test (allowed on every
	// port, and resolved just now) answered when the runner may ping;
	// to another refused, unanswered, and in logs --net.
	want := "1\n1\n"
	if hostCanPing() {
		want = "0\n1\n"
	}
	if r := e.krunbox("exec", "nb", "sh", "-c", "ping -c 1 -W 5 198.51.100.2 >/dev/null; echo $?; ping -c 1 -W 1 198.51.100.9 >/dev/null; echo $?"); r.stdout != want {
		t.Errorf("ICMP under allow=ok.test: want %q: %s", want, r)
	}
	if r := e.krunbox("logs", "--net", "nb"); !strings.Contains(r.stdout, "refused icmp - 198.51.100.9") {
		t.Errorf("logs --net: want the refused echo: %s", r)
	}
	checkSNIRefused(t, e, w, "nb")
	// A malformed rule at create: a clear error, exit 125.
	checkKrunboxError(t, e.krunbox("create", "--net", "allow=ok.test:99999", image), "port")
	checkKrunboxError(t, e.krunbox("run", "--net", "allow=*.com", image, "true"), "wildcard")
	// A libkrun without virtio-net (the double stands for one): the
	// stack's modes say so; tsi runs.
	if e.suite.mode != double {
		return
	}
	e.extra = append(e.extra, "TESTKRUN_NO_NET=1")
	checkKrunboxError(t, e.krunbox("run", "--rm", "--net", "public", image, "true"), "no virtio-net")
	if r := e.krunbox("run", "--rm", "--net", "tsi", image, "true"); r.code != 0 {
		t.Errorf("tsi without NET: %s", r)
	}
}

func testNetProtocols(t *testing.T, e *env) {
	e.pull()
	w := newNetWorld(t, e)

	// DNS rebinding: the name the guest resolved to a public address
	// now resolves to a private one; the stack checks the address the
	// guest connects to, every time.
	w.setName("rebind.test", "198.51.100.2")
	url := "http://rebind.test:" + w.public.port + "/"
	r := e.krunbox("run", "--rm", image, "--", "wget", "-q", "-O", "-", url)
	if r.stdout != "pong" || w.public.hits.Load() != 1 {
		t.Fatalf("rebinding, first fetch: %s (%d hits)", r, w.public.hits.Load())
	}
	w.setName("rebind.test", "10.0.0.5")
	r = e.krunbox("run", "--rm", image, "--", "wget", "-q", "-O", "-", url)
	if r.code == 0 || w.public.hits.Load() != 1 {
		t.Errorf("rebinding to 10.0.0.5: %s", r)
	}

	// UDP: to a public address through the stack, both ways (busybox's
	// tftp client; the server answers every datagram with a TFTP error
	// whose message the client prints).
	pc, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Skip(err)
	}
	defer pc.Close()
	var udpHits atomic.Int32
	go func() {
		buf := make([]byte, 600)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			udpHits.Add(1)
			pc.WriteTo([]byte("\x00\x05\x00\x01udp-answer\x00"), from)
		}
	}()
	uport := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
	r = e.krunbox("run", "--rm", image, "--", "tftp", "-g", "-r", "f", "-l", "/tmp/f", "198.51.100.2", uport)
	if !strings.Contains(r.stderr, "udp-answer") {
		t.Errorf("UDP to a public address: want the server's answer: %s", r)
	}
	before := udpHits.Load()
	r = e.krunbox("run", "--rm", image, "--", "timeout", "3", "tftp", "-g", "-r", "f", "-l", "/tmp/f", "10.0.0.5", uport)
	if r.code == 0 || udpHits.Load() != before {
		t.Errorf("UDP to a private address: %s", r)
	}
	// ICMP: the gateway answers; an echo to a public address is sent
	// from the host (when the runner may send one: a ping socket or a
	// raw one), one to a private address is refused, unanswered.
	want := "0\n1\n1\n"
	if hostCanPing() {
		want = "0\n0\n1\n"
	}
	r = e.krunbox("run", "--rm", image, "--", "sh", "-c", "ping -c 1 -W 2 192.168.127.1 >/dev/null; echo $?; ping -c 1 -W 5 198.51.100.2 >/dev/null; echo $?; ping -c 1 -W 1 10.0.0.5 >/dev/null; echo $?")
	if r.stdout != want {
		t.Errorf("ICMP: want the gateway and (%q) the public address to answer, not the private one: %s", want, r)
	}
	// IPv6: the host's ::1 through the gateway under open; a ULA refused
	// under public.
	l6, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("pong6")) })}
	go srv.Serve(l6)
	defer srv.Close()
	p6 := strconv.Itoa(l6.Addr().(*net.TCPAddr).Port)
	if r := wget(e, "open", "http://[fd7b:6b62:6f78::1]:"+p6+"/"); r.code != 0 || r.stdout != "pong6" {
		t.Errorf("IPv6 under open: %s", r)
	}
	if r := wget(e, "public", "http://[fd7b:6b62:6f78::1]:"+p6+"/"); r.code == 0 {
		t.Errorf("IPv6 to the host under public: %s", r)
	}

	// A published port binds 127.0.0.1 unless an address is given.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hp := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	if r := e.krunbox("create", "--name", "web", "-p", hp+":8080", image); r.code != 0 {
		t.Fatalf("create -p: %s", r)
	}
	if r := e.krunbox("start", "web"); r.code != 0 {
		t.Fatalf("start: %s", r)
	}
	if r := e.krunbox("exec", "web", "sh", "-c", "mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www"); r.code != 0 {
		t.Fatalf("httpd: %s", r)
	}
	resp, err := http.Get("http://127.0.0.1:" + hp + "/")
	if err != nil {
		t.Fatalf("published port: %v", err)
	}
	body := make([]byte, 100)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	if string(body[:n]) != "served\n" {
		t.Errorf("published port: got %q", body[:n])
	}
	if c, err := net.Dial("tcp", "127.0.0.2:"+hp); err == nil {
		c.Close()
		t.Errorf("the published port answers on 127.0.0.2 too: want 127.0.0.1 only")
	}
}

// testNetHost runs on the double and on real VMs alike (no test hook): a
// server on the host's loopback is out of reach under public,
// and reached through the gateway under open; the guest's eth0 is set up.
func testNetHost(t *testing.T, e *env) {
	e.pull()
	local := serveHits(t, "127.0.0.1:0")
	host := "http://192.168.127.1:" + local.port + "/"
	r := e.krunbox("run", "--rm", "--net", "public", image, "--", "sh", "-c", "ip -o addr show eth0 | grep -c 'inet 192.168.127.2/24\\|inet6 fd7b:6b62:6f78::2/64'; ip route | grep -c default; grep -c nameserver /etc/resolv.conf; wget -q -O - "+host+" || echo refused")
	if r.code != 0 || r.stdout != "2\n1\n1\nrefused\n" || local.hits.Load() != 0 {
		t.Errorf("public: want eth0 set up and the host's loopback out of reach: %s", r)
	}
	if r := wget(e, "open", host); r.code != 0 || r.stdout != "pong" || local.hits.Load() != 1 {
		t.Errorf("open: want the host's loopback reached through the gateway: %s", r)
	}
	// The link runs at MTU 65520 both ways: the guest's eth0 has it, and
	// a download in 64 KiB frames arrives whole (a device without guest
	// TSO would drop every frame beyond 1518 bytes and the download would
	// stall), as does an upload; eth0's average frame each way is larger
	// than 1500 bytes could make it.
	big := serveBig(t, "127.0.0.1:0", 2<<20)
	const stats = "/sys/class/net/eth0/statistics/"
	r = e.krunbox("run", "--rm", "--net", "open", image, "--", "sh", "-c",
		"cat /sys/class/net/eth0/mtu; timeout 60 wget -q -O - http://192.168.127.1:"+big.port+"/ | wc -c; "+
			// busybox wget sends its --post-file as a C string: no NUL in it.
			"yes 0123456789abcdef | head -c 1048576 > /tmp/up; timeout 60 wget -q -O - --post-file /tmp/up http://192.168.127.1:"+big.port+"/; "+
			"echo $(($(cat "+stats+"rx_bytes) / $(cat "+stats+"rx_packets))) $(($(cat "+stats+"tx_bytes) / $(cat "+stats+"tx_packets)))")
	lines := strings.Split(r.stdout, "\n")
	if r.code != 0 || len(lines) != 5 || strings.Join(lines[:3], "\n") != "65520\n2097152\nreceived 1048576" {
		t.Fatalf("open: want MTU 65520, 2 MiB down and 1 MiB up: %s", r)
	}
	var rx, tx int
	if _, err := fmt.Sscan(lines[3], &rx, &tx); err != nil || rx < 8192 || tx < 8192 {
		t.Errorf("eth0's average frame: %d bytes received, %d sent; want more than 8 KiB each way", rx, tx)
	}
	t.Logf("eth0's average frame: %d bytes received, %d sent", rx, tx)
}

// serveBig serves size bytes to a GET, and to a POST answers how many
// bytes it received.
func serveBig(t *testing.T, addr string, size int) *hitServer {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	h := &hitServer{port: strconv.Itoa(l.Addr().(*net.TCPAddr).Port)}
	chunk := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "received %d\n", n)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for left := size; left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return h
}

// checkDNSAnswers: the stack's DNS, asked from the guest as musl asks it:
// the AAAA question of an allowed name with IPv4 addresses only gets NODATA
// (musl gives up the whole lookup on NXDOMAIN), its A question the address,
// a name that does not exist or is not allowed NXDOMAIN. name is a started
// sandbox allowing ok.test, which has an IPv4 address only, with /netprobe.
func checkDNSAnswers(t *testing.T, e *env, name string) {
	for _, c := range []struct{ name, qtype, want string }{
		{"ok.test", "AAAA", "RCodeSuccess 0\n"},
		{"ok.test", "A", "RCodeSuccess 1\n"},
		{"ok.test", "TXT", "RCodeSuccess 0\n"},
		{"nowhere.ok.test", "A", "RCodeNameError 0\n"},
		{"notallowed.test", "AAAA", "RCodeNameError 0\n"},
	} {
		if r := e.krunbox("exec", name, "/netprobe", "dns", c.name, c.qtype); r.code != 0 || r.stdout != c.want {
			t.Errorf("DNS %s %s: want %q: %s", c.qtype, c.name, c.want, r)
		}
	}
}

// checkSNIRefused: under allow=, TLS on 443 to the address of an allowed
// name, asking for another server name (SNI), is reset, and the refusal is
// in logs --net; asking for the allowed name goes through. name is a
// started sandbox with an allow= network and /netprobe.
func checkSNIRefused(t *testing.T, e *env, w *netWorld, name string) {
	// Port 443 on 127.0.0.5, which the stack's test hooks show the guest
	// as 198.51.100.5.
	l, err := net.Listen("tcp", "127.0.0.5:443")
	if err != nil {
		t.Logf("SKIP the SNI case: it needs port 443 on 127.0.0.5 (root): %v", err)
		return
	}
	cert, _ := serverCert(t, "sni.test")
	var hellos atomic.Int32
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				hellos.Add(1)
			}
		},
	}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	w.setName("sni.test", "198.51.100.5")
	if r := e.krunbox("network", name, "allow", "sni.test:443"); r.code != 0 {
		t.Fatalf("network allow: %s", r)
	}
	if r := e.krunbox("exec", name, "/netprobe", "hello", "sni.test:443", "sni.test"); r.code != 0 || r.stdout != "ok\n" || hellos.Load() != 1 {
		t.Fatalf("TLS to sni.test asking for sni.test: want a handshake: %s (%d connections)", r, hellos.Load())
	}
	r := e.krunbox("exec", name, "/netprobe", "hello", "sni.test:443", "evil.test")
	if r.code == 0 || hellos.Load() != 1 {
		t.Errorf("TLS to sni.test's address asking for evil.test: want a reset, no connection upstream: %s (%d connections)", r, hellos.Load())
	}
	if r := e.krunbox("logs", "--net", name); !strings.Contains(r.stdout, "refused tls evil.test 198.51.100.5:443") {
		t.Errorf("logs --net: want the refused server name: %s", r)
	}
}

// hostCanPing reports whether this process can send ICMP echoes (a ping
// socket, or a raw socket as root), as the sandbox's runner must to
// forward the guest's.
func hostCanPing() bool {
	for _, network := range []string{"udp4", "ip4:icmp"} {
		if c, err := icmp.ListenPacket(network, ""); err == nil {
			c.Close()
			return true
		}
	}
	return false
}
