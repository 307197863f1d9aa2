package protocol

import (
	"fmt"
	"io"
	"sync"
)

// Flow control: every data channel of a stream has a window. The receiver
// grants credit (the initial window, then Credit frames as its reader
// consumes data); the sender never has more bytes in flight than it was
// granted. So a slow reader stops the sender, and each side buffers at most
// one window per channel, without stalling the other channels that share
// the connection.

// SendWindow is the sender's side of one channel: the credit the peer has
// granted and not yet used.
type SendWindow struct {
	mu     sync.Mutex
	avail  int64
	err    error
	notify chan struct{}
}

// NewSendWindow returns a window with the peer's initial credit.
func NewSendWindow(initial uint32) *SendWindow {
	return &SendWindow{avail: int64(initial), notify: make(chan struct{}, 1)}
}

// Add records credit granted by a Credit frame.
func (w *SendWindow) Add(n uint32) {
	w.mu.Lock()
	w.avail += int64(n)
	w.mu.Unlock()
	w.wake()
}

// Close makes Take fail with err from now on.
func (w *SendWindow) Close(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.wake()
}

func (w *SendWindow) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Take waits until there is credit, or done is closed, or the window is
// closed, and takes up to max bytes of it.
func (w *SendWindow) Take(done <-chan struct{}, max int) (int, error) {
	for {
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return 0, err
		}
		if w.avail > 0 {
			n := int64(max)
			if n > w.avail {
				n = w.avail
			}
			w.avail -= n
			w.mu.Unlock()
			return int(n), nil
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-done:
			return 0, io.ErrClosedPipe
		}
	}
}

// Inbox is the receiver's side of one channel: the data received and not
// yet read, at most one window of it. Read and WriteTo consume it and grant
// credit back through the grant function.
type Inbox struct {
	mu       sync.Mutex
	chunks   [][]byte // chunks[0][head:] is next
	head     int
	lent     bool // a reader holds chunks[0]: it must not go back to the pool
	buffered int64
	window   int64
	unacked  int64
	eof      bool
	aborted  bool
	err      error
	notify   chan struct{}
	grant    func(n uint32)
}

// maxChunks bounds the chunks an inbox keeps apart: each costs a slice
// header beside its bytes, which a sender of 1-byte frames would make 24
// times the window.
const maxChunks = 256

// NewInbox returns an inbox with the window granted to the sender; grant
// sends a Credit frame.
func NewInbox(window uint32, grant func(n uint32)) *Inbox {
	return &Inbox{window: int64(window), notify: make(chan struct{}, 1), grant: grant}
}

// Push adds a received chunk (the inbox keeps it). It fails when the
// sender went over its credit or sent data after EOF: a protocol error.
func (in *Inbox) Push(b []byte) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.eof {
		return fmt.Errorf("data after EOF")
	}
	if in.buffered+int64(len(b))+in.unacked > in.window {
		return fmt.Errorf("data over the granted window of %d bytes", in.window)
	}
	if in.err == nil && len(b) > 0 {
		if n := len(in.chunks); n >= maxChunks {
			// A sender of tiny frames: the window bounds their bytes, not
			// the chunks; past maxChunks they join the last one, which is
			// never the one a reader holds.
			in.chunks[n-1] = append(in.chunks[n-1], b...)
			PutBuffer(b)
		} else {
			in.chunks = append(in.chunks, b)
		}
		in.buffered += int64(len(b))
		in.wakeLocked()
	} else if in.err != nil {
		// The reader is gone: keep granting so the sender is not stuck, from
		// another goroutine, since Push runs on the connection's reader,
		// which must never block on a write.
		if n := len(b); n > 0 {
			go in.grant(uint32(n))
		}
	}
	return nil
}

// CloseEOF marks the end of the data: readers get io.EOF once it is read.
func (in *Inbox) CloseEOF() {
	in.mu.Lock()
	in.eof = true
	in.wakeLocked()
	in.mu.Unlock()
}

// CloseWithError makes readers fail with err once the data buffered is
// read, unless EOF came first. With discard, the buffered data is dropped
// and readers fail at once, EOF or not: the transfer is abandoned.
func (in *Inbox) CloseWithError(err error, discard bool) {
	in.mu.Lock()
	if in.err == nil {
		in.err = err
	}
	if discard {
		in.unacked += in.buffered
		for i, c := range in.chunks {
			if i > 0 || !in.lent {
				PutBuffer(c)
			}
		}
		in.chunks, in.head, in.buffered = nil, 0, 0
		in.aborted = true
	}
	in.wakeLocked()
	in.mu.Unlock()
}

func (in *Inbox) wakeLocked() {
	select {
	case in.notify <- struct{}{}:
	default:
	}
}

// ackLocked grants credit for consumed bytes once a quarter window has
// been consumed (or always, when force is set).
func (in *Inbox) ackLocked(force bool) {
	if in.unacked > 0 && (force || in.unacked >= in.window/4) && !in.eof {
		n := in.unacked
		in.unacked = 0
		in.grant(uint32(n))
	}
}

// next waits for data and returns the first chunk, or the final error.
func (in *Inbox) next() ([]byte, error) {
	for {
		in.mu.Lock()
		if in.aborted {
			err := in.err
			in.mu.Unlock()
			return nil, err
		}
		if len(in.chunks) > 0 {
			c := in.chunks[0][in.head:]
			in.lent = true
			in.mu.Unlock()
			return c, nil
		}
		if in.eof {
			in.mu.Unlock()
			return nil, io.EOF
		}
		if in.err != nil {
			err := in.err
			in.mu.Unlock()
			return nil, err
		}
		in.mu.Unlock()
		<-in.notify
	}
}

// consume drops n bytes from the head chunk and grants credit; a chunk
// wholly consumed goes back to the buffer pool.
func (in *Inbox) consume(n int) {
	in.mu.Lock()
	in.lent = false
	if len(in.chunks) > 0 && !in.aborted {
		in.head += n
		if c := in.chunks[0]; in.head >= len(c) {
			PutBuffer(c)
			in.chunks[0] = nil
			in.chunks, in.head = in.chunks[1:], 0
		}
		in.buffered -= int64(n)
		in.unacked += int64(n)
		in.ackLocked(false)
	}
	in.mu.Unlock()
}

// Read implements io.Reader.
func (in *Inbox) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c, err := in.next()
	if err != nil {
		return 0, err
	}
	n := copy(p, c)
	in.consume(n)
	return n, nil
}

// WriteTo implements io.WriterTo, writing the chunks as they come without
// copying them.
func (in *Inbox) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		c, err := in.next()
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		n, err := w.Write(c)
		total += int64(n)
		in.consume(n)
		if err != nil {
			return total, err
		}
	}
}
