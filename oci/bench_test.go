package oci_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

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
	benchOnce.Do(func() { benchImg, benchErr = testimage.Synthetic() })
	return benchImg, benchErr
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
// the three into fresh directories, each in turn first and after a sync;
// the figures are medians.
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
	var comp int64
	layers, _ := img.Layers()
	for _, l := range layers {
		s, _ := l.Size()
		comp += s
	}

	var size int64
	methods := []struct {
		name string
		run  func()
		took []time.Duration
	}{
		{name: "krunbox", run: func() {
			s, err := oci.Open(benchDir(b, "krunbox"))
			if err != nil {
				b.Fatal(err)
			}
			got, err := s.Pull(b.Context(), ref)
			if err != nil {
				b.Fatal(err)
			}
			size = got.UnpackedSize
		}},
		{name: "crane", run: func() {
			rimg, err := remote.Image(r)
			if err != nil {
				b.Fatal(err)
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(exportCrane(rimg, pw)) }()
			tarExtract(b, pr, benchDir(b, "crane"))
		}},
		{name: "floor", run: func() {
			ff, err := os.Open(flat)
			if err != nil {
				b.Fatal(err)
			}
			defer ff.Close()
			tarExtract(b, ff, benchDir(b, "floor"))
		}},
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Each method goes first in turn, and starts with no dirty pages
		// left by the one before: the writeback of 200 MB would otherwise
		// land on whoever comes next.
		for j := range methods {
			m := &methods[(i+j)%len(methods)]
			b.StopTimer()
			unix.Sync()
			b.StartTimer()
			start := time.Now()
			m.run()
			m.took = append(m.took, time.Since(start))
		}
	}
	tk, tc, tf := median(methods[0].took), median(methods[1].took), median(methods[2].took)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tk.Seconds(), "krunbox-s")
	b.ReportMetric(tc.Seconds(), "crane-s")
	b.ReportMetric(tf.Seconds(), "floor-s")
	b.ReportMetric(tk.Seconds()/tc.Seconds(), "krunbox/crane")
	b.ReportMetric(tk.Seconds()/tf.Seconds(), "krunbox/floor")
	b.ReportMetric(float64(size)/1e6, "MB-content")
	b.ReportMetric(float64(comp)/1e6, "MB-gzip")
}

// median returns the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
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
