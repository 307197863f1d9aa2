//go:build !(cgo && linux && amd64 && krunbox_isal)

package gunzip

import (
	"io"

	"github.com/klauspost/compress/gzip"
)

// Inflater names the inflater of this build.
const Inflater = "klauspost"

// InCgo says whether the inflater runs in cgo calls; this one is Go.
const InCgo = false

// newReader inflates r with klauspost/compress.
func newReader(r io.Reader) (io.ReadCloser, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	return zr, nil
}
