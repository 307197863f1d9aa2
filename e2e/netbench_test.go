package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkNetwork compares krunbox's network stack (public) with libkrun's
// TSI in the same run: the mean TCP connect time to a server on the host,
// and a 256 MiB HTTP download (BENCHMARKS.md). It runs on the double (make
// bench-net), or on real libkrun with KRUNBOX_E2E_LIBKRUN=real (make
// bench-realvm, in nested VMs). Each b.N measures, in each mode's sandbox
// in turn, 200 connects and one download; the figures are the medians over
// b.N, and public/tsi the median of each round's ratio of download rates.
func BenchmarkNetwork(b *testing.B) {
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
	probe := netprobe(b)
	const size = 256 << 20
	// 127.0.0.2 is 198.51.100.2 for the stack (KRUNBOX_TEST_NET_LOOPBACK);
	// under TSI the guest uses the host's sockets, so 127.0.0.2 itself.
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		b.Skip(err)
	}
	chunk := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for range size / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(l)
	b.Cleanup(func() { srv.Close() })
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	e.extra = append(e.extra, "KRUNBOX_TEST_NET_LOOPBACK=1")
	if s.mode == real {
		e.extra = append(e.extra, "KRUNBOX_TEST_NET_REAL=1")
	}

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
			r = e.krunbox("exec", name, "/netprobe", "get", "http://"+m.host+"/")
			var n int64
			var rate float64
			if _, err := fmt.Sscan(r.stdout, &n, &rate); r.code != 0 || err != nil || n != size {
				b.Fatalf("%s get: %s", m.net, r)
			}
			mbps[i] = append(mbps[i], rate)
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
