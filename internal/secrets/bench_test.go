package secrets

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// downloadSize is the size of the benchmarks' download.
const downloadSize = 256 << 20

// BenchmarkDownload256MiB downloads 256 MiB over HTTPS from a server on
// 127.0.0.1: directly, and through the interception (TLS terminated with
// the sandbox's CA, the upstream verified, a secret put in the request's
// header). The ratio of their MB/s is what the interception costs.
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
	for _, bc := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"direct", direct, "https://" + e.upstream.Listener.Addr().String() + "/"},
		{"intercepted", e.client(b, apiHost, 443), "https://" + apiHost + "/"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(downloadSize)
			for b.Loop() {
				req, _ := http.NewRequest("GET", bc.url, nil)
				req.Header.Set("Authorization", "Bearer "+e.apiPH)
				resp, err := bc.client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != downloadSize {
					b.Fatal(fmt.Errorf("read %d bytes: %v", n, err))
				}
			}
		})
	}
}
