package secrets

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Interceptor is the network stack's seam (internal/netstack), declared
// here until both halves meet, so that Proxy is checked against it.
type Interceptor interface {
	Intercepts(host string, port uint16) bool
	Serve(ctx context.Context, guest net.Conn, host string, dst netip.AddrPort,
		dial func(ctx context.Context) (net.Conn, error)) error
}

var _ Interceptor = (*Proxy)(nil)

const (
	apiHost   = "example.com" // the name httptest's certificate is for
	apiValue  = "sk-REAL-api-key-0123456789"
	otherHost = "other.example.org"
	otherVal  = "ghp_OTHER-value-9876543210"
)

// seen records what an upstream received.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func (s *seen) handler(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	s.body = append(s.body, string(b))
	s.mu.Unlock()
	io.WriteString(w, "ok")
}

func (s *seen) last(t *testing.T) (*http.Request, string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the upstream got no request")
	}
	return s.reqs[len(s.reqs)-1], s.body[len(s.body)-1]
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// env is a proxy for two secrets (one for apiHost, one for otherHost) in
// front of an upstream on 127.0.0.1, and a log that tests grep.
type env struct {
	proxy        *Proxy
	ca           *CA
	apiPH, othPH string
	upstream     *httptest.Server
	seen         *seen
	log          *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEnv(t testing.TB, tlsUpstream bool, roots func(*httptest.Server) *x509.CertPool) *env {
	return newEnvH2(t, tlsUpstream, false, roots)
}

func newEnvH2(t testing.TB, tlsUpstream, h2 bool, roots func(*httptest.Server) *x509.CertPool) *env {
	t.Helper()
	e := &env{seen: &seen{}, apiPH: NewPlaceholder(), othPH: NewPlaceholder(), log: &syncBuffer{}}
	e.upstream = httptest.NewUnstartedServer(http.HandlerFunc(e.seen.handler))
	e.upstream.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.upstream.EnableHTTP2 = h2
	if tlsUpstream {
		e.upstream.StartTLS()
	} else {
		e.upstream.Start()
	}
	t.Cleanup(e.upstream.Close)
	ca, err := NewCA("test", []string{apiHost, otherHost})
	if err != nil {
		t.Fatal(err)
	}
	e.ca = ca
	var pool *x509.CertPool
	if roots != nil {
		pool = roots(e.upstream)
	}
	e.proxy, err = New(Options{
		CA: ca,
		Secrets: []Secret{
			{Name: "API_KEY", Placeholder: e.apiPH, Value: apiValue, Hosts: []string{apiHost}},
			{Name: "OTHER", Placeholder: e.othPH, Value: otherVal, Hosts: []string{otherHost}},
		},
		RootCAs: pool,
		Logger:  slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// upstreamRoots trusts the upstream's own certificate.
func upstreamRoots(s *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	return pool
}

// client is the guest: its connections to host go through the proxy,
// which reaches the test upstream; it trusts the sandbox's CA.
func (e *env) client(t testing.TB, host string, port uint16) *http.Client {
	return e.clientH2(t, host, port, false)
}

// clientH2 is client, speaking HTTP/2 when h2.
func (e *env) clientH2(t testing.TB, host string, port uint16, h2 bool) *http.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Certificate())
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", e.upstream.Listener.Addr().String())
	}
	dialGuest := func(context.Context, string, string) (net.Conn, error) {
		guest, inner, err := tcpPair()
		if err != nil {
			return nil, err
		}
		dst := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), port)
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.proxy.Serve(ctx, inner, host, dst, dial)
		}()
		return guest, nil
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:       dialGuest,
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: h2,
		},
		Timeout: 30 * time.Second,
	}
}

// tcpPair returns the two ends of a TCP connection on 127.0.0.1.
func tcpPair() (net.Conn, net.Conn, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	s, err := l.Accept()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, s, nil
}

