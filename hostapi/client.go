package hostapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// DialFunc connects to a guest agent: to the unix socket libkrun maps the
// agent's vsock port to, or to anything else that carries the protocol.
type DialFunc func(ctx context.Context) (net.Conn, error)

// AgentInfo is what the agent said when the connection opened: the
// protocol version chosen, the agent's version, its boot timings and the
// outcome of its mounts.
type AgentInfo = protocol.HelloReply

// Health is the guest's state, as Client.Health reports it.
type Health = protocol.Health

// Client talks to one guest agent. It multiplexes every call on one
// connection, dialled on first use and again after it breaks, so it is
// cheap to share between goroutines. Every call takes a context; cancelling
// it cancels the operation in the guest (an exec's process group is
// killed, a partial write is discarded).
type Client struct {
	dial DialFunc
	opts clientOptions

	mu     sync.Mutex
	sess   *session
	closed bool
}

// ClientOption configures a Client.
type ClientOption func(*clientOptions)

type clientOptions struct {
	log         *slog.Logger
	name        string
	window      uint32
	helloWithin time.Duration
	limits      AgentLimits
}

// WithClientLogger sends the client's log to l.
func WithClientLogger(l *slog.Logger) ClientOption { return func(o *clientOptions) { o.log = l } }

// WithClientName names the program in the agent's log.
func WithClientName(name string) ClientOption { return func(o *clientOptions) { o.name = name } }

// WithClientWindow sets how many bytes of each output stream (stdout, stderr, a
// file being read) the client buffers before the guest must wait for it to
// be read. The default is protocol.DefaultWindow (1 MiB).
func WithClientWindow(bytes int) ClientOption {
	return func(o *clientOptions) { o.window = uint32(max(min(bytes, protocol.MaxWindow), protocol.MaxChunk)) }
}

// NewClient returns a client that connects with dial when it first needs to.
func NewClient(dial DialFunc, opts ...ClientOption) *Client {
	o := clientOptions{
		log:         slog.New(slog.DiscardHandler),
		name:        "krunbox-hostapi",
		window:      protocol.DefaultWindow,
		helloWithin: 10 * time.Second,
		limits:      defaultAgentLimits(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return &Client{dial: dial, opts: o}
}

// NewUnixClient returns a client of the agent at the unix socket path.
func NewUnixClient(path string, opts ...ClientOption) *Client {
	return NewClient(UnixDialer(path), opts...)
}

// ErrClientClosed is returned by calls on a closed Client.
var ErrClientClosed = errors.New("krunbox agent client closed")

// Close closes the connection; calls in progress fail, and processes they
// started are killed by the agent.
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.sess
	c.closed, c.sess = true, nil
	c.mu.Unlock()
	if s != nil {
		s.fail(ErrClientClosed)
	}
	return nil
}

// session returns the live connection, dialling one if needed.
func (c *Client) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClientClosed
	}
	if c.sess != nil && c.sess.alive() {
		return c.sess, nil
	}
	s, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.sess = s
	return s, nil
}

// Info returns what the agent said in its hello on the current connection.
func (c *Client) Info(ctx context.Context) (*AgentInfo, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, err
	}
	info := s.hello
	return &info, nil
}

// Ping makes a round trip to the agent and returns how long it took.
// Pings do not count as activity for the agent's idle timeout.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	s, err := c.session(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.call(ctx, protocol.TypePing, nil, nil); err != nil {
		return 0, fmt.Errorf("ping: %w", err)
	}
	return time.Since(start), nil
}

// Health reports the guest's uptime, boot timings, load, memory and disk.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.call(ctx, protocol.TypeHealth, nil, &h); err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	return &h, nil
}

// Shutdown asks the agent to stop the VM: it sends SIGTERM to every process
// group, SIGKILL to what is left after grace (0 means 5 s), syncs, and
// exits, which stops the VM. It returns once the agent has done all that.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) error {
	err := c.call(ctx, protocol.TypeShutdown, &protocol.ShutdownRequest{Grace: grace}, nil)
	if errors.Is(err, ErrConnectionLost) {
		err = nil // it went away while doing what was asked
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	c.mu.Lock()
	s := c.sess
	c.sess = nil
	c.mu.Unlock()
	if s != nil {
		s.fail(ErrConnectionLost)
	}
	return nil
}

// call makes a request with a single JSON answer, decoded into reply.
func (c *Client) call(ctx context.Context, t protocol.Type, req, reply any) error {
	s, err := c.session(ctx)
	if err != nil {
		return err
	}
	return s.call(ctx, t, req, reply)
}

// ErrConnectionLost is returned by calls whose connection to the agent
// broke: the agent exited (the VM stopped) or the connection was closed.
var ErrConnectionLost = errors.New("connection to the krunbox agent lost")

