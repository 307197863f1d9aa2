package testimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Synthetic returns the image of the benchmarks: about 200 MB in about 20k
// files, in 6 layers, with whiteouts, an opaque directory, hard links and
// symbolic links (half absolute), of text-like content that gzip
// compresses about 3x, owned by 0 and 1000. It is the same on every call
// (a fixed seed) and takes seconds to build: build it once.
func Synthetic() (v1.Image, error) {
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
		layer, err := layerOf(data, tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
		if err != nil {
			return nil, err
		}
		layers = append(layers, layer)
	}
	empty, err := BuildImage("", Config{})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(empty, layers...)
}
