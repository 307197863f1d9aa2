package oci_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// debianImage is the image of real content: the layer directories that
// hack/bench-oci-debian.sh prepares in $KRUNBOX_BENCH_DEBIAN (Debian
// packages unpacked with dpkg -x). It skips without them.
func debianImage(b *testing.B) v1.Image {
	dir := os.Getenv("KRUNBOX_BENCH_DEBIAN")
	if dir == "" {
		b.Skip("KRUNBOX_BENCH_DEBIAN not set (make bench-oci prepares it with hack/bench-oci-debian.sh)")
	}
	dirs, err := filepath.Glob(filepath.Join(dir, "layer*"))
	if err != nil || len(dirs) == 0 {
		b.Fatalf("no layer directories in %s (hack/bench-oci-debian.sh): %v", dir, err)
	}
	slices.Sort(dirs)
	img, err := testimage.FromDirs(dirs...)
	if err != nil {
		b.Fatal(err)
	}
	return img
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

// BenchmarkColdPull measures, in the same run and on two images (the
// synthetic one and one of real content, Debian packages), a cold pull +
// flatten by krunbox against `crane export | tar -x` and against `tar -x`
// of the already flattened tar (the floor). Each iteration runs every
// method into fresh directories, each in turn first and after a sync; the
// figures are medians.
//
// With $KRUNBOX_BIN (the CLI) and $KRUNBOX_BENCH_CRANE (crane, built from
// go-containerregistry), krunbox and crane run as processes, as a user runs
// them: `krunbox pull` into an empty KRUNBOX_HOME and `crane export REF - |
// tar -x`; the in-process pull (oci.Open + Store.Pull) is measured too, as
// krunbox-lib. Without them, both run in process.
func BenchmarkColdPull(b *testing.B) {
	b.Run("synthetic", func(b *testing.B) {
		img, err := benchImage(b)
		if err != nil {
			b.Fatal(err)
		}
		benchColdPull(b, img)
	})
	b.Run("debian", func(b *testing.B) { benchColdPull(b, debianImage(b)) })
}

type benchMethod struct {
	name string
	run  func(dir string) // into the empty directory dir
	took []time.Duration
}

func benchColdPull(b *testing.B, img v1.Image) {
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
	lib := benchMethod{name: "krunbox-lib", run: func(dir string) {
		s, err := oci.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		got, err := s.Pull(b.Context(), ref)
		if err != nil {
			b.Fatal(err)
		}
		size = got.UnpackedSize
	}}
	krunbox := benchMethod{name: "krunbox", run: lib.run}
	crane := benchMethod{name: "crane", run: func(dir string) {
		rimg, err := remote.Image(r)
		if err != nil {
			b.Fatal(err)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(exportCrane(rimg, pw)) }()
		tarExtract(b, pr, dir)
	}}
	floor := benchMethod{name: "floor", run: func(dir string) {
		ff, err := os.Open(flat)
		if err != nil {
			b.Fatal(err)
		}
		defer ff.Close()
		tarExtract(b, ff, dir)
	}}
	methods := []*benchMethod{&krunbox, &crane, &floor}
	bin, craneBin := os.Getenv("KRUNBOX_BIN"), os.Getenv("KRUNBOX_BENCH_CRANE")
	if bin != "" && craneBin != "" {
		krunbox.run = func(dir string) {
			cmd := exec.Command(bin, "pull", ref)
			cmd.Env = append(os.Environ(), "KRUNBOX_HOME="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("krunbox pull: %v\n%s", err, out)
			}
		}
		crane.run = func(dir string) {
			cmd := exec.Command("sh", "-c", `"$0" export "$1" - | tar -x -C "$2"`, craneBin, ref, dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("crane export | tar -x: %v\n%s", err, out)
			}
		}
		methods = append(methods, &lib)
		b.Logf("processes: %s pull, %s export | tar -x", bin, craneBin)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Each method goes first in turn, into a fresh directory, with no
		// dirty pages left by the one before (the writeback of 200 MB
		// would land on whoever comes next). Its tree is removed after
		// it, so that every run meets the same memory and file system:
		// 40 trees kept would fill the page cache, and on a VM whose
		// balloon takes back free memory, memory never touched before
		// costs the hypervisor's faults (BENCHMARKS.md).
		for j := range methods {
			m := methods[(i+j)%len(methods)]
			b.StopTimer()
			dir := benchDir(b, m.name)
			unix.Sync()
			b.StartTimer()
			start := time.Now()
			m.run(dir)
			m.took = append(m.took, time.Since(start))
			b.StopTimer()
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
			unix.Sync()
			b.StartTimer()
		}
	}
	tk, tc, tf := median(krunbox.took), median(crane.took), median(floor.took)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(tk.Seconds(), "krunbox-s")
	b.ReportMetric(tc.Seconds(), "crane-s")
	b.ReportMetric(tf.Seconds(), "floor-s")
	if len(lib.took) > 0 {
		b.ReportMetric(median(lib.took).Seconds(), "krunbox-lib-s")
	}
	b.ReportMetric(tk.Seconds()/tc.Seconds(), "krunbox/crane")
	b.ReportMetric(tk.Seconds()/tf.Seconds(), "krunbox/floor")
	b.ReportMetric(float64(size)/1e6, "MB-content")
	b.ReportMetric(float64(comp)/1e6, "MB-gzip")
	b.ReportMetric(loadAvg(), "loadavg")
}

// loadAvg is the host's load average over the last 5 minutes (0 when
// unknown): on a shared host, the figures mean little without it.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[1], 64)
	return v
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
