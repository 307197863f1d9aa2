package netstack

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/waiter"
)

// What a guest's TCP connection buffers in the stack: its endpoint's
// receive and send buffers and the relay's reads. Every connection starts
// small; a way (guest to host, or host to guest) that has carried
// bulkAfter bytes asks for Limits.ConnBuffer and big relay reads, which
// the stack grants out of Limits.Buffer (and the way asks again after
// each bulkAfter more bytes while it is refused).
const (
	// baseConnBuffer is a connection's endpoint buffer each way until
	// then: one frame of the link's MTU.
	baseConnBuffer = 64 << 10
	// bulkAfter is two of those: a bulk transfer spends about two round
	// trips of the guest link on the small buffers.
	bulkAfter = 2 * baseConnBuffer
	// smallRelay and bigRelay are the relay's reads: big ones fill
	// several frames of the link's MTU (32 KiB reads made the stack send
	// 32 KiB segments).
	smallRelay = 16 << 10
	bigRelay   = 256 << 10
)

// Pooled relay buffers, so that a short connection does not allocate and
// clear them.
var (
	smallBufs = sync.Pool{New: func() any { return new([smallRelay]byte) }}
	bigBufs   = sync.Pool{New: func() any { return new([bigRelay]byte) }}
)

// guestConn is the guest's end of a TCP connection through the stack,
// whose ways grow from their small buffers once they carry bulk data.
type guestConn struct {
	net.Conn
	ep tcpip.Endpoint
	st *Stack
	// in is the guest-to-host way (the endpoint's receive buffer), out
	// the host-to-guest one (its send buffer).
	in, out bulkWay
	// granted is what the connection holds of the stack's Limits.Buffer.
	granted atomic.Int64
}

// bulkWay is one way of a guestConn.
type bulkWay struct {
	mu    sync.Mutex
	moved int64 // bytes carried
	next  int64 // when to ask for big buffers (next bulkAfter)
	big   atomic.Bool
}

// newGuestConn wraps c, the guest's end of ep, giving ep its small
// buffers.
func (st *Stack) newGuestConn(c net.Conn, ep tcpip.Endpoint) *guestConn {
	setBuffers(ep, baseConnBuffer)
	g := &guestConn{Conn: c, ep: ep, st: st}
	g.in.next, g.out.next = bulkAfter, bulkAfter
	return g
}

// setBuffers sets ep's receive and send buffers to n bytes, which stops
// gVisor's tuning from growing them.
func setBuffers(ep tcpip.Endpoint, n int64) {
	ep.SocketOptions().SetReceiveBufferSize(n, true)
	ep.SocketOptions().SetSendBufferSize(n, true)
}

// Read reads what the guest sent, counting it for the way in.
func (g *guestConn) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	g.carried(&g.in, n, func(size int64) { g.ep.SocketOptions().SetReceiveBufferSize(size, true) })
	return n, err
}

// Write sends to the guest, counting it for the way out.
func (g *guestConn) Write(p []byte) (int, error) {
	n, err := g.Conn.Write(p)
	g.carried(&g.out, n, func(size int64) { g.ep.SocketOptions().SetSendBufferSize(size, true) })
	return n, err
}

// carried counts n bytes carried by w and, past w's next step, asks the
// stack's buffer budget for w's big buffers; grow sets the endpoint's
// buffer of that way.
func (g *guestConn) carried(w *bulkWay, n int, grow func(size int64)) {
	if n <= 0 || w.big.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.moved += int64(n)
	if w.moved < w.next || w.big.Load() {
		return
	}
	size := int64(g.st.limits.ConnBuffer)
	cost := size - baseConnBuffer + bigRelay - smallRelay
	if !g.st.buffers.take(cost) {
		w.next = w.moved + bulkAfter
		g.st.cfg.Log.Debug("network: buffer budget used up: a bulk connection keeps its small buffers", "budget", g.st.limits.Buffer)
		return
	}
	g.granted.Add(cost)
	grow(size)
	w.big.Store(true)
}

// release gives back what the connection was granted.
func (g *guestConn) release() { g.st.buffers.give(g.granted.Swap(0)) }

// CloseWrite passes a half-close on.
func (g *guestConn) CloseWrite() error { return closeWrite(g.Conn) }

