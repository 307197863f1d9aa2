//go:build cgo && linux && amd64 && krunbox_isal

package gunzip

/*
#cgo CFLAGS: -I${SRCDIR}/../../build/isal/include
#cgo LDFLAGS: ${SRCDIR}/../../build/isal/lib/libisal.a
#include <stdlib.h>
#include <isa-l/igzip_lib.h>

// inflate runs isal_inflate from in to out. The state keeps no pointer to
// either once it returns (cgo's rules for Go memory): ISA-L keeps its own
// copy of the history window.
//
// ISA-L's AVX-512 inflate returns with the upper halves of the vector
// registers dirty. Until a vzeroupper, every legacy-SSE instruction the
// thread runs pays for that: Go's SHA-256 (SHA-NI) ran 40 times slower,
// hashing the very output of the inflate on the same thread.
static int krunbox_inflate(struct inflate_state *s, uint8_t *in, uint32_t in_len,
		uint8_t *out, uint32_t out_len, uint32_t *in_used, uint32_t *out_used,
		int *finished) {
	s->next_in = in;
	s->avail_in = in_len;
	s->next_out = out;
	s->avail_out = out_len;
	int ret = isal_inflate(s);
	if (__builtin_cpu_supports("avx")) {
		__asm__ volatile("vzeroupper" ::: "memory");
	}
	*in_used = in_len - s->avail_in;
	*out_used = out_len - s->avail_out;
	*finished = s->block_state == ISAL_BLOCK_FINISH;
	s->next_in = NULL;
	s->avail_in = 0;
	s->next_out = NULL;
	s->avail_out = 0;
	return ret;
}

static struct inflate_state *krunbox_inflate_new(void) {
	struct inflate_state *s = calloc(1, sizeof *s);
	if (s != NULL) {
		isal_inflate_init(s);
		s->crc_flag = ISAL_GZIP;
	}
	return s;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/klauspost/compress/gzip"
)

// Inflater names the inflater of this build.
const Inflater = "isa-l"

// InCgo says whether the inflater runs in cgo calls, which Go's scheduler
// counts as system calls: a goroutine that returns from one finds its
// processor (P) taken whenever other goroutines were waiting, and waits
// for one in turn.
const InCgo = true

// inBufSize is how much compressed input the reader asks for at once.
const inBufSize = 128 << 10

// isalReader inflates a gzip stream with ISA-L as it is read.
type isalReader struct {
	r       io.Reader
	s       *C.struct_inflate_state
	buf     []byte
	in      []byte // buf's unconsumed input
	eof     bool   // r has no more input
	ended   bool   // the current member is complete
	members int
	err     error
}

func newReader(r io.Reader) (io.ReadCloser, error) {
	s := C.krunbox_inflate_new()
	if s == nil {
		return nil, errors.New("gzip: out of memory")
	}
	return &isalReader{r: r, s: s, buf: make([]byte, inBufSize)}, nil
}

// fill reads more input into the buffer, keeping what is left of it.
func (z *isalReader) fill() error {
	n := copy(z.buf, z.in)
	m, err := io.ReadAtLeast(z.r, z.buf[n:], 1)
	z.in = z.buf[:n+m]
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		z.eof = true
		return nil
	case err != nil:
		return err
	}
	return nil
}

// Read inflates into p.
func (z *isalReader) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	p = p[:min(len(p), math.MaxUint32)]
	for {
		if z.ended {
			// The member is complete: the stream ends here, or another
			// member follows.
			if len(z.in) == 0 && !z.eof {
				if err := z.fill(); err != nil {
					return 0, z.fail(err)
				}
			}
			if len(z.in) == 0 {
				return 0, z.fail(io.EOF)
			}
			C.isal_inflate_reset(z.s)
			z.ended = false
		}
		if len(z.in) == 0 && !z.eof {
			if err := z.fill(); err != nil {
				return 0, z.fail(err)
			}
		}
		var inUsed, outUsed C.uint32_t
		var finished C.int
		var inPtr *C.uint8_t
		if len(z.in) > 0 {
			inPtr = (*C.uint8_t)(unsafe.Pointer(&z.in[0]))
		}
		ret := C.krunbox_inflate(z.s, inPtr, C.uint32_t(len(z.in)),
			(*C.uint8_t)(unsafe.Pointer(&p[0])), C.uint32_t(len(p)),
			&inUsed, &outUsed, &finished)
		z.in = z.in[inUsed:]
		if ret < 0 {
			return int(outUsed), z.fail(inflateError(ret, z.members))
		}
		if finished != 0 {
			z.ended = true
			z.members++
		}
		if outUsed > 0 {
			return int(outUsed), nil
		}
		if inUsed == 0 && !z.ended {
			if z.eof {
				return 0, z.fail(fmt.Errorf("gzip member %d: %w", z.members+1, io.ErrUnexpectedEOF))
			}
			if len(z.in) == len(z.buf) {
				// ISA-L takes what it cannot use yet into its state,
				// so a full buffer it does not touch is a bug.
				return 0, z.fail(errors.New("gzip: inflater made no progress"))
			}
			if err := z.fill(); err != nil {
				return 0, z.fail(err)
			}
		}
	}
}

func (z *isalReader) fail(err error) error {
	z.err = err
	return err
}

// inflateError turns an ISA-L error code into an error, as
// klauspost/compress names them where it can.
func inflateError(ret C.int, members int) error {
	switch ret {
	case C.ISAL_INVALID_WRAPPER:
		return gzip.ErrHeader
	case C.ISAL_INCORRECT_CHECKSUM:
		return gzip.ErrChecksum
	case C.ISAL_UNSUPPORTED_METHOD:
		return fmt.Errorf("gzip member %d: unsupported compression method", members+1)
	}
	return fmt.Errorf("gzip member %d: invalid deflate data (isa-l error %d)", members+1, int(ret))
}

// Close frees the inflater's state.
func (z *isalReader) Close() error {
	if z.s != nil {
		C.free(unsafe.Pointer(z.s))
		z.s = nil
	}
	if z.err == nil {
		z.err = errors.New("gzip: read after Close")
	}
	return nil
}
