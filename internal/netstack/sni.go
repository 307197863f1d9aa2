package netstack

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// maxHello bounds what is read from the guest while looking for its TLS
// ClientHello, and helloTimeout how long it may take.
const (
	maxHello     = 64 << 10
	helloTimeout = 10 * time.Second
)

var errHelloSeen = errors.New("client hello seen")

// peekSNI reads the TLS ClientHello the guest sends first on conn and
// returns its server name, and a conn that replays what was read (also when
// there is no ClientHello).
func peekSNI(conn net.Conn) (string, net.Conn, error) {
	var seen bytes.Buffer
	conn.SetReadDeadline(time.Now().Add(helloTimeout))
	rec := &recordingConn{Conn: conn, r: io.TeeReader(io.LimitReader(conn, maxHello), &seen)}
	var sni string
	err := tls.Server(rec, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni = h.ServerName
			return nil, errHelloSeen
		},
	}).Handshake()
	conn.SetReadDeadline(time.Time{})
	replay := &replayConn{Conn: conn, r: io.MultiReader(&seen, conn)}
	if !errors.Is(err, errHelloSeen) {
		return "", replay, errors.New("no TLS ClientHello on port 443")
	}
	return sni, replay, nil
}

// recordingConn reads through r and writes nothing (the TLS server's
// alert must not reach the guest).
type recordingConn struct {
	net.Conn
	r io.Reader
}

func (c *recordingConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// replayConn reads through r: what was peeked, then the connection.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite passes a half-close on.
func (c *replayConn) CloseWrite() error { return closeWrite(c.Conn) }
