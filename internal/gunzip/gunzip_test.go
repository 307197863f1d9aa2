package gunzip

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/gzip"
)

// content returns n bytes that compress about as well as a root file
// system: runs of text-like bytes and of noise.
func content(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, 0, n)
	words := []string{"usr/lib/", "libc.so.6", "\x00\x00\x00\x00", "#!/bin/sh\n", "ELF", "GLIBC_2.34 "}
	for len(b) < n {
		if r.IntN(4) == 0 {
			for range r.IntN(64) {
				b = append(b, byte(r.Uint32()))
			}
		} else {
			b = append(b, words[r.IntN(len(words))]...)
		}
	}
	return b[:n]
}

func gz(t testing.TB, level int, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// flip returns b with one byte changed at i (negative: from the end).
func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	if i < 0 {
		i += len(b)
	}
	b[i] ^= 0x55
	return b
}

// withISIZE returns b with its last trailer's length field set to n.
func withISIZE(b []byte, n uint32) []byte {
	b = bytes.Clone(b)
	binary.LittleEndian.PutUint32(b[len(b)-4:], n)
	return b
}

// reference decompresses with klauspost/compress, as krunbox did before.
func reference(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}

func decompress(b []byte) ([]byte, error) {
	zr, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return io.ReadAll(zr)
}

// decompressIn decompresses b handed over step bytes at a time (0: all
// at once), reading the output one byte at a time when step is 1.
func decompressIn(b []byte, step int) ([]byte, error) {
	var r io.Reader = bytes.NewReader(b)
	if step > 0 {
		r = &stepReader{b: b, step: step}
	}
	zr, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	if step == 1 {
		return io.ReadAll(iotest.OneByteReader(zr))
	}
	return io.ReadAll(zr)
}

// stepReader returns at most step bytes of b per Read.
type stepReader struct {
	b    []byte
	step int
	read int64 // bytes returned so far
}

func (r *stepReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.step)], r.b)
	r.b = r.b[n:]
	r.read += int64(n)
	return n, nil
}

// The reader inflates as it is read: the first MiB of a 32 MiB stream
// takes about as much input, not the whole stream, so that a layer
// inflates while it downloads and a bomb is bounded by its consumer.
func TestStreams(t *testing.T) {
	data := content(32<<20, 12)
	in := gz(t, 6, data)
	src := &stepReader{b: in, step: 64 << 10}
	zr, err := NewReader(src)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	got := make([]byte, 1<<20)
	if _, err := io.ReadFull(zr, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[:1<<20]) {
		t.Fatal("the first MiB differs")
	}
	if src.read > 2<<20 {
		t.Fatalf("read %d bytes of the %d-byte stream for its first MiB of output", src.read, len(in))
	}
}

func TestNewReader(t *testing.T) {
	big := content(3<<20, 1)
	small := content(1000, 2)
	one := gz(t, 6, big)
	tests := []struct {
		name    string
		in      []byte
		want    []byte // nil: an error
		wantErr bool
	}{
		{name: "one member", in: one, want: big},
		{name: "fastest level", in: gz(t, 1, big), want: big},
		{name: "stored", in: gz(t, 0, small), want: small},
		{name: "empty content", in: gz(t, 6, nil), want: []byte{}},
		{name: "concatenated members", in: cat(gz(t, 6, small), one, gz(t, 9, small)), want: cat(small, big, small)},
		{name: "an empty member between", in: cat(gz(t, 6, small), gz(t, 6, nil), gz(t, 6, small)), want: cat(small, small)},
		{name: "a member bigger than the last trailer says", in: cat(gz(t, 6, content(5<<20, 3)), gz(t, 6, small)), want: cat(content(5<<20, 3), small)},
		{name: "truncated in the data", in: one[:len(one)/2], wantErr: true},
		{name: "truncated in the trailer", in: one[:len(one)-3], wantErr: true},
		{name: "truncated second member", in: cat(one, gz(t, 6, small)[:20]), wantErr: true},
		{name: "corrupt data", in: flip(one, len(one)/3), wantErr: true},
		{name: "wrong CRC", in: flip(one, -6), wantErr: true},
		{name: "wrong length", in: withISIZE(one, uint32(len(big)+1)), wantErr: true},
		{name: "garbage after a member", in: cat(one, []byte("not gzip at all")), wantErr: true},
		{name: "header only", in: one[:10], wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, refErr := reference(tt.in)
			if tt.wantErr != (refErr != nil) {
				t.Fatalf("the reference inflater: err = %v, want an error: %v (test case broken)", refErr, tt.wantErr)
			}
			if !tt.wantErr && !bytes.Equal(ref, tt.want) {
				t.Fatal("the reference inflater's output differs (test case broken)")
			}
			for _, step := range []int{0, 1, 7, 100 << 10} {
				got, err := decompressIn(tt.in, step)
				if tt.wantErr {
					if err == nil {
						t.Errorf("read by %d: %d bytes and no error, want an error", step, len(got))
					}
					continue
				}
				if err != nil {
					t.Errorf("read by %d: %v", step, err)
				} else if !bytes.Equal(got, tt.want) {
					t.Errorf("read by %d: %d bytes that differ from the %d expected", step, len(got), len(tt.want))
				}
			}
		})
	}
}

func FuzzNewReader(f *testing.F) {
	small := content(3000, 5)
	f.Add(gz(f, 6, small))
	f.Add(cat(gz(f, 1, small), gz(f, 6, nil)))
	f.Add(gz(f, 0, small))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		want, wantErr := reference(in)
		got, err := decompress(in)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("err = %v, the reference's = %v", err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%d bytes that differ from the reference's %d", len(got), len(want))
		}
	})
}

// TestMutations checks thousands of damaged streams (bytes changed,
// truncated, extended, members repeated) against the reference inflater:
// the same output, or an error from both. Deterministic, so that it runs in
// every build, the cgo one included.
func TestMutations(t *testing.T) {
	small := content(20000, 9)
	seeds := [][]byte{gz(t, 6, small), cat(gz(t, 1, small[:5000]), gz(t, 9, small)), gz(t, 0, small[:3000])}
	r := rand.New(rand.NewPCG(10, 11))
	for i := range 3000 {
		in := bytes.Clone(seeds[i%len(seeds)])
		switch r.IntN(5) {
		case 0:
			for range 1 + r.IntN(3) {
				in[r.IntN(len(in))] ^= byte(1 + r.IntN(255))
			}
		case 1:
			in = in[:r.IntN(len(in))]
		case 2:
			for range 1 + r.IntN(20) {
				in = append(in, byte(r.Uint32()))
			}
		case 3:
			in = cat(in, seeds[r.IntN(len(seeds))])
		case 4:
			in[10+r.IntN(len(in)-18)] ^= 1 << r.IntN(8)
		}
		if len(in) == 0 {
			continue
		}
		want, wantErr := reference(in)
		got, err := decompress(in)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("case %d: err = %v, the reference's = %v", i, err, wantErr)
		}
		if err == nil && !bytes.Equal(got, want) {
			t.Fatalf("case %d: %d bytes that differ from the reference's %d", i, len(got), len(want))
		}
	}
}
