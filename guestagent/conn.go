//go:build linux

package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

const (
	// helloTimeout bounds the wait for a new connection's hello.
	helloTimeout = 10 * time.Second
	// maxStreams bounds the streams open at once on one connection.
	maxStreams = 1024
	// failWriteTimeout bounds the write of a connection's closing error.
	failWriteTimeout = time.Second
	// fileWindow is the window the agent grants a file write.
	fileWindow = 4 << 20
)

// conn is one host connection: a reader loop dispatching frames to
// streams, and a writer shared by the streams' handlers.
type conn struct {
	a      *Agent
	nc     net.Conn
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	wmu sync.Mutex // serialises frame writes

	version int
	window  uint32 // credit the host grants on each agent→host channel

	mu      sync.Mutex
	streams map[uint32]*stream
	maxID   uint32
}

// stream is one request and everything that flows on its id.
type stream struct {
	id     uint32
	typ    protocol.Type
	ctx    context.Context
	cancel context.CancelFunc
	in     *protocol.Inbox      // ChanIn from the host, or nil
	out    *protocol.SendWindow // ChanOut to the host
	errw   *protocol.SendWindow // ChanErr to the host

	mu     sync.Mutex
	pid    int      // exec: the process group to signal, while it runs
	master *os.File // exec: the terminal to resize
}

func newConn(a *Agent, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		a:       a,
		nc:      nc,
		log:     a.log.With("conn", nc.RemoteAddr().String()),
		ctx:     ctx,
		cancel:  cancel,
		streams: make(map[uint32]*stream),
	}
}

// serve runs the connection until it ends; every stream still open is then
// cancelled, which kills their process groups.
func (c *conn) serve() {
	defer c.close()
	br := bufio.NewReaderSize(c.nc, 64<<10)
	c.nc.SetReadDeadline(time.Now().Add(helloTimeout))
	f, err := protocol.ReadFrame(br)
	if err != nil {
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			c.fail(err)
		} else {
			c.log.Debug("no hello", "err", err)
		}
		return
	}
	if f.Type != protocol.TypeHello || f.Stream != 0 {
		c.fail(fmt.Errorf("first frame is %s on stream %d, want hello on stream 0", f.Type, f.Stream))
		return
	}
	var h protocol.Hello
	if err := protocol.Decode(f.Body, &h); err != nil {
		c.fail(err)
		return
	}
	reply := c.a.helloReply(&h)
	if err := c.send(protocol.Header{Type: protocol.TypeHelloReply}, protocol.Encode(reply)); err != nil || reply.Version == 0 {
		if reply.Version == 0 {
			c.log.Warn("no common protocol version", "host", fmt.Sprintf("%d..%d", h.MinVersion, h.MaxVersion))
		}
		return
	}
	c.version = reply.Version
	c.window = protocol.DefaultWindow
	if h.Window > 0 {
		c.window = min(h.Window, protocol.MaxWindow)
	}
	c.nc.SetReadDeadline(time.Time{})
	for {
		f, err := protocol.ReadFrame(br)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.fail(err)
			}
			return
		}
		if err := c.dispatch(f); err != nil {
			c.fail(err)
			return
		}
	}
}

// fail tells the host why the connection closes.
func (c *conn) fail(err error) {
	c.log.Warn("closing connection: protocol error", "err", err)
	c.nc.SetWriteDeadline(time.Now().Add(failWriteTimeout))
	body := protocol.Encode(protocol.Error{Code: protocol.CodeProtocol, Message: err.Error()})
	c.send(protocol.Header{Type: protocol.TypeError, Flags: protocol.FlagEnd}, body)
}

func (c *conn) close() {
	c.cancel()
	c.mu.Lock()
	for _, st := range c.streams {
		st.abort(net.ErrClosed)
	}
	c.mu.Unlock()
	c.nc.Close()
}

