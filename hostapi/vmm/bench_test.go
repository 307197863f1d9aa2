//go:build linux

package vmm

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/vmdev"
)

// BenchmarkStartToFirstByte measures the host-side start-up overhead of a
// VM under the test double: from Start to the first byte the workload
// writes on its vsock port, against a plain fork/exec of the same static
// program writing to the same kind of socket, interleaved in the same run.
// It reports the medians and their difference (the runner's overhead).
func BenchmarkStartToFirstByte(b *testing.B) {
	spec, dir := shellSpec(b, "")
	vsockProbe(b, spec.Root.Dir)
	state := filepath.Dir(spec.ConsoleLog)
	spec.Root = Root{Lower: spec.Root.Dir, Upper: filepath.Join(state, "upper"), Work: filepath.Join(state, "work"), Merged: filepath.Join(state, "merged")}
	spec.Exec = Exec{Path: "/bin/vsockprobe", Args: []string{"hello", "3000"}}
	sockDir := shortDir(b)
	// The host side of vsock port 3000, for the VM and the baseline alike.
	hostSock := filepath.Join(sockDir, "host.sock")
	l, err := net.Listen("unix", hostSock)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	spec.Vsock = []VsockPort{{Port: 3000, HostPath: hostSock}}
	// The baseline finds the same listener where vmdev looks under the
	// double.
	baseDir := shortDir(b)
	os.MkdirAll(filepath.Join(baseDir, "vsock"), 0o755)
	os.Symlink(hostSock, vmdev.SocketPath(baseDir, 3000))

	firstByte := func() {
		c, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		var buf [1]byte
		if _, err := c.Read(buf[:]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	var vm, fork []time.Duration
	for b.Loop() {
		t0 := time.Now()
		v, err := Start(context.Background(), dir, spec)
		if err != nil {
			b.Fatal(err)
		}
		firstByte()
		vm = append(vm, time.Since(t0))
		if es, err := v.Wait(context.Background()); err != nil || es.Code != 0 {
			b.Fatalf("VM: %v, %v", es, err)
		}

		t0 = time.Now()
		cmd := exec.Command(filepath.Join(spec.Root.Lower, "bin", "vsockprobe"), "hello", "3000")
		cmd.Env = []string{vmdev.TestDirEnv + "=" + baseDir}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		firstByte()
		fork = append(fork, time.Since(t0))
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	mv, mf := median(vm), median(fork)
	b.ReportMetric(ms(mv), "vm-median-ms")
	b.ReportMetric(ms(mf), "forkexec-median-ms")
	b.ReportMetric(ms(mv-mf), "overhead-median-ms")
	b.ReportMetric(ms(percentile(vm, 0.9)), "vm-p90-ms")
}

func median(d []time.Duration) time.Duration { return percentile(d, 0.5) }

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
