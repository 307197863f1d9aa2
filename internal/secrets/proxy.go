package secrets

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxBodyRewrite is the largest request body in which placeholders are
// replaced; a larger one, or one of unknown length, streams through as it
// is.
const MaxBodyRewrite = 1 << 20

// Timeouts of an intercepted connection.
const (
	handshakeTimeout  = 30 * time.Second
	readHeaderTimeout = time.Minute
	idleTimeout       = 5 * time.Minute
)

// Secret is a secret with its value, as the interception uses it.
type Secret struct {
	// Name is the guest environment variable, for logs.
	Name string
	// Placeholder is what the guest sees and sends.
	Placeholder string
	// Value replaces Placeholder in requests to Hosts.
	Value string
	// Hosts are host patterns (see Spec.Hosts).
	Hosts []string
}

// Options configure a Proxy.
type Options struct {
	// CA issues the certificates presented to the guest.
	CA *CA
	// Secrets are the secrets to put in place.
	Secrets []Secret
	// RootCAs verify the upstreams' certificates; nil means the host's
	// roots.
	RootCAs *x509.CertPool
	// HTTPPorts are the ports of plain HTTP (default 80) and HTTPSPorts
	// those of HTTPS (default 443) on which the secrets' hosts are
	// intercepted.
	HTTPPorts, HTTPSPorts []uint16
	// Logger receives what the proxy does, never a secret's value; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Proxy intercepts a sandbox's HTTP and HTTPS connections to its secrets'
// hosts and replaces the placeholders in their requests. It implements
// the network stack's Interceptor.
type Proxy struct {
	ca         *CA
	secrets    []Secret
	roots      *x509.CertPool
	httpPorts  []uint16
	httpsPorts []uint16
	log        *slog.Logger
}

// New returns a proxy for opts.
func New(opts Options) (*Proxy, error) {
	if opts.CA == nil {
		return nil, errors.New("secrets proxy: no CA")
	}
	p := &Proxy{
		ca:         opts.CA,
		secrets:    slices.Clone(opts.Secrets),
		roots:      opts.RootCAs,
		httpPorts:  cmpSlice(opts.HTTPPorts, []uint16{80}),
		httpsPorts: cmpSlice(opts.HTTPSPorts, []uint16{443}),
		log:        opts.Logger,
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	for _, s := range p.secrets {
		if !ValidPlaceholder(s.Placeholder) || s.Value == "" || len(s.Hosts) == 0 {
			return nil, fmt.Errorf("secrets proxy: secret %s: needs a placeholder, a value and hosts", s.Name)
		}
	}
	return p, nil
}

// Placed is a secret as a sandbox keeps it: its spec and the placeholder
// the guest sees, made once at create.
type Placed struct {
	Spec
	Placeholder string `json:"placeholder"`
}

// Load makes the proxy of a sandbox at start: it loads the CA saved in dir
// and reads each secret's value from its source (Spec.Read).
func Load(dir string, placed []Placed, log *slog.Logger) (*Proxy, error) {
	ca, err := LoadCA(dir)
	if err != nil {
		return nil, err
	}
	var secs []Secret
	for _, pl := range placed {
		v, err := pl.Read()
		if err != nil {
			return nil, err
		}
		secs = append(secs, Secret{Name: pl.Name, Placeholder: pl.Placeholder, Value: v, Hosts: pl.Hosts})
	}
	return New(Options{CA: ca, Secrets: secs, Logger: log})
}

// Intercepts reports whether connections to host:port are handed to
// Serve: those to a secret's host on an HTTP or HTTPS port.
func (p *Proxy) Intercepts(host string, port uint16) bool {
	if host == "" || !slices.Contains(p.httpPorts, port) && !slices.Contains(p.httpsPorts, port) {
		return false
	}
	return len(p.secretsFor(host)) > 0
}

// secretsFor returns the secrets that may be sent to host.
func (p *Proxy) secretsFor(host string) []Secret {
	var out []Secret
	for _, s := range p.secrets {
		if slices.ContainsFunc(s.Hosts, func(pat string) bool { return matchHost(pat, host) }) {
			out = append(out, s)
		}
	}
	return out
}

// Serve handles guest, a connection the guest opened to host at dst: on
// an HTTPS port it terminates TLS with a certificate for host from the
// sandbox's CA (a guest asking for another server name is refused), and
// then proxies each HTTP/1.1 request to the upstream that dial reaches
// (over TLS verified against the roots for host), with the placeholders
// of host's secrets replaced in requests whose Host is host. It returns
// when the guest's connection ends or ctx is done, and closes guest.
func (p *Proxy) Serve(ctx context.Context, guest net.Conn, host string, dst netip.AddrPort,
	dial func(ctx context.Context) (net.Conn, error)) error {
	defer guest.Close()
	host = normalizeHost(host)
	if host == "" || len(p.secretsFor(host)) == 0 {
		return fmt.Errorf("intercept %s: no secret is for this host", dst)
	}
	scheme, conn, h2 := "http", guest, false
	if slices.Contains(p.httpsPorts, dst.Port()) {
		scheme = "https"
		tc := tls.Server(guest, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if sni := normalizeHost(hi.ServerName); sni != "" && sni != host {
					return nil, fmt.Errorf("the guest asks for server name %q on a connection to %s", hi.ServerName, host)
				}
				return p.ca.leaf(host)
			},
		})
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			p.log.Warn("secrets: TLS handshake with the guest failed", "host", host, "dst", dst, "err", err)
			return fmt.Errorf("intercept %s: TLS handshake with the guest: %w", host, err)
		}
		conn = tc
		h2 = tc.ConnectionState().NegotiatedProtocol == "h2"
	}
	// The upstream is offered the protocol the guest chose: HTTP/2 for a
	// guest that speaks it (gRPC needs it end to end), else HTTP/1.1.
	upProtos := []string{"http/1.1"}
	if h2 {
		upProtos = []string{"h2", "http/1.1"}
	}

	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := dial(ctx)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: p.roots, MinVersion: tls.VersionTLS12, NextProtos: upProtos})
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, fmt.Errorf("upstream %s: %w", host, err)
			}
			return tc, nil
		},
		ForceAttemptHTTP2:   h2,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     idleTimeout,
		ReadBufferSize:      64 << 10,
		WriteBufferSize:     64 << 10,
	}
	defer tr.CloseIdleConnections()
	upstream := net.JoinHostPort(host, strconv.Itoa(int(dst.Port())))
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = upstream
			pr.Out.Host = pr.In.Host
			p.substitute(pr.Out, host)
		},
		ModifyResponse: p.redactResponse,
		Transport:      tr,
		FlushInterval:  -1,
		BufferPool:     bufferPool{},
		ErrorLog:       errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The error may quote the request (its URL, with a value put
			// in its query): the guest and the log get it redacted.
			msg := p.redact(err.Error())
			p.log.Warn("secrets: request to the upstream failed", "host", host, "dst", dst, "err", msg)
			http.Error(w, fmt.Sprintf("krunbox: %s: %s", host, msg), http.StatusBadGateway)
		},
	}
	// The server sees the decrypted stream as a plain connection: HTTP/2
	// is recognised by its preface (ALPN was settled in the handshake).
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           rp,
		Protocols:         &protos,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          errLog,
	}
	l := newConnListener(conn)
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(l)
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return ctx.Err()
	}
	return err
}

