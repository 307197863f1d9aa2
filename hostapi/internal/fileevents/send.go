package fileevents

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

const (
	// helloTimeout bounds the agent's answer to the hello.
	helloTimeout = 10 * time.Second
	// maxRequestPathBytes bounds the path bytes of one request, so that
	// its JSON (at most 6 bytes per path byte, escaped) fits in a frame.
	maxRequestPathBytes = (protocol.MaxBody - 64<<10) / 6
	// maxDialWait is the longest pause between two attempts to reach an
	// agent that is not up yet.
	maxDialWait = time.Second
)

// Sender delivers batches to the guest agent on a connection of its own,
// one request at a time.
type Sender struct {
	nc     net.Conn
	br     *bufio.Reader
	next   uint32
	status *protocol.FileEventsStatus
	log    *slog.Logger
	warned bool
}

// Dial connects to the agent at the unix socket path and says hello.
func Dial(ctx context.Context, path string, log *slog.Logger) (*Sender, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	s := &Sender{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), log: log}
	if err := s.hello(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *Sender) hello(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Now()) })
	defer stop()
	s.nc.SetDeadline(time.Now().Add(helloTimeout))
	defer s.nc.SetDeadline(time.Time{})
	hello := protocol.Hello{MinVersion: protocol.MinVersion, MaxVersion: protocol.Version, Client: "krunbox runner (file events)"}
	if _, err := s.nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHello}, protocol.Encode(&hello))); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	f, err := protocol.ReadFrame(s.br)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	if f.Type != protocol.TypeHelloReply || f.Stream != 0 {
		return fmt.Errorf("hello: got %s on stream %d", f.Type, f.Stream)
	}
	var r protocol.HelloReply
	if err := protocol.Decode(f.Body, &r); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	s.status = r.FileEvents
	if r.Version < protocol.TypeFileEvents.Since() && s.status != nil {
		s.status = &protocol.FileEventsStatus{Reason: fmt.Sprintf("the agent speaks protocol version %d", r.Version)}
	}
	return nil
}

// Status is the agent's report of file events; nil for an agent that
// predates them.
func (s *Sender) Status() *protocol.FileEventsStatus { return s.status }

// Close closes the connection.
func (s *Sender) Close() error { return s.nc.Close() }

// Send delivers events, in requests of at most protocol.MaxFileEvents
// events. A request the agent refuses is logged (once) and skipped; a
// broken connection is an error.
func (s *Sender) Send(ctx context.Context, events []protocol.FileEvent) error {
	stop := context.AfterFunc(ctx, func() { s.nc.SetDeadline(time.Now()) })
	defer stop()
	for len(events) > 0 {
		n, size := 0, 0
		for n < len(events) && n < protocol.MaxFileEvents {
			size += len(events[n].Path) + len(events[n].OldPath)
			if n > 0 && size > maxRequestPathBytes {
				break
			}
			n++
		}
		if err := s.request(events[:n]); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		events = events[n:]
	}
	return nil
}

// request sends one request and waits for its answer.
func (s *Sender) request(events []protocol.FileEvent) error {
	s.next++
	id := s.next
	body := protocol.Encode(&protocol.FileEventsRequest{Events: events})
	if _, err := s.nc.Write(protocol.AppendFrame(nil, protocol.Header{Stream: id, Type: protocol.TypeFileEvents}, body)); err != nil {
		return err
	}
	for {
		f, err := protocol.ReadFrame(s.br)
		if err != nil {
			return err
		}
		switch {
		case f.Stream == 0 && f.Type == protocol.TypeError:
			return fmt.Errorf("the agent closed the connection: %s", f.Body)
		case f.Stream != id || f.Flags&protocol.FlagEnd == 0:
			continue
		case f.Type == protocol.TypeReply:
			var r protocol.FileEventsResult
			if err := protocol.Decode(f.Body, &r); err == nil {
				s.log.Debug("file events delivered", "delivered", r.Delivered, "gone", r.Gone, "filtered", r.Filtered, "failed", r.Failed)
			}
			return nil
		default:
			var e protocol.Error
			protocol.Decode(f.Body, &e)
			if !s.warned {
				s.warned = true
				s.log.Warn("file events: the agent refused a batch", "code", e.Code, "err", e.Message)
			}
			return nil
		}
	}
}

// Serve watches shares and delivers their changes to the agent at the
// unix socket path until ctx ends or the agent goes. It waits for the
// agent to come up, and runs no watcher at all when the agent says the
// guest cannot take the events (its kernel lacks the interface).
func Serve(ctx context.Context, path string, shares []Share, lim Limits, log *slog.Logger) error {
	s, err := dialWait(ctx, path, log)
	if err != nil {
		return err
	}
	defer s.Close()
	st := s.Status()
	if st == nil || !st.Delivered {
		log.Info("file events: " + st.String())
		return nil
	}
	w, err := New(shares, lim, log)
	if err != nil {
		return err
	}
	log.Info("file events: "+st.String(), "watching", w.Dirs())
	return w.Run(ctx, s.Send)
}

// dialWait connects to the agent, trying again until it is up or ctx ends.
func dialWait(ctx context.Context, path string, log *slog.Logger) (*Sender, error) {
	wait := 20 * time.Millisecond
	for {
		s, err := Dial(ctx, path, log)
		if err == nil {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("file events: connect to the agent: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, maxDialWait)
	}
}
