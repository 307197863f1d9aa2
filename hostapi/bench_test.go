package hostapi

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// The agent benchmarks run the real agent binary as a host process on a
// unix socket and compare it, in the same run, with the same work done
// without it. Medians are reported as custom metrics: make bench-agent.

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkExecTrue runs /bin/true through the agent and, alternately, with
// os/exec on the host, and reports both medians and their difference
// (target: the agent adds at most 1 ms).
func BenchmarkExecTrue(b *testing.B) {
	c, _ := newTestClient(b, nil)
	ctx := testContext(b)
	if _, err := c.Run(ctx, Command("/bin/true")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	agent, host := execTrueTimes(b, ctx, c)
	b.ReportMetric(micros(median(agent)), "agent-median-µs")
	b.ReportMetric(micros(median(host)), "host-median-µs")
	b.ReportMetric(micros(median(agent)-median(host)), "added-median-µs")
}

// execTrueTimes runs /bin/true once by fork/exec here and once through c
// per iteration of b.Loop, and returns how long each took.
func execTrueTimes(b *testing.B, ctx context.Context, c *Client) (agent, host []time.Duration) {
	for b.Loop() {
		start := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		host = append(host, time.Since(start))
		start = time.Now()
		if _, err := c.Run(ctx, Command("/bin/true")); err != nil {
			b.Fatal(err)
		}
		agent = append(agent, time.Since(start))
	}
	return agent, host
}

// BenchmarkPing measures the round trip to the agent: the floor of every
// request.
func BenchmarkPing(b *testing.B) {
	c, _ := newTestClient(b, nil)
	ctx := testContext(b)
	var ds []time.Duration
	for b.Loop() {
		rtt, err := c.Ping(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, rtt)
	}
	b.ReportMetric(micros(median(ds)), "median-µs")
}

// BenchmarkSmallFileRead reads a 100-byte file through the agent (target:
// a median under 200 µs).
func BenchmarkSmallFileRead(b *testing.B) {
	c, _ := newTestClient(b, nil)
	ctx := testContext(b)
	name := filepath.Join(b.TempDir(), "small")
	os.WriteFile(name, bytes.Repeat([]byte("x"), 100), 0o644)
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		if data, err := c.ReadFile(ctx, name); err != nil || len(data) != 100 {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	b.ReportMetric(micros(median(ds)), "median-µs")
}

const bigFile = 256 << 20

// rawCopy moves bigFile bytes from r to w through a unix socket pair, the
// transport the agent uses, with plain reads and writes of 256 KiB and
// nothing else: the baseline.
func rawCopy(b *testing.B, w io.Writer, r io.Reader) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	tx, rx := conn(fds[0]), conn(fds[1])
	defer rx.Close()
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyBuffer(struct{ io.Writer }{tx}, struct{ io.Reader }{r}, make([]byte, 256<<10))
		tx.Close()
		done <- err
	}()
	n, err := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{rx}, make([]byte, 256<<10))
	if err != nil || n != bigFile {
		b.Fatalf("raw copy: %d, %v", n, err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func mbps(d time.Duration) float64 { return float64(bigFile) / d.Seconds() / 1e6 }

// transfers are how long each copy of transferTimes took.
type transfers struct{ rawRead, rawWrite, read, write []time.Duration }

// transferTimes copies data (bigFile bytes, also in the host file src) per
// iteration of b.Loop: read through a bare unix socket pair here and from
// guestSrc through c, written through the socket pair here and to guestDst
// through c.
func transferTimes(b *testing.B, ctx context.Context, c *Client, data []byte, src, guestSrc, guestDst string) transfers {
	var t transfers
	dir := b.TempDir()
	for b.Loop() {
		// Raw read: file → socket pair → discard.
		f, err := os.Open(src)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		rawCopy(b, io.Discard, f)
		t.rawRead = append(t.rawRead, time.Since(start))
		f.Close()

		start = time.Now()
		rf, err := c.Open(ctx, guestSrc)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rf)
		rf.Close()
		t.read = append(t.read, time.Since(start))
		if err != nil || n != bigFile {
			b.Fatalf("read %d, %v", n, err)
		}

		// Raw write: memory → socket pair → file.
		out, err := os.Create(filepath.Join(dir, "raw"))
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		rawCopy(b, out, bytes.NewReader(data))
		out.Close()
		t.rawWrite = append(t.rawWrite, time.Since(start))

		start = time.Now()
		if err := c.WriteFile(ctx, guestDst, data, 0o644); err != nil {
			b.Fatal(err)
		}
		t.write = append(t.write, time.Since(start))
	}
	return t
}

// BenchmarkFileTransfer reads and writes a 256 MiB file through the agent
// and, in the same iterations, copies it through a bare unix socket pair;
// it reports each throughput and the ratios (target: at least 0.5). Reads
// go to io.Discard on both sides: filling fresh memory costs more than the
// transfer on this machine (page faults) and would hide it.
func BenchmarkFileTransfer(b *testing.B) {
	c, _ := newTestClient(b, nil)
	ctx := testContext(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	data := bytes.Repeat([]byte("0123456789abcdef"), bigFile/16)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(2 * bigFile)
	t := transferTimes(b, ctx, c, data, src, src, filepath.Join(dir, "dst"))
	rawRead, rawWrite, read, write := t.rawRead, t.rawWrite, t.read, t.write
	b.ReportMetric(mbps(median(rawRead)), "raw-read-MB/s")
	b.ReportMetric(mbps(median(read)), "read-MB/s")
	b.ReportMetric(float64(median(rawRead))/float64(median(read)), "read-ratio")
	b.ReportMetric(mbps(median(rawWrite)), "raw-write-MB/s")
	b.ReportMetric(mbps(median(write)), "write-MB/s")
	b.ReportMetric(float64(median(rawWrite))/float64(median(write)), "write-ratio")
}