// substitute replaces, in r to host, the placeholders of host's secrets:
// in every header (Basic credentials decoded), in the URL's query, and in
// a small textual body, whose length it then fixes. A request whose Host
// is another name is left as it is.
func (p *Proxy) substitute(r *http.Request, host string) {
	if h := hostOnly(r.Host); h != "" && normalizeHost(h) != host {
		return
	}
	secs := p.secretsFor(host)
	pairs := make([]string, 0, 2*len(secs))
	for _, s := range secs {
		pairs = append(pairs, s.Placeholder, s.Value)
	}
	rep := strings.NewReplacer(pairs...)
	has := func(s string) bool { return strings.Contains(s, PlaceholderPrefix) }
	for k, vs := range r.Header {
		for i, v := range vs {
			if user, pass, ok := basicAuth(k, v); ok && (has(user) || has(pass)) {
				vs[i] = "Basic " + base64.StdEncoding.EncodeToString([]byte(rep.Replace(user)+":"+rep.Replace(pass)))
			} else if has(v) {
				vs[i] = rep.Replace(v)
			}
		}
	}
	if has(r.URL.RawQuery) {
		r.URL.RawQuery = rep.Replace(r.URL.RawQuery)
	}
	if r.Body == nil || r.ContentLength <= 0 || r.ContentLength > MaxBodyRewrite ||
		r.Header.Get("Content-Encoding") != "" || !textual(r.Header.Get("Content-Type")) {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength+1))
	r.Body.Close()
	if err != nil {
		r.Body = io.NopCloser(errReader{err})
		return
	}
	if has(string(body)) {
		body = []byte(rep.Replace(string(body)))
	}
	r.ContentLength = int64(len(body))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