// dispatch handles one frame from the host. An error closes the connection.
func (c *conn) dispatch(f protocol.Frame) error {
	if v := f.Type.Since(); v == 0 || v > c.version {
		return fmt.Errorf("unknown frame type %d", uint8(f.Type))
	}
	if f.Stream == 0 {
		return fmt.Errorf("unexpected %s frame on stream 0", f.Type)
	}
	if f.Type.IsRequest() {
		if f.Stream <= c.maxID {
			return fmt.Errorf("%s request on stream %d: stream ids must increase (last %d)", f.Type, f.Stream, c.maxID)
		}
		c.maxID = f.Stream
		return c.open(f)
	}
	if f.Stream > c.maxID {
		return fmt.Errorf("%s frame on stream %d, which was never opened", f.Type, f.Stream)
	}
	switch f.Type {
	case protocol.TypeData, protocol.TypeEOF, protocol.TypeCredit, protocol.TypeCancel, protocol.TypeSignal, protocol.TypeResize:
	default:
		// Checked before the stream is looked up: a frame the host never
		// sends is an error even when its stream has just ended.
		return fmt.Errorf("unexpected %s frame from the host", f.Type)
	}
	c.mu.Lock()
	st := c.streams[f.Stream]
	c.mu.Unlock()
	if st == nil {
		return nil // the stream ended while this frame was on its way
	}
	switch f.Type {
	case protocol.TypeData, protocol.TypeEOF:
		if f.Channel != protocol.ChanIn || st.in == nil {
			return fmt.Errorf("%s frame on %s of a %s stream, which takes none", f.Type, f.Channel, st.typ)
		}
		if f.Type == protocol.TypeEOF {
			st.in.CloseEOF()
			return nil
		}
		if err := st.in.Push(f.Body); err != nil {
			return fmt.Errorf("stream %d: %w", f.Stream, err)
		}
	case protocol.TypeCredit:
		n, err := protocol.DecodeCredit(f.Body)
		if err != nil {
			return err
		}
		switch f.Channel {
		case protocol.ChanOut:
			st.out.Add(n)
		case protocol.ChanErr:
			st.errw.Add(n)
		default:
			return fmt.Errorf("credit for %s, which the agent does not send", f.Channel)
		}
	case protocol.TypeCancel:
		st.abort(context.Canceled)
	case protocol.TypeSignal, protocol.TypeResize:
		if st.typ != protocol.TypeExec {
			return fmt.Errorf("%s frame on a %s stream", f.Type, st.typ)
		}
		return st.control(c, f)
	}
	return nil
}

// requestBody returns the body type a request decodes into, or nil for
// requests whose body is ignored.
func requestBody(t protocol.Type) any {
	switch t {
	case protocol.TypeShutdown:
		return &protocol.ShutdownRequest{}
	case protocol.TypeExec:
		return &protocol.ExecRequest{}
	case protocol.TypeReadFile:
		return &protocol.ReadFileRequest{}
	case protocol.TypeWriteFile:
		return &protocol.WriteFileRequest{}
	case protocol.TypeStat, protocol.TypeReadDir, protocol.TypeReadlink:
		return &protocol.PathRequest{}
	case protocol.TypeMkdir:
		return &protocol.MkdirRequest{}
	case protocol.TypeRemove:
		return &protocol.RemoveRequest{}
	case protocol.TypeRename:
		return &protocol.RenameRequest{}
	case protocol.TypeSymlink:
		return &protocol.SymlinkRequest{}
	case protocol.TypeChmod:
		return &protocol.ChmodRequest{}
	case protocol.TypeFileEvents:
		return &protocol.FileEventsRequest{}
	}
	return nil
}

