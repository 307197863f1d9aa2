package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/dnstest"
)

// BenchmarkNetwork compares krunbox's network stack (public) with libkrun's
// TSI in the same run: the mean TCP connect time to a server on the host,
// and a 256 MiB HTTP download (netBenchSize; BENCHMARKS.md). It runs on the double (make
// bench-net), or on real libkrun with KRUNBOX_E2E_LIBKRUN=real (make
// bench-realvm, in nested VMs). Each b.N measures, in each mode's sandbox
// in turn, 200 connects and one download; the figures are the medians over
// b.N, and public/tsi the median of each round's ratio of download rates.
func BenchmarkNetwork(b *testing.B) {
	e := netBenchEnv(b)
	probe := netprobe(b)
	// 127.0.0.2 is 198.51.100.2 for the stack (KRUNBOX_TEST_NET_LOOPBACK);
	// under TSI the guest uses the host's sockets, so 127.0.0.2 itself.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Skip(err)
	}
	srv := &http.Server{Handler: download("")}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	modes := []struct{ net, host string }{{"tsi", "127.0.0.2"}, {"public", "198.51.100.2"}}
	for i, m := range modes {
		name := "bench-" + m.net
		if r := e.krunbox("create", "--name", name, "--net", m.net, image); r.code != 0 {
			b.Fatalf("create: %s", r)
		}
		if r := e.krunbox("start", name); r.code != 0 {
			b.Fatalf("start: %s", r)
		}
		if r := e.krunbox("cp", probe, name+":/netprobe"); r.code != 0 {
			b.Fatalf("cp: %s", r)
		}
		modes[i].host = m.host + ":" + port
	}
	var connect, mbps [2][]float64
	var ratio []float64
	b.ResetTimer()
	for range b.N {
		for i, m := range modes {
			name := "bench-" + m.net
			r := e.krunbox("exec", name, "/netprobe", "connect", m.host, "200")
			us, err := strconv.ParseFloat(strings.TrimSpace(r.stdout), 64)
			if r.code != 0 || err != nil {
				b.Fatalf("%s connect: %s", m.net, r)
			}
			connect[i] = append(connect[i], us)
			mbps[i] = append(mbps[i], benchGet(b, e, name, "/netprobe get http://"+m.host+"/"))
		}
		ratio = append(ratio, mbps[1][len(mbps[1])-1]/mbps[0][len(mbps[0])-1])
	}
	b.StopTimer()
	for i, m := range modes {
		b.ReportMetric(medianOf(connect[i]), m.net+"-connect-µs")
		b.ReportMetric(medianOf(mbps[i]), m.net+"-MB/s")
	}
	b.ReportMetric(medianOf(ratio), "public/tsi")
}