// ProtocolError is a broken protocol rule, by either side; the connection
// is closed.
type ProtocolError struct {
	// Remote is set when the agent reported the error.
	Remote bool
	Msg    string
}

func (e *ProtocolError) Error() string {
	if e.Remote {
		return "krunbox agent closed the connection: protocol error: " + e.Msg
	}
	return "krunbox agent protocol error: " + e.Msg
}

// VersionError says the client and the agent share no protocol version.
type VersionError struct {
	ClientMin, ClientMax int
	AgentMin, AgentMax   int
	AgentVersion         string
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("krunbox agent %s speaks protocol versions %d to %d, this client speaks %d to %d: "+
		"recreate the sandbox with this krunbox, or use the krunbox release that made it",
		e.AgentVersion, e.AgentMin, e.AgentMax, e.ClientMin, e.ClientMax)
}

// session is one connection to the agent.
type session struct {
	log    *slog.Logger
	nc     net.Conn
	hello  protocol.HelloReply
	window uint32 // the client's grant per agent→client channel

	wmu sync.Mutex

	mu      sync.Mutex
	streams map[uint32]*stream
	nextID  uint32
	err     error
	done    chan struct{}
}

// connect dials and says hello.
func (c *Client) connect(ctx context.Context) (*session, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to krunbox agent: %w", err)
	}
	deadline := time.Now().Add(c.opts.helloWithin)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	nc.SetDeadline(deadline)
	hello := protocol.Hello{MinVersion: protocol.MinVersion, MaxVersion: protocol.Version, Client: c.opts.name, Window: c.opts.window}
	br := bufio.NewReaderSize(nc, 64<<10)
	reply, err := func() (*protocol.HelloReply, error) {
		if _, err := nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHello}, protocol.Encode(&hello))); err != nil {
			return nil, err
		}
		f, err := protocol.ReadFrame(br)
		if err != nil {
			return nil, err
		}
		if err := checkControlBody(f); err != nil {
			return nil, err
		}
		switch {
		case f.Stream == 0 && f.Type == protocol.TypeError:
			var e protocol.Error
			protocol.Decode(f.Body, &e)
			return nil, &ProtocolError{Remote: true, Msg: e.Message}
		case f.Stream != 0 || f.Type != protocol.TypeHelloReply:
			return nil, &ProtocolError{Msg: fmt.Sprintf("got %s on stream %d, want hello-reply", f.Type, f.Stream)}
		}
		var r protocol.HelloReply
		if err := protocol.Decode(f.Body, &r); err != nil {
			return nil, &ProtocolError{Msg: err.Error()}
		}
		if r.Version < protocol.MinVersion || r.Version > protocol.Version {
			return nil, &VersionError{ClientMin: protocol.MinVersion, ClientMax: protocol.Version,
				AgentMin: r.MinVersion, AgentMax: r.MaxVersion, AgentVersion: r.AgentVersion}
		}
		return &r, nil
	}()
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("connect to krunbox agent: %w", err)
	}
	nc.SetDeadline(time.Time{})
	s := &session{
		log:     c.opts.log,
		nc:      nc,
		hello:   *reply,
		window:  c.opts.window,
		streams: make(map[uint32]*stream),
		done:    make(chan struct{}),
	}
	if s.hello.Window == 0 {
		s.hello.Window = protocol.DefaultWindow
	}
	go s.readLoop(br)
	return s, nil
}

func (s *session) alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// fail ends the session with err; every stream fails with it.
func (s *session) fail(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	close(s.done)
	streams := s.streams
	s.streams = nil
	s.mu.Unlock()
	s.nc.Close()
	for _, st := range streams {
		st.finish(err, false)
	}
}

func (s *session) readLoop(br *bufio.Reader) {
	for {
		f, err := protocol.ReadFrame(br)
		if err != nil {
			if errors.Is(err, protocol.ErrFrameTooLarge) {
				err = &ProtocolError{Msg: err.Error()}
			}
			s.fail(fmt.Errorf("%w: %w", ErrConnectionLost, err))
			return
		}
		if err := s.dispatch(f); err != nil {
			s.log.Warn("closing agent connection", "err", err)
			s.fail(err)
			return
		}
	}
}