// open starts the handler of a new request.
func (c *conn) open(f protocol.Frame) error {
	ctx, cancel := context.WithCancel(c.ctx)
	st := &stream{
		id:     f.Stream,
		typ:    f.Type,
		ctx:    ctx,
		cancel: cancel,
		out:    protocol.NewSendWindow(c.window),
		errw:   protocol.NewSendWindow(c.window),
	}
	req := requestBody(f.Type)
	var invalid error
	if req != nil {
		if err := protocol.Decode(f.Body, req); errors.Is(err, protocol.ErrMalformed) {
			cancel()
			return err
		} else if err != nil {
			invalid = err
		}
	}
	// Answers to refused requests are written from another goroutine: the
	// reader never blocks on a write, or both sides could wait on each
	// other's full socket. Refused streams are never registered, so frames
	// the host already sent for them are ignored.
	if invalid != nil {
		cancel()
		go c.send(protocol.Header{Stream: st.id, Type: protocol.TypeError, Flags: protocol.FlagEnd},
			protocol.Encode(protocol.Error{Code: "EINVAL", Op: f.Type.String(), Message: invalid.Error()}))
		return nil
	}
	if r, ok := req.(*protocol.ExecRequest); ok && r.Stdin {
		st.in = protocol.NewInbox(protocol.DefaultWindow, func(n uint32) { c.credit(st, n) })
	}
	if f.Type == protocol.TypeWriteFile {
		st.in = protocol.NewInbox(fileWindow, func(n uint32) { c.credit(st, n) })
	}
	c.mu.Lock()
	full := len(c.streams) >= maxStreams
	if !full {
		c.streams[st.id] = st
	}
	c.mu.Unlock()
	if full {
		cancel()
		go c.send(protocol.Header{Stream: st.id, Type: protocol.TypeError, Flags: protocol.FlagEnd},
			protocol.Encode(protocol.Error{Code: "EAGAIN", Op: f.Type.String(), Message: fmt.Sprintf("more than %d requests in progress on this connection", maxStreams)}))
		return nil
	}
	go c.run(st, req)
	return nil
}

// run handles one request and closes its stream.
func (c *conn) run(st *stream, req any) {
	switch st.typ {
	case protocol.TypePing, protocol.TypeHealth, protocol.TypeShutdown, protocol.TypeFileEvents:
	default:
		c.a.busy(1)
		defer c.a.busy(-1)
	}
	if st.typ == protocol.TypeWriteFile {
		// Files move in bulk: a larger window than the hello's.
		c.credit(st, fileWindow-protocol.DefaultWindow)
	}
	switch r := req.(type) {
	case nil:
		switch st.typ {
		case protocol.TypePing:
			c.reply(st, protocol.TypeReply, nil, true)
		case protocol.TypeHealth:
			h := c.a.health()
			c.reply(st, protocol.TypeReply, &h, true)
		}
	case *protocol.ShutdownRequest:
		grace := r.Grace
		if grace == 0 {
			grace = protocol.DefaultShutdownGrace
		}
		c.log.Info("shutdown requested", "grace", grace)
		c.a.shutdown(grace, func() { c.reply(st, protocol.TypeReply, nil, true) })
		c.a.CloseConns()
	case *protocol.ExecRequest:
		c.exec(st, r)
	case *protocol.FileEventsRequest:
		res, perr := c.a.events.fire(r)
		if perr != nil {
			c.replyError(st, perr)
			return
		}
		c.reply(st, protocol.TypeReply, &res, true)
	default:
		c.file(st, req)
	}
}

// end forgets a stream; the handler has sent its last frame.
func (c *conn) end(st *stream) {
	c.mu.Lock()
	delete(c.streams, st.id)
	c.mu.Unlock()
	st.abort(errStreamEnded)
}

var errStreamEnded = errors.New("stream ended")

// abort cancels a stream's handler and unblocks its data channels.
func (st *stream) abort(err error) {
	st.cancel()
	st.out.Close(err)
	st.errw.Close(err)
	if st.in != nil {
		st.in.CloseWithError(err, true)
	}
}

// window returns the send window of an output channel.
func (st *stream) window(ch protocol.Channel) *protocol.SendWindow {
	if ch == protocol.ChanErr {
		return st.errw
	}
	return st.out
}

// send writes one frame.
func (c *conn) send(h protocol.Header, body []byte) error {
	return c.write(protocol.AppendFrame(make([]byte, 0, protocol.HeaderSize+len(body)), h, body))
}