func TestSecretReplacedForItsHost(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	c := e.client(t, apiHost, 443)
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tc := range []struct {
		name        string
		build       func() *http.Request
		check       func(r *http.Request, body string) string // what the upstream got, where the value should be
		wantPresent bool
	}{
		{
			name: "bearer header",
			build: func() *http.Request {
				r, _ := http.NewRequest("GET", "https://"+apiHost+"/v1", nil)
				r.Header.Set("Authorization", "Bearer "+e.apiPH)
				return r
			},
			check:       func(r *http.Request, _ string) string { return r.Header.Get("Authorization") },
			wantPresent: true,
		},
		{
			name: "basic credentials",
			build: func() *http.Request {
				r, _ := http.NewRequest("GET", "https://"+apiHost+"/repo.git/info/refs", nil)
				r.Header.Set("Authorization", basic("x-access-token", e.apiPH))
				return r
			},
			check: func(r *http.Request, _ string) string {
				_, pass, _ := r.BasicAuth()
				return pass
			},
			wantPresent: true,
		},
		{
			name: "query",
			build: func() *http.Request {
				r, _ := http.NewRequest("GET", "https://"+apiHost+"/v1?key="+e.apiPH, nil)
				return r
			},
			check:       func(r *http.Request, _ string) string { return r.URL.Query().Get("key") },
			wantPresent: true,
		},
		{
			name: "small json body",
			build: func() *http.Request {
				r, _ := http.NewRequest("POST", "https://"+apiHost+"/v1", strings.NewReader(`{"token":"`+e.apiPH+`"}`))
				r.Header.Set("Content-Type", "application/json")
				return r
			},
			check:       func(_ *http.Request, body string) string { return body },
			wantPresent: true,
		},
		{
			name: "binary body left alone",
			build: func() *http.Request {
				r, _ := http.NewRequest("POST", "https://"+apiHost+"/v1", strings.NewReader(e.apiPH))
				r.Header.Set("Content-Type", "application/octet-stream")
				return r
			},
			check:       func(_ *http.Request, body string) string { return body },
			wantPresent: false,
		},
		{
			name: "another Host on the same connection",
			build: func() *http.Request {
				r, _ := http.NewRequest("GET", "https://"+apiHost+"/v1", nil)
				r.Host = "attacker.example.net"
				r.Header.Set("Authorization", "Bearer "+e.apiPH)
				return r
			},
			check:       func(r *http.Request, _ string) string { return r.Header.Get("Authorization") },
			wantPresent: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Do(tc.build())
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %s", resp.Status)
			}
			got := tc.check(e.seen.last(t))
			if tc.wantPresent {
				if !strings.Contains(got, apiValue) || strings.Contains(got, e.apiPH) {
					t.Errorf("upstream got %q, want the value in place of the placeholder", got)
				}
			} else if strings.Contains(got, apiValue) || !strings.Contains(got, e.apiPH) {
				t.Errorf("upstream got %q, want the placeholder untouched", got)
			}
		})
	}
	if strings.Contains(e.log.String(), apiValue) {
		t.Errorf("the log holds the value:\n%s", e.log)
	}
}

func TestOtherSecretStaysPlaceholder(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	c := e.client(t, apiHost, 443)
	r, _ := http.NewRequest("GET", "https://"+apiHost+"/", nil)
	r.Header.Set("X-Api", e.apiPH)
	r.Header.Set("X-Other", e.othPH)
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got, _ := e.seen.last(t)
	if got.Header.Get("X-Api") != apiValue {
		t.Errorf("X-Api = %q, want the API value", got.Header.Get("X-Api"))
	}
	if got.Header.Get("X-Other") != e.othPH {
		t.Errorf("X-Other = %q, want the other secret's placeholder, not its value", got.Header.Get("X-Other"))
	}
}

func TestIntercepts(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	for _, tc := range []struct {
		host string
		port uint16
		want bool
	}{
		{apiHost, 443, true},
		{"EXAMPLE.com.", 443, true},
		{apiHost, 80, true},
		{apiHost, 8443, false},
		{"sub." + apiHost, 443, false},
		{"unrelated.example.net", 443, false},
		{"", 443, false},
	} {
		if got := e.proxy.Intercepts(tc.host, tc.port); got != tc.want {
			t.Errorf("Intercepts(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestUpstreamBadCertificateRefused(t *testing.T) {
	// The proxy trusts the host's roots, not httptest's certificate.
	e := newEnv(t, true, func(*httptest.Server) *x509.CertPool { return x509.NewCertPool() })
	c := e.client(t, apiHost, 443)
	r, _ := http.NewRequest("GET", "https://"+apiHost+"/?key="+e.apiPH, nil)
	r.Header.Set("Authorization", "Bearer "+e.apiPH)
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(body), apiValue) || strings.Contains(e.log.String(), apiValue) {
		t.Errorf("the 502 or the log holds the value: %q\n%s", body, e.log)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %s, want 502", resp.Status)
	}
	if !strings.Contains(string(body), "certificate") {
		t.Errorf("body %q does not say the certificate was refused", body)
	}
	if n := e.seen.count(); n != 0 {
		t.Errorf("the upstream with a bad certificate got %d requests", n)
	}
}

func TestGuestServerNameMismatchRefused(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	guest, inner := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- e.proxy.Serve(context.Background(), inner, apiHost, netip.MustParseAddrPort("192.0.2.1:443"),
			func(context.Context) (net.Conn, error) { t.Error("dialed the upstream"); return nil, net.ErrClosed })
	}()
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Certificate())
	tc := tls.Client(guest, &tls.Config{ServerName: otherHost, RootCAs: pool})
	if err := tc.Handshake(); err == nil {
		t.Error("handshake for another server name succeeded")
	}
	tc.Close()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "server name") {
		t.Errorf("Serve: %v, want a refused server name", err)
	}
}

