package secrets

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// downloadSize is the size of the benchmarks' download.
const downloadSize = 256 << 20

// BenchmarkDownload256MiB downloads 256 MiB over HTTPS from a server on
// 127.0.0.1 in each iteration twice, alternating: directly, and through
// the interception (TLS terminated with the sandbox's CA, the upstream's
// certificate verified, a secret put in the request's header). It reports
// the median throughput of each and their ratio, so that the noise of a
// shared machine falls on both alike.
func BenchmarkDownload256MiB(b *testing.B) {
	e := newEnv(b, true, upstreamRoots)
	e.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(downloadSize))
		buf := make([]byte, 64<<10)
		for n := 0; n < downloadSize; n += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})
	direct := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: upstreamRoots(e.upstream), ServerName: apiHost},
	}}
	intercepted := e.client(b, apiHost, 443)
	get := func(c *http.Client, url string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer "+e.apiPH)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != downloadSize {
			b.Fatal(fmt.Errorf("read %d bytes: %v", n, err))
		}
		return time.Since(start)
	}
	var ds, is []time.Duration
	for b.Loop() {
		ds = append(ds, get(direct, "https://"+e.upstream.Listener.Addr().String()+"/"))
		is = append(is, get(intercepted, "https://"+apiHost+"/"))
	}
	mbps := func(d time.Duration) float64 { return float64(downloadSize) / 1e6 / d.Seconds() }
	d, i := median(ds), median(is)
	b.ReportMetric(mbps(d), "direct-MB/s")
	b.ReportMetric(mbps(i), "intercepted-MB/s")
	b.ReportMetric(mbps(i)/mbps(d), "ratio")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
