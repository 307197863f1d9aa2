//go:build cgo && linux && krunbox_libdeflate

package gunzip

/*
#cgo LDFLAGS: -l:libdeflate.a
#include <libdeflate.h>
*/
import "C"

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/klauspost/compress/gzip"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// Inflater names the whole-buffer inflater of this build ("" without one).
const Inflater = "libdeflate"

// Budget is how many bytes the whole-buffer inflater may hold at once
// across the process, compressed input and output together. A stream that
// does not fit what is free is inflated as it is read instead.
const Budget = 512 << 20

// budget is shared by every reader of the process; tests replace it.
var budget = semaphore.NewWeighted(Budget)

// minOut is the smallest output buffer, whatever a member's trailer says.
const minOut = 1 << 20

// wholeReader inflates a gzip stream held in memory with libdeflate, one
// member at a time, and serves each member's output from its buffer.
type wholeReader struct {
	in      []byte // the members not inflated yet
	mapped  []byte // the mapping in is part of
	out     []byte // out[off:n] is the current member's unread output (mapped)
	off, n  int
	held    int64 // bytes of the budget held: len(in) + len(out) when read
	members int   // members inflated
	d       *C.struct_libdeflate_decompressor
	rest    io.ReadCloser // the stream reader of the rest, once a member did not fit
	err     error
}

// newWholeReader reads the size bytes of r into memory when they fit the
// budget; ok is false when they do not (or size is unknown) and r is
// untouched.
func newWholeReader(r io.Reader, size int64) (_ io.ReadCloser, ok bool, _ error) {
	if size <= 0 || size > Budget/4 || !budget.TryAcquire(size) {
		return nil, false, nil
	}
	in, err := alloc(size)
	if err != nil {
		budget.Release(size)
		return nil, false, nil
	}
	z := &wholeReader{in: in, mapped: in, held: size}
	if _, err := io.ReadFull(r, z.in); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("gzip stream shorter than its %d bytes: %w", size, err)
		}
		z.fail(err)
		return z, true, nil
	}
	// Read on to the end, so that a verifying reader under r checks what
	// it has passed on.
	var one [1]byte
	switch _, err := io.ReadFull(r, one[:]); {
	case err == nil:
		z.fail(fmt.Errorf("gzip stream longer than its %d bytes", size))
		return z, true, nil
	case err != io.EOF:
		z.fail(err)
		return z, true, nil
	}
	if !bytes.HasPrefix(z.in, []byte{0x1f, 0x8b}) {
		z.Close()
		return nil, true, gzip.ErrHeader
	}
	return z, true, nil
}

// InMemory reports whether r, from NewReader, inflates in memory ahead of
// its reads, so that reading it costs little more than a copy.
func InMemory(r io.Reader) bool {
	z, ok := r.(*wholeReader)
	return ok && z.rest == nil
}

func (z *wholeReader) fail(err error) {
	z.release()
	z.err = err
}

// Read serves the current member's output, inflating the next member when
// it is used up.
func (z *wholeReader) Read(p []byte) (int, error) {
	for z.off == z.n {
		switch {
		case z.rest != nil:
			return z.rest.Read(p)
		case z.err != nil:
			return 0, z.err
		case len(z.in) == 0:
			z.fail(io.EOF)
		default:
			if err := z.inflate(); err != nil {
				z.fail(err)
			}
		}
	}
	n := copy(p, z.out[z.off:z.n])
	z.off += n
	return n, nil
}

// inflate inflates the next member into z.out, growing it within the
// budget from the size the stream's last trailer gives (a hint only: it
// may belong to another member, or lie); a member that does not fit goes
// to the stream reader, with the rest of the stream.
func (z *wholeReader) inflate() error {
	if z.d == nil {
		if z.d = C.libdeflate_alloc_decompressor(); z.d == nil {
			return errors.New("libdeflate: out of memory")
		}
	}
	want := int64(minOut)
	if len(z.in) >= 4 {
		want = max(want, int64(binary.LittleEndian.Uint32(z.in[len(z.in)-4:])))
	}
	for {
		if int64(len(z.out)) < want {
			if !budget.TryAcquire(want - int64(len(z.out))) {
				return z.stream()
			}
			out, err := alloc(want)
			if err != nil {
				budget.Release(want - int64(len(z.out)))
				return z.stream()
			}
			free(z.out)
			z.held += want - int64(len(z.out))
			z.out = out
		}
		var inUsed, outUsed C.size_t
		res := C.libdeflate_gzip_decompress_ex(z.d,
			unsafe.Pointer(&z.in[0]), C.size_t(len(z.in)),
			unsafe.Pointer(&z.out[0]), C.size_t(len(z.out)),
			&inUsed, &outUsed)
		switch res {
		case C.LIBDEFLATE_SUCCESS:
			z.members++
			z.in = z.in[inUsed:]
			z.off, z.n = 0, int(outUsed)
			return nil
		case C.LIBDEFLATE_INSUFFICIENT_SPACE:
			want = 2 * int64(len(z.out))
		default:
			return fmt.Errorf("gzip member %d: invalid or truncated data", z.members+1)
		}
	}
}

// stream hands the rest of the stream, from the member that did not fit,
// to the stream reader, and gives the output buffer back to the budget.
func (z *wholeReader) stream() error {
	rest, err := newStreamReader(bytes.NewReader(z.in))
	if err != nil {
		return err
	}
	budget.Release(int64(len(z.out)))
	z.held -= int64(len(z.out))
	free(z.out)
	z.out, z.off, z.n = nil, 0, 0
	z.rest = rest
	return nil
}

// release frees the buffers and the decompressor, and gives the budget
// back.
func (z *wholeReader) release() {
	if z.d != nil {
		C.libdeflate_free_decompressor(z.d)
		z.d = nil
	}
	free(z.mapped)
	free(z.out)
	z.in, z.mapped, z.out, z.off, z.n = nil, nil, nil, 0, 0
	if z.held > 0 {
		budget.Release(z.held)
		z.held = 0
	}
}

// alloc maps n bytes of memory outside the Go heap: unmapped as soon as the
// reader is done with them (not at the next garbage collection), and in
// huge pages where the kernel has them, which spares most page faults.
func alloc(n int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // only an optimization
	return b, nil
}

// free unmaps b, from alloc; nil is a no-op.
func free(b []byte) {
	if b != nil {
		_ = unix.Munmap(b)
	}
}

// Close frees what the reader holds.
func (z *wholeReader) Close() error {
	var err error
	if z.rest != nil {
		err = z.rest.Close()
	}
	z.release()
	if z.err == nil {
		z.err = errors.New("gzip: read after Close")
	}
	return err
}
