package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one message a client sends, on stdio or in an
// HTTP request's body (64 MiB, as krunbox serve's lines): enough for a
// write of Limits.WriteBytes however its JSON escapes it.
const MaxMessageBytes = 64 << 20

// ServeStdio serves one client on in and out until in ends or ctx is done,
// then closes the session: commands still running are killed.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	defer s.Close()
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopCloser{out}, MaxLineLength: MaxMessageBytes}
	err := s.mcp.Run(ctx, t)
	if err != nil && (ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil
	}
	return err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// ServeHTTP serves clients over Streamable HTTP on ln (a loopback address
// or a unix socket) until ctx is done, then closes the session. Requests
// whose Host is not a loopback name are refused (DNS rebinding), and so
// are cross-origin browser requests.
func (s *Server) ServeHTTP(ctx context.Context, ln net.Listener) error {
	defer s.Close()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger:              s.log,
		MaxRequestBodyBytes: MaxMessageBytes,
		// A client that drops its request kills the command it ran.
		PropagateRequestCancellation: true,
	})
	srv := &http.Server{Handler: http.NewCrossOriginProtection().Handler(h), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shut)
	return nil
}