// bigBuffer reports whether copying from src to dst may read big: when
// the guest's end of that way was granted it, or neither end is a guest
// connection (a published port's is the host's).
func bigBuffer(dst, src net.Conn) bool {
	if g, ok := src.(*guestConn); ok {
		return g.in.big.Load()
	}
	if g, ok := dst.(*guestConn); ok {
		return g.out.big.Load()
	}
	return true
}

// closeWrite half-closes c, or closes it when it cannot.
func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// relay copies both ways, passing half-closes on, until both sides end
// or ctx does.
func relay(ctx context.Context, a, b net.Conn) {
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		copyWay(dst, src)
		closeWrite(dst)
	}
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// copyWay copies src to dst until src ends or dst fails: through a small
// buffer until the way may read big (bigBuffer), a big one then.
func copyWay(dst, src net.Conn) {
	small := smallBufs.Get().(*[smallRelay]byte)
	defer smallBufs.Put(small)
	var big *[bigRelay]byte
	defer func() {
		if big != nil {
			bigBufs.Put(big)
		}
	}()
	buf := small[:]
	for {
		if big == nil && bigBuffer(dst, src) {
			big = bigBufs.Get().(*[bigRelay]byte)
			buf = big[:]
		}
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// maxDatagram is the largest UDP payload.
const maxDatagram = 65535

// dgramBufs holds the UDP relay's buffers, taken only while a datagram
// is in hand: an idle flow holds none.
var dgramBufs = sync.Pool{New: func() any { return new([maxDatagram]byte) }}

// relayUDP copies datagrams between the guest's endpoint ep and up until
// either side sent none for udpIdle, or ctx ends.
func relayUDP(ctx context.Context, ep tcpip.Endpoint, wq *waiter.Queue, up *net.UDPConn) {
	guest := gonet.NewUDPConn(wq, ep)
	done := func() { guest.Close(); up.Close() }
	defer done()
	stop := context.AfterFunc(ctx, done)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer done()
		readGuestDgrams(ep, wq, func(b []byte) { up.Write(b) })
	}()
	go func() {
		defer wg.Done()
		defer done()
		readHostDgrams(up, func(b []byte) { guest.Write(b) })
	}()
	wg.Wait()
}

// readGuestDgrams gives each datagram the guest sends on ep to f, until
// ep closes or sends none for udpIdle.
func readGuestDgrams(ep tcpip.Endpoint, wq *waiter.Queue, f func([]byte)) {
	entry, ready := waiter.NewChannelEntry(waiter.ReadableEvents)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)
	idle := time.NewTimer(udpIdle)
	defer idle.Stop()
	for {
		buf := dgramBufs.Get().(*[maxDatagram]byte)
		w := tcpip.SliceWriter(buf[:])
		res, err := ep.Read(&w, tcpip.ReadOptions{})
		if _, ok := err.(*tcpip.ErrWouldBlock); ok {
			dgramBufs.Put(buf)
			select {
			case <-ready:
				continue
			case <-idle.C:
				return
			}
		}
		if err != nil {
			dgramBufs.Put(buf)
			return
		}
		f(buf[:res.Count])
		dgramBufs.Put(buf)
		idle.Reset(udpIdle)
	}
}

// readHostDgrams gives each datagram up receives to f, until up fails or
// receives none for udpIdle. It reads from the socket itself once the
// poller says it has a datagram, so as to take a buffer only then.
func readHostDgrams(up *net.UDPConn, f func([]byte)) {
	rc, err := up.SyscallConn()
	if err != nil {
		return
	}
	for {
		up.SetReadDeadline(time.Now().Add(udpIdle))
		var buf *[maxDatagram]byte
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			buf = dgramBufs.Get().(*[maxDatagram]byte)
			for {
				n, rerr = unix.Read(int(fd), buf[:])
				if !errors.Is(rerr, unix.EINTR) {
					break
				}
			}
			if errors.Is(rerr, unix.EAGAIN) {
				dgramBufs.Put(buf)
				return false
			}
			return true
		})
		if err != nil {
			return // the deadline passed or up closed, the buffer given back
		}
		if rerr == nil {
			f(buf[:n])
		}
		dgramBufs.Put(buf)
		if rerr != nil {
			return
		}
	}
}
