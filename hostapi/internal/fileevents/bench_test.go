package fileevents

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// benchFiles is the size of the burst: a checkout, an npm install.
const benchFiles = 10000

// handoff records when each burst file's event was handed to the sender.
type handoff struct {
	mu   sync.Mutex
	at   map[string]time.Time
	done chan struct{}
	last string
}

func newHandoff(last string) *handoff {
	return &handoff{at: make(map[string]time.Time, benchFiles), done: make(chan struct{}), last: last}
}

func (h *handoff) record(paths ...string) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range paths {
		if _, ok := h.at[p]; !ok {
			h.at[p] = now
			if p == h.last {
				close(h.done)
			}
		}
	}
}

// writerEnv makes the test binary the burst's writer (burstWriter).
const writerEnv = "_FILEEVENTS_BENCH_WRITER"

func init() {
	if dir := os.Getenv(writerEnv); dir != "" {
		os.Exit(burstWriter(dir))
	}
}

// burstWriter writes benchFiles files into dir, printing the time (Unix
// nanoseconds) before each write.
func burstWriter(dir string) int {
	out := bufio.NewWriter(os.Stdout)
	for i := range benchFiles {
		fmt.Fprintln(out, time.Now().UnixNano())
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), []byte(strconv.Itoa(i)), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	out.Flush()
	return 0
}

// BenchmarkBurst measures the host side of file events under a burst of
// benchFiles new files, written by another process (the host's git or
// npm): this process's CPU time, which is the watching alone, its peak
// heap and RSS, and the latency from each file's write to its event being
// handed to the sender (p50, p95), for three cases taking turns: "loop",
// the baseline, a bare fsnotify loop handing on each event as it comes (no
// coalescing, no recursion, no bounds); "watcher"; and "write-only", which
// watches nothing (the floor: running the writer, sampling the heap).
func BenchmarkBurst(b *testing.B) {
	cases := []struct {
		name  string
		watch func(b *testing.B, dir string, h *handoff) (stop func())
		lat   []time.Duration
		cpu   time.Duration
		heap  uint64
		rss   uint64
	}{
		{name: "write-only"},
		{name: "loop", watch: watchPlain},
		{name: "watcher", watch: watchBatched},
	}
	for b.Loop() {
		// The cases take turns, so that they share the machine's load.
		for i := range cases {
			c := &cases[i]
			b.StopTimer()
			resetRSSPeak(b)
			dir := b.TempDir()
			h := newHandoff(filepath.Join(dir, fmt.Sprintf("f%05d", benchFiles-1)))
			var stop func()
			if c.watch != nil {
				stop = c.watch(b, dir, h)
			}
			heap := sampleHeap()
			b.StartTimer()
			cpu0 := cpuTime()
			written := writeBurst(b, dir)
			if c.watch != nil {
				select {
				case <-h.done:
				case <-time.After(30 * time.Second):
					b.Fatal("the burst's last file was never reported")
				}
			}
			c.cpu += cpuTime() - cpu0
			b.StopTimer()
			c.heap = max(c.heap, heap())
			c.rss = max(c.rss, rssPeak(b))
			if stop != nil {
				stop()
			}
			h.mu.Lock()
			for i, w := range written {
				if at, ok := h.at[filepath.Join(dir, fmt.Sprintf("f%05d", i))]; ok {
					c.lat = append(c.lat, at.Sub(w))
				}
			}
			h.mu.Unlock()
			b.StartTimer()
		}
	}
	for _, c := range cases {
		b.ReportMetric(float64(c.cpu.Milliseconds())/float64(b.N), c.name+"-cpu-ms/op")
		b.ReportMetric(float64(c.heap)/(1<<20), c.name+"-heap-peak-MiB")
		b.ReportMetric(float64(c.rss)/(1<<20), c.name+"-rss-peak-MiB")
		if len(c.lat) > 0 {
			slices.Sort(c.lat)
			b.ReportMetric(float64(c.lat[len(c.lat)/2].Microseconds())/1000, c.name+"-p50-ms")
			b.ReportMetric(float64(c.lat[len(c.lat)*95/100].Microseconds())/1000, c.name+"-p95-ms")
		}
	}
}

// writeBurst runs the burst's writer on dir, and returns when it wrote
// each file.
func writeBurst(b *testing.B, dir string) []time.Time {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), writerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("burst writer: %v", err)
	}
	var written []time.Time
	for l := range bytes.Lines(out) {
		ns, err := strconv.ParseInt(string(bytes.TrimSpace(l)), 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		written = append(written, time.Unix(0, ns))
	}
	if len(written) != benchFiles {
		b.Fatalf("the writer wrote %d files, want %d", len(written), benchFiles)
	}
	return written
}

// watchPlain is the baseline: a bare fsnotify loop handing on each event.
func watchPlain(b *testing.B, dir string, h *handoff) func() {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range w.Events {
			h.record(ev.Name)
		}
	})
	wg.Go(func() {
		for range w.Errors {
		}
	})
	return func() { w.Close(); wg.Wait() }
}

// watchBatched runs the watcher, the guest path being the host path.
func watchBatched(b *testing.B, dir string, h *handoff) func() {
	w, err := New([]Share{{HostPath: dir, GuestPath: dir}}, Limits{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(_ context.Context, evs []protocol.FileEvent) error {
			paths := make([]string, len(evs))
			for i, e := range evs {
				paths[i] = e.Path
			}
			h.record(paths...)
			return nil
		})
	}()
	return func() { cancel(); <-done }
}

// sampleHeap samples the heap's live objects every millisecond until the
// returned function is called, which returns the peak.
func sampleHeap() func() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(stop); <-done; return peak }
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// resetRSSPeak resets the process's peak RSS (VmHWM), after a collection.
func resetRSSPeak(b *testing.B) {
	runtime.GC()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("cannot reset the peak RSS: %v", err)
	}
}

// rssPeak is the process's peak RSS (VmHWM), in bytes.
func rssPeak(b *testing.B) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for l := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(l, []byte("VmHWM:")); ok {
			kb, err := strconv.ParseUint(string(bytes.TrimSuffix(bytes.TrimSpace(v), []byte(" kB"))), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	return 0
}
