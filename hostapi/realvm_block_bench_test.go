//go:build linux

package hostapi

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// blockBenchFiles is how many small files BenchmarkRealVMBlockRoot
// unpacks and removes.
const blockBenchFiles = 2000

// BenchmarkRealVMBlockRoot unpacks a tar of 2,000 small files (1 KiB
// each, in 20 directories) and removes them again, in the root of a
// sandbox with a block root (the guest's ext4 on virtio-blk), in the root
// of one with an overlay root (virtio-fs), and in a tmpfs of the guest
// (memory: the floor), each timed from the host (an exec each way, the
// same for all three). The tar lies on the tmpfs, so reading it costs
// the same everywhere.
//
// The removal is timed until the tree is gone, and its passes reported
// (rm-rf-passes-NAME): in the nested harness (2026-12-03), one rm -rf of
// the overlay root's tree left its directories behind ("Directory not
// empty"). That root's host directory is on L1's tmpfs (Linux 6.1), whose
// directory offsets are positions that each unlink moves, read over
// virtio-fs with caching off: the likely cause, which a host directory on
// ext4, XFS, btrfs or a tmpfs of Linux 6.6 or later would not have.
func BenchmarkRealVMBlockRoot(b *testing.B) {
	h, ref := realHost(b)
	ctx := b.Context()
	clients := map[RootKind]*Client{}
	for _, k := range []RootKind{RootBlock, RootOverlay} {
		sb, err := h.Create(ctx, Config{Image: ref, CPUs: 1, MemoryMiB: 1024, Root: k})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sb.Remove(context.Background()) })
		if err := sb.Start(ctx); err != nil {
			b.Fatal(err)
		}
		c := sb.Client()
		b.Cleanup(func() { c.Close() })
		// The files, on a tmpfs of the guest, and their tar beside them.
		const prep = `set -e; mkdir -p /bench-tmpfs; mount -t tmpfs none /bench-tmpfs; mkdir /bench-tmpfs/src; cd /bench-tmpfs/src
			i=0; while [ $i -lt $0 ]; do d=d$((i % 20)); mkdir -p $d; head -c 1024 /dev/urandom > $d/f$i; i=$((i+1)); done
			test "$(find . -type f | wc -l)" = $0
			tar -cf /bench-tmpfs/t.tar . ; rm -rf /bench-tmpfs/src`
		if out, err := c.Output(ctx, "sh", "-c", prep, strconv.Itoa(blockBenchFiles)); err != nil {
			b.Fatalf("prepare the files: %v %s", err, out)
		}
		clients[k] = c
	}
	type target struct {
		name string
		c    *Client
		dir  string
	}
	targets := []target{
		{"block", clients[RootBlock], "/bench"},
		{"virtiofs", clients[RootOverlay], "/bench"},
		{"tmpfs", clients[RootBlock], "/bench-tmpfs/x"},
	}
	tarx, rmrf := map[string][]time.Duration{}, map[string][]time.Duration{}
	passes := map[string]int{}
	timed := func(t target, script string) (time.Duration, string) {
		start := time.Now()
		// stderr into the output, so that a failure says what failed
		out, err := t.c.Output(ctx, "sh", "-c", "exec 2>&1; "+script, t.dir)
		if err != nil {
			b.Fatalf("%s in %s (%s): %v %s", script, t.dir, t.name, err, out)
		}
		return time.Since(start), string(out)
	}
	// rm -rf until the tree is gone, at most 50 passes; prints the passes.
	const rmUntilGone = `n=0; while [ -e "$0" ]; do n=$((n+1)); [ $n -le 50 ] || exit 1; rm -rf "$0" 2>/dev/null; done; echo $n`
	for b.Loop() {
		for _, t := range targets {
			d, _ := timed(t, `mkdir "$0" && tar -xf /bench-tmpfs/t.tar -C "$0"`)
			tarx[t.name] = append(tarx[t.name], d)
			d, out := timed(t, rmUntilGone)
			rmrf[t.name] = append(rmrf[t.name], d)
			n, err := strconv.Atoi(strings.TrimSpace(out))
			if err != nil {
				b.Fatalf("rm -rf passes in %s: %q", t.name, out)
			}
			passes[t.name] = max(passes[t.name], n)
		}
	}
	b.ReportMetric(0, "ns/op")
	for _, t := range targets {
		b.ReportMetric(millis(median(tarx[t.name])), "tar-x-"+t.name+"-median-ms")
		b.ReportMetric(millis(median(rmrf[t.name])), "rm-rf-"+t.name+"-median-ms")
		b.ReportMetric(float64(passes[t.name]), "rm-rf-passes-"+t.name)
	}
	for _, other := range []string{"virtiofs", "tmpfs"} {
		b.ReportMetric(float64(median(tarx["block"]))/float64(median(tarx[other])), "tar-x-block/"+other)
		b.ReportMetric(float64(median(rmrf["block"]))/float64(median(rmrf[other])), "rm-rf-block/"+other)
	}
}