func TestHTTP2(t *testing.T) {
	e := newEnvH2(t, true, true, upstreamRoots)
	c := e.clientH2(t, apiHost, 443, true)
	for range 2 { // two streams on one connection
		r, _ := http.NewRequest("GET", "https://"+apiHost+"/", nil)
		r.Header.Set("Authorization", "Bearer "+e.apiPH)
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("the guest got %s, want HTTP/2", resp.Proto)
		}
		got, _ := e.seen.last(t)
		if got.ProtoMajor != 2 || got.Header.Get("Authorization") != "Bearer "+apiValue {
			t.Errorf("the upstream got %s with Authorization %q, want HTTP/2 and the value", got.Proto, got.Header.Get("Authorization"))
		}
	}
}

func TestPlainHTTP(t *testing.T) {
	e := newEnv(t, false, nil)
	c := e.client(t, apiHost, 80)
	r, _ := http.NewRequest("GET", "http://"+apiHost+"/", nil)
	r.Header.Set("Authorization", "Bearer "+e.apiPH)
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got, _ := e.seen.last(t); got.Header.Get("Authorization") != "Bearer "+apiValue {
		t.Errorf("Authorization = %q", got.Header.Get("Authorization"))
	}
}

func TestLargeBodyStreamsUnchanged(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	c := e.client(t, apiHost, 443)
	big := strings.Repeat("x", MaxBodyRewrite) + e.apiPH
	resp, err := c.Post("https://"+apiHost+"/upload", "text/plain", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, body := e.seen.last(t); body != big {
		t.Errorf("a body over MaxBodyRewrite changed (%d bytes, want %d)", len(body), len(big))
	}
}

func TestEchoedValueRedacted(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	e.upstream.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"error":"bad key %s"}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	})
	c := e.client(t, apiHost, 443)
	r, _ := http.NewRequest("GET", "https://"+apiHost+"/", nil)
	r.Header.Set("Authorization", "Bearer "+e.apiPH)
	resp, err := c.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := resp.Header.Get("X-Echo"); got != "Bearer "+e.apiPH {
		t.Errorf("echoed header %q, want the placeholder", got)
	}
	if want := `{"error":"bad key ` + e.apiPH + `"}`; string(body) != want || resp.ContentLength != int64(len(want)) {
		t.Errorf("echoed body %q (length %d), want %q", body, resp.ContentLength, want)
	}
}

func TestRedact(t *testing.T) {
	e := newEnv(t, true, upstreamRoots)
	err := fmt.Errorf("Get \"https://%s/v1?key=%s\": EOF", apiHost, apiValue)
	if got := e.proxy.redact(err.Error()); strings.Contains(got, apiValue) || !strings.Contains(got, e.apiPH) {
		t.Errorf("redact: %q", got)
	}
}

func TestCAConstrainedToHosts(t *testing.T) {
	ca, err := NewCA("t", []string{"api.example.com", "*.corp.example"})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"api.example.com", true},
		{"x.corp.example", true},
		{"www.example.com", false},
		{"bank.example", false},
	} {
		leaf, err := ca.leaf(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: tc.name, Roots: pool})
		if (err == nil) != tc.ok {
			t.Errorf("verify a leaf for %s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestCASaveLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("t", []string{apiHost})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CertPEM(), ca.CertPEM()) {
		t.Error("loaded another certificate")
	}
	// A key that is not the certificate's is refused.
	other, _ := NewCA("o", []string{apiHost})
	odir := t.TempDir()
	other.Save(odir)
	os.Rename(filepath.Join(odir, CAKeyFile), filepath.Join(dir, CAKeyFile))
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("LoadCA with another key: %v", err)
	}
}