// dispatch handles one frame from the agent; an error ends the session.
func (s *session) dispatch(f protocol.Frame) error {
	if v := f.Type.Since(); v == 0 || v > s.hello.Version {
		return &ProtocolError{Msg: fmt.Sprintf("unknown frame type %d", uint8(f.Type))}
	}
	if err := checkControlBody(f); err != nil {
		return err
	}
	if f.Stream == 0 {
		if f.Type == protocol.TypeError {
			var e protocol.Error
			protocol.Decode(f.Body, &e)
			return &ProtocolError{Remote: true, Msg: e.Message}
		}
		return &ProtocolError{Msg: fmt.Sprintf("unexpected %s on stream 0", f.Type)}
	}
	s.mu.Lock()
	st := s.streams[f.Stream]
	opened := f.Stream <= s.nextID
	s.mu.Unlock()
	if st == nil {
		if !opened {
			return &ProtocolError{Msg: fmt.Sprintf("%s for stream %d, which was never opened", f.Type, f.Stream)}
		}
		return nil // a stream this side already let go of
	}
	switch f.Type {
	case protocol.TypeData, protocol.TypeEOF:
		in := st.inbox(f.Channel)
		if in == nil {
			return &ProtocolError{Msg: fmt.Sprintf("%s on %s of stream %d, which takes none", f.Type, f.Channel, f.Stream)}
		}
		if f.Type == protocol.TypeEOF {
			in.CloseEOF()
		} else if err := in.Push(f.Body); err != nil {
			return &ProtocolError{Msg: fmt.Sprintf("stream %d %s: %v", f.Stream, f.Channel, err)}
		}
	case protocol.TypeCredit:
		n, err := protocol.DecodeCredit(f.Body)
		if err != nil || f.Channel != protocol.ChanIn || st.in == nil {
			return &ProtocolError{Msg: fmt.Sprintf("bad credit on stream %d: %v", f.Stream, err)}
		}
		st.in.Add(n)
	case protocol.TypeReply, protocol.TypeError, protocol.TypeExecStarted, protocol.TypeExecExit:
		if err := st.push(f); err != nil {
			return err
		}
	default:
		return &ProtocolError{Msg: fmt.Sprintf("unexpected %s from the agent", f.Type)}
	}
	if f.Flags&protocol.FlagEnd != 0 {
		s.forget(st)
		var endErr error = errStreamEnded
		if f.Type == protocol.TypeError {
			endErr = remoteError(f.Body)
		}
		st.finish(endErr, false)
	}
	return nil
}

// forget drops a stream; later frames for it are ignored.
func (s *session) forget(st *stream) {
	s.mu.Lock()
	if s.streams != nil {
		delete(s.streams, st.id)
	}
	s.mu.Unlock()
}

// maxControlBody bounds the body of every frame from the agent but Data:
// the JSON of a hello, a reply, an error or an exit, which a few KiB hold
// (a hello names each mount, with its path). protocol.MaxBody is for
// data; a decoded list can take 20 times the bytes of its JSON, and a
// stream queues up to maxQueued of these frames.
const maxControlBody = 256 << 10

// checkControlBody refuses a frame other than Data over maxControlBody.
func checkControlBody(f protocol.Frame) error {
	if f.Type != protocol.TypeData && len(f.Body) > maxControlBody {
		return &ProtocolError{Msg: fmt.Sprintf("%s frame of %d bytes on stream %d: over the %d bytes of any frame but data", f.Type, len(f.Body), f.Stream, maxControlBody)}
	}
	return nil
}

// errStreamEnded fails reads of a channel whose stream ended without EOF.
var errStreamEnded = errors.New("the agent ended the stream before the end of the data")

