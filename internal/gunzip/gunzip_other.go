//go:build !(cgo && linux && krunbox_libdeflate)

package gunzip

import "io"

// Inflater names the whole-buffer inflater of this build ("" without one).
const Inflater = ""

// newWholeReader always declines: this build has no libdeflate.
func newWholeReader(io.Reader, int64) (io.ReadCloser, bool, error) {
	return nil, false, nil
}

// InMemory reports whether r, from NewReader, inflates in memory ahead of
// its reads; never, in this build.
func InMemory(io.Reader) bool { return false }
