package hostapi

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// rogueAgent plays a guest that put its own program in the agent's place
// (the guest is root in its VM): it says hello, then hands each request
// the client sends to serve, in a goroutine of its own. What serve sends on
// a data channel stays within the credit the client grants, so that it is
// the client's bounds, not flow control, that must stop it.
type rogueAgent struct {
	// hello is the body of the hello reply; nil means a plain version 1
	// reply.
	hello []byte
	serve func(*rogueStream)
	// sent counts the data bytes sent, on every stream.
	sent atomic.Int64
}

// startRogue serves a on a unix socket and returns a client of it.
func startRogue(t *testing.T, a *rogueAgent, opts ...ClientOption) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "kbr") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "a.sock"))
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		conns.Wait()
	})
	conns.Go(func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() { a.serveConn(nc) })
		}
	})
	c := NewUnixClient(filepath.Join(dir, "a.sock"), opts...)
	t.Cleanup(func() { c.Close() })
	return c
}

// rogueConn is one connection to the rogue agent.
type rogueConn struct {
	a   *rogueAgent
	nc  net.Conn
	wmu sync.Mutex

	mu       sync.Mutex
	changed  *sync.Cond
	window   int64
	credit   map[rogueChannel]*int64
	canceled map[uint32]bool
	closed   bool
}

type rogueChannel struct {
	stream uint32
	ch     protocol.Channel
}

func (a *rogueAgent) serveConn(nc net.Conn) {
	c := &rogueConn{a: a, nc: nc, credit: map[rogueChannel]*int64{}, canceled: map[uint32]bool{}}
	c.changed = sync.NewCond(&c.mu)
	var streams sync.WaitGroup
	defer func() {
		nc.Close()
		c.mu.Lock()
		c.closed = true
		c.changed.Broadcast()
		c.mu.Unlock()
		streams.Wait()
	}()
	f, err := protocol.ReadFrame(nc)
	if err != nil {
		return
	}
	var hello protocol.Hello
	if protocol.Decode(f.Body, &hello) != nil {
		return
	}
	c.window = int64(hello.Window)
	if c.window == 0 {
		c.window = protocol.DefaultWindow
	}
	body := a.hello
	if body == nil {
		body = protocol.Encode(&protocol.HelloReply{Version: 1, MinVersion: 1, MaxVersion: 1, AgentVersion: "rogue"})
	}
	if c.write(protocol.Header{Type: protocol.TypeHelloReply}, body) != nil {
		return
	}
	for {
		f, err := protocol.ReadFrame(nc)
		if err != nil {
			return
		}
		c.mu.Lock()
		switch {
		case f.Type == protocol.TypeCredit:
			n, _ := protocol.DecodeCredit(f.Body)
			*c.creditOf(rogueChannel{f.Stream, f.Channel}) += int64(n)
		case f.Type == protocol.TypeCancel:
			c.canceled[f.Stream] = true
		case f.Type.IsRequest() && a.serve != nil:
			streams.Go(func() { a.serve(&rogueStream{c: c, req: f}) })
		}
		c.changed.Broadcast()
		c.mu.Unlock()
	}
}

// creditOf is the credit left on a channel, the window until the client
// granted more; c.mu is held.
func (c *rogueConn) creditOf(ch rogueChannel) *int64 {
	p, ok := c.credit[ch]
	if !ok {
		p = new(c.window)
		c.credit[ch] = p
	}
	return p
}

func (c *rogueConn) write(h protocol.Header, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.nc.Write(protocol.AppendFrame(nil, h, body))
	return err
}

// rogueStream is one request to the rogue agent.
type rogueStream struct {
	c   *rogueConn
	req protocol.Frame
}

// errRogueStopped is returned to serve once the client cancelled the
// stream or closed the connection.
var errRogueStopped = errors.New("the client cancelled the stream or hung up")

// reply sends a control frame on the stream.
func (s *rogueStream) reply(t protocol.Type, flags protocol.Flags, body []byte) error {
	return s.c.write(protocol.Header{Stream: s.req.Stream, Type: t, Flags: flags}, body)
}

// eof ends the stream with EOF on ch, as the agent ends a listing or a
// file.
func (s *rogueStream) eof(ch protocol.Channel) error {
	return s.c.write(protocol.Header{Stream: s.req.Stream, Type: protocol.TypeEOF, Flags: protocol.FlagEnd, Channel: ch}, nil)
}

// data sends p on channel ch in frames of at most chunk bytes, within the
// credit the client granted, as many in one write as the credit allows.
func (s *rogueStream) data(ch protocol.Channel, p []byte, chunk int) error {
	key := rogueChannel{s.req.Stream, ch}
	for len(p) > 0 {
		s.c.mu.Lock()
		for *s.c.creditOf(key) == 0 {
			if s.c.closed || s.c.canceled[s.req.Stream] {
				s.c.mu.Unlock()
				return errRogueStopped
			}
			s.c.changed.Wait()
		}
		stopped := s.c.closed || s.c.canceled[s.req.Stream]
		take := min(*s.c.creditOf(key), int64(len(p)), protocol.MaxChunk)
		*s.c.creditOf(key) -= take
		s.c.mu.Unlock()
		if stopped {
			return errRogueStopped
		}
		var buf []byte
		for q := p[:take]; len(q) > 0; {
			n := min(len(q), chunk)
			buf = protocol.AppendFrame(buf, protocol.Header{Stream: s.req.Stream, Type: protocol.TypeData, Channel: ch}, q[:n])
			q = q[n:]
		}
		s.c.wmu.Lock()
		_, err := s.c.nc.Write(buf)
		s.c.wmu.Unlock()
		if err != nil {
			return errRogueStopped
		}
		s.c.a.sent.Add(take)
		p = p[take:]
	}
	return nil
}

// flood sends the repetitions of p on ch, in frames of at most chunk
// bytes, until the client stops the stream or max bytes were sent.
func (s *rogueStream) flood(ch protocol.Channel, p []byte, chunk int, max int64) error {
	for sent := int64(0); sent < max; sent += int64(len(p)) {
		if err := s.data(ch, p, chunk); err != nil {
			return err
		}
	}
	return nil
}

// waitStopped waits until the client cancelled the stream or hung up.
func (s *rogueStream) waitStopped() {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for !s.c.closed && !s.c.canceled[s.req.Stream] {
		s.c.changed.Wait()
	}
}

// heapPeak runs f and returns how far the Go heap rose above where it was
// before, sampled every few milliseconds while f runs and once after.
func heapPeak(f func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
			peak.Store(ms.HeapAlloc - base)
		}
	}
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	})
	f()
	close(done)
	sampler.Wait()
	sample()
	return peak.Load()
}
