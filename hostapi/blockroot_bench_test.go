package hostapi

import (
	"os"
	"testing"
	"time"
)

// BenchmarkSandboxBlockRoot creates, first starts (until the agent
// answers) and removes sandboxes of the busybox image with a block root
// (its default 16 GiB disk, made and formatted at the first start) and
// with an overlay root, in turn in the same run, on the libkrun test
// double: what the block root costs where the host does the work (the
// disk's mke2fs, the loop device of the double standing for virtio-blk).
func BenchmarkSandboxBlockRoot(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the test double's disks are loop devices, which need root")
	}
	h, small := testHost(b)
	if _, err := h.images(); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	type phases struct{ create, start, rm []time.Duration }
	kinds := []RootKind{RootOverlay, RootBlock}
	got := map[RootKind]*phases{RootOverlay: {}, RootBlock: {}}
	for b.Loop() {
		for _, k := range kinds {
			p := got[k]
			start := time.Now()
			sb, err := h.Create(ctx, Config{Image: small, Root: k})
			if err != nil {
				b.Fatal(err)
			}
			p.create = append(p.create, time.Since(start))
			start = time.Now()
			if err := sb.Start(ctx); err != nil {
				b.Fatal(err)
			}
			p.start = append(p.start, time.Since(start))
			start = time.Now()
			if err := sb.Remove(ctx); err != nil {
				b.Fatal(err)
			}
			p.rm = append(p.rm, time.Since(start))
		}
	}
	b.ReportMetric(0, "ns/op")
	o, k := got[RootOverlay], got[RootBlock]
	for _, m := range []struct {
		name   string
		ov, bl []time.Duration
	}{{"create", o.create, k.create}, {"first-start", o.start, k.start}, {"rm", o.rm, k.rm}} {
		b.ReportMetric(millis(median(m.ov)), m.name+"-overlay-median-ms")
		b.ReportMetric(millis(median(m.bl)), m.name+"-block-median-ms")
		b.ReportMetric(float64(median(m.bl))/float64(median(m.ov)), m.name+"-block/overlay")
	}
}