// BenchmarkNetworkSecrets compares, in the same run, a 256 MiB HTTPS
// download through TSI (the guest's TLS straight to the server) with the
// same download under allow= with a secret for the server's name: the stack
// hands the connection to the runner's TLS interception, which verifies the
// server's certificate, replaces the placeholder in the request's
// Authorization (the server answers 403 to anything but the value) and
// re-encrypts the body for the guest. On the double (make bench-net) or real
// libkrun (KRUNBOX_E2E_LIBKRUN=real), as BenchmarkNetwork.
func BenchmarkNetworkSecrets(b *testing.B) {
	e := netBenchEnv(b)
	probe := netprobe(b)
	// 127.0.0.4:443 is 198.51.100.4 for the stack, and apiName for both.
	l, err := net.Listen("tcp", "127.0.0.4:443")
	if err != nil {
		b.Skipf("SKIP: port 443 on 127.0.0.4 (root): %v", err)
	}
	const value = "sk-bench-0123456789"
	cert, certFile := serverCert(b, apiName)
	srv := &http.Server{Handler: download("Bearer " + value), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(l, "", "")
	b.Cleanup(func() { srv.Close() })
	dns := dnstest.Start(b)
	dns.Set(apiName, "198.51.100.4")
	e.extra = append(e.extra, "KRUNBOX_TEST_NET_DNS="+dns.Addr, "SSL_CERT_FILE="+certFile, "KRUNBOX_E2E_SECRET="+value)

	// tsi: the guest's own name for the server, its certificate trusted,
	// the value in the clear; secret: the placeholder, the sandbox's CA.
	modes := []struct{ name, cmd string }{
		{"bench-tsi", "SSL_CERT_DIR=/certs /netprobe get https://" + apiName + "/ 'Authorization: Bearer " + value + "'"},
		{"bench-secret", `/netprobe get https://` + apiName + `/ "Authorization: Bearer $API_KEY"`},
	}
	e.ok("create", "--name", modes[0].name, "--net", "tsi", image)
	e.ok("create", "--name", modes[1].name, "--net", "allow="+apiName, "--secret", "API_KEY=env:KRUNBOX_E2E_SECRET@"+apiName, image)
	for _, m := range modes {
		e.ok("start", m.name)
		e.ok("cp", probe, m.name+":/netprobe")
	}
	e.ok("exec", modes[0].name, "--", "sh", "-c", "mkdir -p /certs && echo '127.0.0.4 "+apiName+"' >>/etc/hosts")
	e.ok("cp", certFile, modes[0].name+":/certs/server.pem")
	var mbps [2][]float64
	var ratio []float64
	b.ResetTimer()
	for range b.N {
		for i, m := range modes {
			mbps[i] = append(mbps[i], benchGet(b, e, m.name, m.cmd))
		}
		ratio = append(ratio, mbps[1][len(mbps[1])-1]/mbps[0][len(mbps[0])-1])
	}
	b.StopTimer()
	b.ReportMetric(medianOf(mbps[0]), "tsi-https-MB/s")
	b.ReportMetric(medianOf(mbps[1]), "secret-https-MB/s")
	b.ReportMetric(medianOf(ratio), "secret/tsi")
}

// netBenchSize is what the network benchmarks download: 256 MiB, or
// KRUNBOX_E2E_NET_MIB MiB (hack/realvm's nested runs take 32: a 256 MiB
// download through TSI stalled in nested VMs).
var netBenchSize = func() int {
	if n, err := strconv.Atoi(os.Getenv("KRUNBOX_E2E_NET_MIB")); err == nil && n > 0 {
		return n << 20
	}
	return 256 << 20
}()

// netBenchEnv is the environment of a network benchmark: the double's
// (KRUNBOX_TEST_LIBKRUN), or real libkrun's with KRUNBOX_E2E_LIBKRUN=real,
// the image pulled and the stack's test hooks on.
func netBenchEnv(b *testing.B) *env {
	if imageErr != nil {
		b.Skip(imageErr)
	}
	s := &suite{mode: double, lib: os.Getenv("KRUNBOX_TEST_LIBKRUN")}
	if os.Getenv("KRUNBOX_E2E_LIBKRUN") == string(real) {
		s = &suite{mode: real, lib: os.Getenv("KRUNBOX_LIBKRUN")}
	} else if s.lib == "" {
		b.Skip("KRUNBOX_TEST_LIBKRUN: the double (make bench-net sets it), or KRUNBOX_E2E_LIBKRUN=real")
	}
	e := &env{t: b, suite: s, home: b.TempDir()}
	b.Cleanup(e.cleanup)
	e.pull()
	e.extra = append(e.extra, "KRUNBOX_TEST_NET_LOOPBACK=1")
	if s.mode == real {
		e.extra = append(e.extra, "KRUNBOX_TEST_NET_REAL=1")
	}
	return e
}

// download serves netBenchSize bytes, to requests whose Authorization is
// auth (any, if auth is empty); 403 to others.
func download(auth string) http.Handler {
	chunk := make([]byte, 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth != "" && r.Header.Get("Authorization") != auth {
			http.Error(w, "wrong Authorization", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(netBenchSize))
		for range netBenchSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
}

// benchGet runs a netprobe get (cmd, a shell command) in sandbox name and
// returns its rate in MB/s, after checking it read all of netBenchSize.
func benchGet(b *testing.B, e *env, name, cmd string) float64 {
	r := e.krunbox("exec", name, "--", "sh", "-c", cmd)
	var n int64
	var rate float64
	if _, err := fmt.Sscan(r.stdout, &n, &rate); r.code != 0 || err != nil || n != int64(netBenchSize) {
		b.Fatalf("%s: %s", cmd, r)
	}
	return rate
}