// open sends a request, opening a stream for it. in sets up the ChanIn
// send window (exec with stdin, file writes).
func (s *session) open(t protocol.Type, req any, in bool) (*stream, error) {
	var body []byte
	if req != nil {
		body = protocol.Encode(req)
	}
	st := &stream{s: s, notify: make(chan struct{}, 1)}
	outWindow := s.window
	if t == protocol.TypeReadFile && outWindow < fileWindow {
		// Files move in bulk: a larger window, granted with the request.
		outWindow = fileWindow
	}
	st.out = protocol.NewInbox(outWindow, func(n uint32) { s.credit(st, protocol.ChanOut, n) })
	st.errout = protocol.NewInbox(s.window, func(n uint32) { s.credit(st, protocol.ChanErr, n) })
	if in {
		st.in = protocol.NewSendWindow(s.hello.Window)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.nextID++
	st.id = s.nextID
	s.streams[st.id] = st
	s.mu.Unlock()
	frame := protocol.AppendFrame(nil, protocol.Header{Stream: st.id, Type: t}, body)
	if outWindow > s.window {
		frame = protocol.AppendFrame(frame, protocol.Header{Stream: st.id, Type: protocol.TypeCredit, Channel: protocol.ChanOut},
			protocol.EncodeCredit(outWindow-s.window))
	}
	if err := s.writeLocked(frame); err != nil {
		return nil, err
	}
	return st, nil
}

// writeLocked writes one frame; s.wmu is held. A failure ends the session.
func (s *session) writeLocked(frame []byte, more ...[]byte) error {
	var err error
	if len(more) == 0 {
		_, err = s.nc.Write(frame)
	} else {
		bufs := append(net.Buffers{frame}, more...)
		_, err = bufs.WriteTo(s.nc)
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
		go s.fail(err)
		s.mu.Lock()
		if s.err != nil {
			err = s.err
		}
		s.mu.Unlock()
	}
	return err
}

// send writes one frame on a stream.
func (s *session) send(h protocol.Header, body []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(protocol.AppendFrame(nil, h, body))
}

// sendData writes p as one Data frame without copying it.
func (s *session) sendData(st *stream, ch protocol.Channel, p []byte) error {
	var hb [protocol.HeaderSize]byte
	protocol.Header{Length: uint32(len(p)), Stream: st.id, Type: protocol.TypeData, Channel: ch}.Put(hb[:])
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeLocked(hb[:], p)
}

// credit grants the agent n bytes on a stream's output channel.
func (s *session) credit(st *stream, ch protocol.Channel, n uint32) {
	s.mu.Lock()
	live := s.streams[st.id] == st
	s.mu.Unlock()
	if live {
		s.send(protocol.Header{Stream: st.id, Type: protocol.TypeCredit, Channel: ch}, protocol.EncodeCredit(n))
	}
}

// call makes a request with a single JSON answer, decoded into reply.
func (s *session) call(ctx context.Context, t protocol.Type, req, reply any) error {
	st, err := s.open(t, req, false)
	if err != nil {
		return err
	}
	f, err := st.next(ctx)
	if err != nil {
		st.cancel()
		return err
	}
	return st.decodeReply(f, reply)
}

// fileWindow is the window the client grants a file read.
const fileWindow = 4 << 20

// maxQueued bounds the control frames queued on a stream and not yet taken.
const maxQueued = 16

// stream is the client side of one request.
type stream struct {
	s      *session
	id     uint32
	out    *protocol.Inbox      // ChanOut from the agent
	errout *protocol.Inbox      // ChanErr from the agent
	in     *protocol.SendWindow // ChanIn to the agent, or nil

	mu     sync.Mutex
	queue  []protocol.Frame // Reply, Error, ExecStarted, ExecExit
	ended  error            // set once the stream is over
	notify chan struct{}
}

func (st *stream) inbox(ch protocol.Channel) *protocol.Inbox {
	switch ch {
	case protocol.ChanOut:
		return st.out
	case protocol.ChanErr:
		return st.errout
	}
	return nil
}

func (st *stream) push(f protocol.Frame) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.queue) >= maxQueued {
		return &ProtocolError{Msg: fmt.Sprintf("stream %d: more than %d unanswered %s frames", st.id, maxQueued, f.Type)}
	}
	st.queue = append(st.queue, f)
	st.wake()
	return nil
}

func (st *stream) wake() {
	select {
	case st.notify <- struct{}{}:
	default:
	}
}

// finish marks the stream over: channels not at EOF fail with err, at
// once with discard (the stream was abandoned), otherwise once the data
// received is read.
func (st *stream) finish(err error, discard bool) {
	st.mu.Lock()
	if st.ended == nil {
		st.ended = err
	}
	st.wake()
	st.mu.Unlock()
	st.out.CloseWithError(err, discard)
	st.errout.CloseWithError(err, discard)
	if st.in != nil {
		st.in.Close(err)
	}
}

// next returns the next control frame, waiting for it.
func (st *stream) next(ctx context.Context) (protocol.Frame, error) {
	for {
		st.mu.Lock()
		if len(st.queue) > 0 {
			f := st.queue[0]
			st.queue = st.queue[1:]
			st.mu.Unlock()
			return f, nil
		}
		ended := st.ended
		st.mu.Unlock()
		if ended != nil {
			return protocol.Frame{}, ended
		}
		select {
		case <-st.notify:
		case <-ctx.Done():
			return protocol.Frame{}, ctx.Err()
		}
	}
}

// cancel tells the agent to abandon the stream and forgets it.
func (st *stream) cancel() {
	st.mu.Lock()
	ended := st.ended != nil
	st.mu.Unlock()
	if ended {
		return
	}
	st.s.send(protocol.Header{Stream: st.id, Type: protocol.TypeCancel}, nil)
	st.s.forget(st)
	st.finish(context.Canceled, true)
}

// decodeReply turns a Reply into reply and an Error into an error.
func (st *stream) decodeReply(f protocol.Frame, reply any) error {
	switch f.Type {
	case protocol.TypeReply:
		if reply == nil || len(f.Body) == 0 {
			return nil
		}
		if err := protocol.Decode(f.Body, reply); err != nil {
			st.s.fail(&ProtocolError{Msg: err.Error()})
			return &ProtocolError{Msg: err.Error()}
		}
		return nil
	case protocol.TypeError:
		return remoteError(f.Body)
	}
	err := &ProtocolError{Msg: fmt.Sprintf("unexpected %s on stream %d", f.Type, st.id)}
	st.s.fail(err)
	return err
}
