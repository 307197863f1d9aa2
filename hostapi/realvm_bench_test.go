//go:build linux

package hostapi

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/krun"
)

// The real-VM benchmarks (make bench-realvm) boot real libkrun microVMs and
// compare each figure with the same work done without a VM on the same
// machine, in the same run: on the nested VMs of hack/realvm only the
// ratios mean something. They say SKIP where no real VM can start.

// realHost returns a Host on real libkrun (KRUNBOX_LIBKRUN or the loader's
// search) and the busybox image served on 127.0.0.1, or skips.
func realHost(b *testing.B) (*Host, string) {
	b.Helper()
	if err := vmm.CheckHypervisor("/dev/kvm"); err != nil {
		b.Skipf("SKIP real-VM benchmark: %v", err)
	}
	r, err := vmm.Probe(b.Context(), os.Getenv(krun.LibraryEnv))
	switch {
	case err != nil:
		b.Skipf("SKIP real-VM benchmark: %v", err)
	case r.LoadErr != "":
		b.Skipf("SKIP real-VM benchmark: %s", r.LoadErr)
	case r.TestDouble:
		b.Skipf("SKIP real-VM benchmark: %s is the test double", r.Library)
	case r.KrunfwErr != "":
		b.Skipf("SKIP real-VM benchmark: %s", r.KrunfwErr)
	}
	base := b.TempDir()
	dirs := Dirs{State: filepath.Join(base, "state"), Cache: filepath.Join(base, "cache"), Config: filepath.Join(base, "config")}
	h, err := NewHost(WithDirs(dirs), WithLibkrun(r.Library), WithStartTimeout(3*time.Minute), WithStopTimeout(30*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return h, testimage.Serve(b, testimage.Busybox(b))
}

// realSandbox creates a sandbox of one vCPU (what nested VMs take, see
// ../shared/realvm/README.md), removed when the benchmark ends.
func realSandbox(b *testing.B, h *Host, ref string) *Sandbox {
	b.Helper()
	sb, err := h.Create(b.Context(), Config{Image: ref, CPUs: 1, MemoryMiB: 1024})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Remove(b.Context()) })
	return sb
}

// BenchmarkRealVMStart starts a stopped sandbox until its agent answers
// (Start returns), against the guest agent started as a process of this
// machine until it answers the same way.
func BenchmarkRealVMStart(b *testing.B) {
	h, ref := realHost(b)
	sb := realSandbox(b, h, ref)
	agentDir, err := os.MkdirTemp("", "kbb") // short: a unix socket lives there
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(agentDir) })
	cfg, _ := json.Marshal(&protocol.Config{})
	if err := os.WriteFile(filepath.Join(agentDir, "agent.json"), cfg, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var vms, agents []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := sb.Start(ctx); err != nil {
			b.Fatal(err)
		}
		vms = append(vms, time.Since(start))
		b.StopTimer()
		if err := sb.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		agents = append(agents, agentStartup(b, agentDir))
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(median(vms)), "vm-start-median-ms")
	b.ReportMetric(millis(median(agents)), "agent-process-median-ms")
	b.ReportMetric(float64(median(vms))/float64(median(agents)), "vm/process")
}

// BenchmarkRealVMExecTrue runs /bin/true in a running sandbox, through the
// agent on a real virtio-vsock, against fork/exec of /bin/true here.
func BenchmarkRealVMExecTrue(b *testing.B) {
	h, ref := realHost(b)
	sb := realSandbox(b, h, ref)
	ctx := b.Context()
	if err := sb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	c := sb.Client()
	defer c.Close()
	if _, err := c.Run(ctx, Command("/bin/true")); err != nil {
		b.Fatal(err)
	}
	vm, host := execTrueTimes(b, ctx, c)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(micros(median(vm)), "vm-median-µs")
	b.ReportMetric(micros(median(host)), "forkexec-median-µs")
	b.ReportMetric(float64(median(vm))/float64(median(host)), "vm/forkexec")
}

// BenchmarkRealVMFileTransfer reads and writes a 256 MiB file of the
// sandbox's root through the agent, against the same bytes through a bare
// unix socket pair here (rawCopy, as BenchmarkFileTransfer). The ratios
// are the socket pair's time over the VM's: 1 is as fast.
func BenchmarkRealVMFileTransfer(b *testing.B) {
	h, ref := realHost(b)
	sb := realSandbox(b, h, ref)
	ctx := b.Context()
	if err := sb.Start(ctx); err != nil {
		b.Fatal(err)
	}
	c := sb.Client()
	defer c.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), bigFile/16)
	if err := c.WriteFile(ctx, "/bench-src", data, 0o644); err != nil {
		b.Fatal(err)
	}
	src := filepath.Join(b.TempDir(), "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(2 * bigFile)
	t := transferTimes(b, ctx, c, data, src, "/bench-src", "/bench-dst")
	rawRead, rawWrite, read, write := t.rawRead, t.rawWrite, t.read, t.write
	b.ReportMetric(mbps(median(read)), "vm-read-MB/s")
	b.ReportMetric(mbps(median(rawRead)), "socket-read-MB/s")
	b.ReportMetric(float64(median(rawRead))/float64(median(read)), "read-ratio")
	b.ReportMetric(mbps(median(write)), "vm-write-MB/s")
	b.ReportMetric(mbps(median(rawWrite)), "socket-write-MB/s")
	b.ReportMetric(float64(median(rawWrite))/float64(median(write)), "write-ratio")
}
