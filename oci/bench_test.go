package oci_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/oci"
)

var (
	benchOnce sync.Once
	benchImg  v1.Image
	benchErr  error
)

// benchImage is the synthetic image of the benchmarks, built once per run.
func benchImage(b *testing.B) (v1.Image, error) {
	benchOnce.Do(func() { benchImg, benchErr = makeBenchImage(b) })
	return benchImg, benchErr
}

// makeBenchImage builds about 200 MB and 20k files in 6 layers, with
// whiteouts, an opaque directory, hard links and symbolic links (half
// absolute), of text-like content that gzip compresses about 3x.
func makeBenchImage(b *testing.B) (v1.Image, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	// A pool of pseudo-words: file contents are slices of it.
	var pool bytes.Buffer
	words := make([]string, 8192)
	for i := range words {
		w := make([]byte, 2+rng.IntN(9))
		for j := range w {
			w[j] = byte('a' + rng.IntN(26))
		}
		words[i] = string(w)
		if i >= 2048 { // a Zipf-like vocabulary, as in real text and code
			words[i] = words[rng.IntN(256)]
		}
	}
	for pool.Len() < 8<<20 {
		pool.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(12) == 0 {
			pool.WriteByte('\n')
		} else {
			pool.WriteByte(' ')
		}
	}
	text := pool.Bytes()
	size := func() int {
		switch r := rng.IntN(100); {
		case r < 75:
			return 256 + rng.IntN(6<<10)
		case r < 97:
			return 6<<10 + rng.IntN(18<<10)
		default:
			return 40<<10 + rng.IntN(160<<10)
		}
	}
	mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	var layers []v1.Layer
	var base []string // files of layer 0, for whiteouts
	for l := range 6 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		dir := func(p string) {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: mtime})
		}
		files := 1000
		if l == 0 {
			files = 15000
		}
		prefix := fmt.Sprintf("l%d", l)
		dir(prefix)
		var mine []string
		for i := range files {
			d := fmt.Sprintf("%s/d%03d", prefix, i/15)
			if i%15 == 0 {
				dir(d)
			}
			p := fmt.Sprintf("%s/f%05d.txt", d, i)
			n := size()
			off := rng.IntN(len(text) - n)
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: p, Size: int64(n), Mode: 0o644, ModTime: mtime, Uid: 1000 * (i % 2), Gid: 1000 * (i % 2)})
			tw.Write(text[off : off+n])
			mine = append(mine, p)
			if i%50 == 1 { // a hard link to a file of this layer
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: p + ".hl", Linkname: mine[i-1], ModTime: mtime})
			}
			if i%25 == 2 {
				target := "../" + filepath.Base(mine[i-1])
				if i%2 == 0 {
					target = "/" + mine[i-1]
				}
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: p + ".sl", Linkname: target, Mode: 0o777, ModTime: mtime})
			}
		}
		if l == 0 {
			base = mine
		} else {
			for i := range 80 { // whiteouts of base files
				k := (l*997 + i*131) % len(base)
				if k%50 == 0 {
					k++ // not a hard link target: crane export cannot express that (go-containerregistry#977)
				}
				p := base[k]
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.Dir(p) + "/.wh." + filepath.Base(p), Mode: 0o644, ModTime: mtime})
			}
		}
		if l == 3 { // an opaque directory over a base directory
			dir("l0/d500")
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "l0/d500/.wh..wh..opq", Mode: 0o644, ModTime: mtime})
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "l0/d500/new", Size: 3, Mode: 0o644, ModTime: mtime})
			tw.Write([]byte("new"))
		}
		if err := tw.Close(); err != nil {
			return nil, err
		}
		data := buf.Bytes()
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
	}
	return mutate.AppendLayers(testimage.Image(b, "", testimage.Config{}), layers...)
}

// benchDir is a fresh directory on the file system of the cache (tests'
// TempDir), never one just emptied (see docs/oci.md §4.3).
func benchDir(b *testing.B, name string) string {
	d, err := os.MkdirTemp(b.TempDir(), name)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func tarExtract(b *testing.B, r io.Reader, dir string) {
	cmd := exec.Command("tar", "-x", "-C", dir)
	cmd.Stdin = r
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("tar -x: %v\n%s", err, out)
	}
}

// BenchmarkColdPull measures, in the same run, a cold pull + flatten by
// krunbox, `crane export | tar -x` (go-containerregistry's crane.Export,
// which is mutate.Extract for multi-layer images, piped into GNU tar) and
// `tar -x` of the already flattened tar (the floor). Each iteration runs
// the three into fresh directories.
func BenchmarkColdPull(b *testing.B) {
	img, err := benchImage(b)
	if err != nil {
		b.Fatal(err)
	}
	ref := testimage.Serve(b, img)
	r, err := name.ParseReference(ref)
	if err != nil {
		b.Fatal(err)
	}
	// The floor's input: the flattened tar, on disk.
	flat := filepath.Join(b.TempDir(), "flat.tar")
	f, err := os.Create(flat)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(f, mutate.Extract(img)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var size, comp int64
	layers, _ := img.Layers()
	for _, l := range layers {
		s, _ := l.Size()
		comp += s
	}

	var tk, tc, tf time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		s, err := oci.Open(benchDir(b, "krunbox"))
		if err != nil {
			b.Fatal(err)
		}
		got, err := s.Pull(b.Context(), ref)
		if err != nil {
			b.Fatal(err)
		}
		tk += time.Since(start)
		size = got.UnpackedSize

		start = time.Now()
		rimg, err := remote.Image(r)
		if err != nil {
			b.Fatal(err)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(exportCrane(rimg, pw)) }()
		tarExtract(b, pr, benchDir(b, "crane"))
		tc += time.Since(start)

		start = time.Now()
		ff, err := os.Open(flat)
		if err != nil {
			b.Fatal(err)
		}
		tarExtract(b, ff, benchDir(b, "floor"))
		ff.Close()
		tf += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tk.Seconds()/n, "krunbox-s")
	b.ReportMetric(tc.Seconds()/n, "crane-s")
	b.ReportMetric(tf.Seconds()/n, "floor-s")
	b.ReportMetric(tk.Seconds()/tc.Seconds(), "krunbox/crane")
	b.ReportMetric(tk.Seconds()/tf.Seconds(), "krunbox/floor")
	b.ReportMetric(float64(size)/1e6, "MB-content")
	b.ReportMetric(float64(comp)/1e6, "MB-gzip")
}

// exportCrane is crane.Export: mutate.Extract for images of several layers.
func exportCrane(img v1.Image, w io.Writer) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	_, err := io.Copy(w, rc)
	return err
}

// BenchmarkResolveCached measures Open + Pull of an image already in the
// cache: what a sandbox start pays.
func BenchmarkResolveCached(b *testing.B) {
	img, err := benchImage(b)
	if err != nil {
		b.Fatal(err)
	}
	ref := testimage.Serve(b, img)
	dir := benchDir(b, "cache")
	s, err := oci.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pull(b.Context(), ref); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := oci.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Pull(b.Context(), ref); err != nil {
			b.Fatal(err)
		}
	}
}
