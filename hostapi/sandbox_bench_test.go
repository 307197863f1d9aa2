package hostapi

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/internal/treecopy"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// The sandbox benchmarks (make bench-sandbox, with the e2e ones) use two
// images: busybox (1 MB, 400 files) and the synthetic image of the image
// benchmarks (about 200 MB in 20k files), to show what depends on the
// image's size.

// benchImages serves both images and pulls them into h's cache; it
// returns their references and the synthetic image's flattened tree.
func benchImages(b *testing.B, h *Host, small string) (big, bigRootfs string) {
	img, err := synthetic()
	if err != nil {
		b.Fatal(err)
	}
	big = testimage.Serve(b, img)
	store, err := h.images()
	if err != nil {
		b.Fatal(err)
	}
	for _, ref := range []string{small, big} {
		got, err := store.Pull(b.Context(), ref)
		if err != nil {
			b.Fatal(err)
		}
		bigRootfs = got.Rootfs
	}
	return big, bigRootfs
}

// synthetic builds the synthetic image once per run: it takes seconds.
var synthetic = sync.OnceValues(testimage.Synthetic)

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkSandboxCreate creates sandboxes of the cached synthetic and
// busybox images, against "cp -a" of the synthetic image's tree: what a
// sandbox would cost if it copied its image (target: create under 100 ms
// whatever the image's size). cp -a runs 3 times, whatever b.N.
func BenchmarkSandboxCreate(b *testing.B) {
	h, small := testHost(b)
	big, rootfs := benchImages(b, h, small)
	ctx := b.Context()
	var bigs, smalls, cps []time.Duration
	for range 3 {
		dst := filepath.Join(b.TempDir(), "copy")
		start := time.Now()
		if out, err := exec.Command("cp", "-a", rootfs, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp -a: %v\n%s", err, out)
		}
		cps = append(cps, time.Since(start))
		os.RemoveAll(dst)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, c := range []struct {
			ref string
			ds  *[]time.Duration
		}{{big, &bigs}, {small, &smalls}} {
			start := time.Now()
			if _, err := h.Create(ctx, Config{Image: c.ref}); err != nil {
				b.Fatal(err)
			}
			*c.ds = append(*c.ds, time.Since(start))
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(median(bigs)), "create-200MB-median-ms")
	b.ReportMetric(millis(median(smalls)), "create-busybox-median-ms")
	b.ReportMetric(millis(median(cps)), "cp-a-200MB-median-ms")
	b.ReportMetric(float64(median(bigs))/float64(median(cps)), "create/cp-a")
}

// BenchmarkSandboxCopyRoot makes what the first start of a copy-root
// sandbox makes, a copy of the synthetic image's tree (treecopy, synced),
// against "cp -a" of it followed by "sync -f": the cost of the fallback
// where overlay roots are unavailable, on the file system of the test's
// temporary directory (reflinks on btrfs or XFS, a plain copy on ext4).
// Each runs 3 times, in turn, whatever b.N.
func BenchmarkSandboxCopyRoot(b *testing.B) {
	h, small := testHost(b)
	_, rootfs := benchImages(b, h, small)
	var copies, cps []time.Duration
	method := ""
	for range 3 {
		dst := filepath.Join(b.TempDir(), "copy")
		start := time.Now()
		st, err := treecopy.Copy(b.Context(), rootfs, dst)
		if err != nil {
			b.Fatal(err)
		}
		copies = append(copies, time.Since(start))
		method = string(st.Method)
		removeTree(dst)

		start = time.Now()
		if out, err := exec.Command("sh", "-c", `cp -a "$0" "$1" && sync -f "$1"`, rootfs, dst).CombinedOutput(); err != nil {
			b.Fatalf("cp -a: %v\n%s", err, out)
		}
		cps = append(cps, time.Since(start))
		removeTree(dst)
	}
	b.Logf("treecopy method: %s", method)
	for b.Loop() { // with b.Loop, the function runs once: the copies above are the measure
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(median(copies)), "copy-root-200MB-median-ms")
	b.ReportMetric(millis(median(cps)), "cp-a-sync-200MB-median-ms")
	b.ReportMetric(float64(median(copies))/float64(median(cps)), "copy-root/cp-a")
}

// BenchmarkSandboxStart starts stopped sandboxes of both images until
// their agent answers (Start returns) on the libkrun test double, against
// the guest agent started as a plain host process until it answers the
// same way: what the VM adds to the agent's own start-up.
func BenchmarkSandboxStart(b *testing.B) {
	h, small := testHost(b)
	big, _ := benchImages(b, h, small)
	ctx := b.Context()
	var sbs []*Sandbox
	for _, ref := range []string{big, small} {
		sb, err := h.Create(ctx, Config{Image: ref})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sb.Remove(context.Background()) })
		sbs = append(sbs, sb)
	}
	agentDir, err := os.MkdirTemp("", "kbb") // short: a unix socket lives there
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(agentDir) })
	cfg, _ := json.Marshal(&protocol.Config{})
	os.WriteFile(filepath.Join(agentDir, "agent.json"), cfg, 0o644)

	var bigs, smalls, agents []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for i, ds := range []*[]time.Duration{&bigs, &smalls} {
			start := time.Now()
			if err := sbs[i].Start(ctx); err != nil {
				b.Fatal(err)
			}
			*ds = append(*ds, time.Since(start))
			b.StopTimer()
			if err := sbs[i].Stop(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		agents = append(agents, agentStartup(b, agentDir))
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(millis(median(bigs)), "start-200MB-median-ms")
	b.ReportMetric(millis(median(smalls)), "start-busybox-median-ms")
	b.ReportMetric(millis(median(agents)), "agent-process-median-ms")
	b.ReportMetric(millis(median(smalls)-median(agents)), "vm-added-median-ms")
}

// agentStartup starts the guest agent as a host process and waits, as
// Start does, until it answers.
func agentStartup(b *testing.B, dir string) time.Duration {
	sock := filepath.Join(dir, "a.sock")
	os.Remove(sock)
	start := time.Now()
	cmd := exec.Command(agenttest.Binary(), "--config", filepath.Join(dir, "agent.json"), "--listen", "unix:"+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := NewUnixClient(sock)
	defer c.Close()
	for delay := time.Millisecond; ; delay = min(2*delay, 5*time.Millisecond) {
		if _, err := c.Info(b.Context()); err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 30*time.Second {
			b.Fatal("the agent did not answer in 30s")
		}
		time.Sleep(delay) // the same back-off as Start's
	}
}
