package gunzip

import (
	"bytes"
	"io"
	"os"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// BenchmarkInflate inflates one gzip stream, the file KRUNBOX_BENCH_GZIP
// (e.g. the Debian image's base layer) or else 32 MiB of generated content,
// with klauspost/compress and with NewReader (ISA-L when built with
// -tags krunbox_isal); MB/s are of output.
func BenchmarkInflate(b *testing.B) {
	in := gz(b, 6, content(32<<20, 8))
	if name := os.Getenv("KRUNBOX_BENCH_GZIP"); name != "" {
		var err error
		if in, err = os.ReadFile(name); err != nil {
			b.Fatal(err)
		}
	}
	out, err := reference(in)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, open func() (io.ReadCloser, error)) {
		b.SetBytes(int64(len(out)))
		for b.Loop() {
			zr, err := open()
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.Copy(io.Discard, zr); err != nil || n != int64(len(out)) {
				b.Fatalf("%d bytes, %v", n, err)
			}
			zr.Close()
		}
	}
	b.Run("klauspost", func(b *testing.B) {
		run(b, func() (io.ReadCloser, error) { return gzip.NewReader(bytes.NewReader(in)) })
	})
	b.Run("NewReader="+Inflater, func(b *testing.B) {
		run(b, func() (io.ReadCloser, error) { return NewReader(bytes.NewReader(in)) })
	})
}
