package confine

import (
	"bytes"
	"io"
	"os"
)

// ReadTail returns the last limit bytes of the file at path, starting at a
// line when the file is longer. It reads those bytes only, however large
// the file: for logs whose content (and so size) the guest decides, such as
// a sandbox's console.
func ReadTail(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-limit, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, limit))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return b, nil
}
