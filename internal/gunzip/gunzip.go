// Package gunzip decompresses gzip streams (one or more members) for the
// image puller, with the fastest inflater the build has.
//
// Built with cgo and the build tag krunbox_libdeflate (the Makefile sets it
// when the static libdeflate, Debian's libdeflate-dev, is installed), a
// stream whose compressed size is known and fits the process's memory
// budget (Budget) is read whole and inflated by libdeflate, member by
// member, about 2.5 times as fast as klauspost/compress on one core.
// Otherwise, and for any member whose output would not fit the budget (a
// gzip bomb among them), the stream is inflated by klauspost/compress as it
// is read, so the consumer's own limits bound it as before.
package gunzip

import (
	"io"

	"github.com/klauspost/compress/gzip"
)

// NewReader returns a reader of the decompressed content of r, a gzip
// stream of size bytes (-1 or 0: unknown). The reader checks each member's
// CRC-32 and length; a corrupt or truncated stream is an error, never a
// silently short result. Close releases its memory.
func NewReader(r io.Reader, size int64) (io.ReadCloser, error) {
	if zr, ok, err := newWholeReader(r, size); ok {
		return zr, err
	}
	return newStreamReader(r)
}

// newStreamReader inflates r with klauspost/compress as it is read.
func newStreamReader(r io.Reader) (io.ReadCloser, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	return zr, nil
}