// redactResponse puts the placeholders back in a response that quotes a
// value (an API that echoes the request, or names the key in an error):
// in its headers, and in its body when that is textual, uncompressed and
// of known length up to MaxBodyRewrite. Other bodies stream as they are.
func (p *Proxy) redactResponse(resp *http.Response) error {
	for _, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = p.redact(v)
		}
	}
	if resp.Body == nil || resp.ContentLength <= 0 || resp.ContentLength > MaxBodyRewrite ||
		resp.Header.Get("Content-Encoding") != "" || !textual(resp.Header.Get("Content-Type")) {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, resp.ContentLength+1))
	resp.Body.Close()
	if err != nil {
		return err
	}
	body = []byte(p.redact(string(body)))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return nil
}

// redact replaces every secret's value in s with its placeholder.
func (p *Proxy) redact(s string) string {
	for _, sec := range p.secrets {
		s = strings.ReplaceAll(s, sec.Value, sec.Placeholder)
	}
	return s
}

// basicAuth decodes Basic credentials in an Authorization or
// Proxy-Authorization header.
func basicAuth(key, v string) (user, pass string, ok bool) {
	if key != "Authorization" && key != "Proxy-Authorization" {
		return "", "", false
	}
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(dec), ":")
}

// textual reports whether a body of this Content-Type is text, in which
// placeholders are replaced.
func textual(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	if strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+json") || strings.HasSuffix(mt, "+xml") {
		return true
	}
	switch mt {
	case "application/json", "application/x-www-form-urlencoded", "application/xml",
		"application/x-ndjson", "application/graphql", "application/javascript":
		return true
	}
	return false
}

// hostOnly strips a port from a Host header.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

// copyBufferSize is the size of the buffers through which bodies stream:
// larger than ReverseProxy's 32 KiB, fewer TLS records and system calls.
const copyBufferSize = 256 << 10

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// bufferPool lends ReverseProxy its copy buffers.
type bufferPool struct{}

func (bufferPool) Get() []byte  { return *copyBuffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// connListener hands out one connection, then blocks until that connection
// is closed (by the server, or by a handler that hijacked it) or the
// listener is, and then fails: http.Server.Serve over it serves exactly
// that connection and returns when it is over.
type connListener struct {
	conn      chan net.Conn
	connDone  chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	addr      net.Addr
}

func newConnListener(c net.Conn) *connListener {
	l := &connListener{conn: make(chan net.Conn, 1), connDone: make(chan struct{}), done: make(chan struct{}), addr: c.LocalAddr()}
	l.conn <- &trackedConn{Conn: c, closed: l.connDone}
	return l
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conn:
		return c, nil
	default:
	}
	select {
	case <-l.connDone:
	case <-l.done:
	}
	return nil, net.ErrClosed
}

func (l *connListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }

// trackedConn closes its channel when it is closed.
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

func cmpSlice[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}