// write writes one encoded frame; a failure closes the connection.
func (c *conn) write(frame []byte) error {
	c.wmu.Lock()
	_, err := c.nc.Write(frame)
	c.wmu.Unlock()
	if err != nil {
		c.nc.Close()
	}
	return err
}

// sendData sends buf[HeaderSize:HeaderSize+n] as a Data frame, using the
// head of buf for the header.
func (c *conn) sendData(st *stream, ch protocol.Channel, buf []byte, n int) error {
	protocol.Header{Length: uint32(n), Stream: st.id, Type: protocol.TypeData, Channel: ch}.Put(buf)
	return c.write(buf[:protocol.HeaderSize+n])
}

// sendEOF closes an output channel; with end, it is the stream's last frame.
func (c *conn) sendEOF(st *stream, ch protocol.Channel, end bool) error {
	h := protocol.Header{Stream: st.id, Type: protocol.TypeEOF, Channel: ch}
	if end {
		h.Flags = protocol.FlagEnd
		defer c.end(st)
	}
	return c.send(h, nil)
}

// reply sends a JSON message (an empty body for a nil v); with end, it is
// the stream's last frame.
func (c *conn) reply(st *stream, t protocol.Type, v any, end bool) error {
	var body []byte
	if v != nil {
		body = protocol.Encode(v)
	}
	h := protocol.Header{Stream: st.id, Type: t}
	if end {
		h.Flags = protocol.FlagEnd
		defer c.end(st)
	}
	return c.send(h, body)
}

// replyError ends a stream with an error.
func (c *conn) replyError(st *stream, e *protocol.Error) {
	c.reply(st, protocol.TypeError, e, true)
}

// credit grants the host n more bytes on a stream's input channel.
func (c *conn) credit(st *stream, n uint32) {
	if st.ctx.Err() != nil {
		return
	}
	c.send(protocol.Header{Stream: st.id, Type: protocol.TypeCredit, Channel: protocol.ChanIn}, protocol.EncodeCredit(n))
}

// sendFrom sends what r yields on channel ch, within the host's credit,
// until r ends or limit bytes (when positive) went; beforeRead runs before
// each read. It returns the bytes sent and the error that stopped it (nil
// for io.EOF).
func (c *conn) sendFrom(st *stream, ch protocol.Channel, r io.Reader, limit int64, chunk int, beforeRead func()) (int64, error) {
	w := st.window(ch)
	var buf []byte
	if chunk == protocol.MaxChunk {
		buf = protocol.GetBuffer()
		defer protocol.PutBuffer(buf)
	} else {
		buf = make([]byte, protocol.HeaderSize+chunk)
	}
	var total int64
	for limit <= 0 || total < limit {
		want := chunk
		if limit > 0 {
			want = int(min(int64(chunk), limit-total))
		}
		n, err := w.Take(st.ctx.Done(), want)
		if err != nil {
			return total, err
		}
		if beforeRead != nil {
			beforeRead()
		}
		m, rerr := r.Read(buf[protocol.HeaderSize : protocol.HeaderSize+n])
		if m < n {
			w.Add(uint32(n - m))
		}
		if m > 0 {
			// A stream that ended while the read waited (its connection
			// gone, maybe half-open and taking writes) gets nothing more.
			err := st.ctx.Err()
			if err == nil {
				err = c.sendData(st, ch, buf, m)
			}
			if err != nil {
				return total, &sendError{err: err, unsent: bytes.Clone(buf[protocol.HeaderSize : protocol.HeaderSize+m])}
			}
			total += int64(m)
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
	return total, nil
}

// sendError is a failed send of sendFrom, with the bytes read that did not
// go, for a caller that has somewhere else to put them.
type sendError struct {
	err    error
	unsent []byte
}

func (e *sendError) Error() string { return e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// errorFor describes err for the host: its errno class when it has one.
func errorFor(op, path string, err error) *protocol.Error {
	e := &protocol.Error{Code: protocol.CodeInternal, Op: op, Path: path, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			e.Code = name
		}
		e.Message = errno.Error()
	}
	return e
}
