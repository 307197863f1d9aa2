package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// The CLI benchmarks of make bench-sandbox (the SDK's are in hostapi).
// Medians are reported as custom metrics, baselines measured in the same
// run. They boot VMs on the test double, or on real libkrun with
// KRUNBOX_E2E_LIBKRUN=real.

func benchSuite(b *testing.B) *suite {
	if imageErr != nil {
		b.Skipf("no test image: %v", imageErr)
	}
	if os.Getenv("KRUNBOX_E2E_LIBKRUN") != string(real) {
		return &suite{mode: double, lib: testkrun.Library(b)}
	}
	s := &suite{mode: real, lib: os.Getenv("KRUNBOX_LIBKRUN")}
	if res := s.doctor(b); res.code != 0 || strings.Contains(res.stdout, "test double") {
		b.Fatalf("KRUNBOX_E2E_LIBKRUN=real, but real VMs cannot start here:\n%s", res.stdout)
	}
	return s
}

// realSuite returns the real-libkrun suite, or says SKIP loudly.
func realSuite(b *testing.B) *suite {
	s := &suite{mode: real, lib: os.Getenv("KRUNBOX_LIBKRUN")}
	if res := s.doctor(b); res.code != 0 || strings.Contains(res.stdout, "test double") {
		b.Skip("SKIP: needs real KVM and libkrun (see e2e/bundle/README.md); krunbox doctor:\n" + res.stdout)
	}
	if imageErr != nil {
		b.Skipf("no test image: %v", imageErr)
	}
	return s
}

func medianOf[T int64 | float64 | time.Duration](ds []T) T {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func timeRun(b *testing.B, cmd *exec.Cmd) time.Duration {
	d, _ := timeRunFaults(b, cmd)
	return d
}

// timeRunFaults runs cmd and returns its wall time and the minor page
// faults the process took (its own, not its children's).
func timeRunFaults(b *testing.B, cmd *exec.Cmd) (time.Duration, int64) {
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	d := time.Since(start)
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return d, 0
	}
	return d, ru.Minflt
}

// pageFaultCost measures what one minor page fault costs on this machine:
// the time to touch each page of fresh anonymous memory once, per page.
// It is the unit in which a process's start-up is spent here: page faults
// cost tens of microseconds on some virtual machines, under one on bare metal.
func pageFaultCost(b *testing.B) time.Duration {
	const size = 64 << 20
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		b.Fatalf("mmap: %v", err)
	}
	defer syscall.Munmap(mem)
	start := time.Now()
	for i := 0; i < size; i += page {
		mem[i] = 1
	}
	return time.Since(start) / time.Duration(size/page)
}

// BenchmarkSandboxExec runs "krunbox exec NAME true", the CLI as a
// subprocess, against /bin/true forked the same way (what a shell does),
// interleaved with two references for the CLI's own start-up: "krunbox
// version", and "krunbox-agent -version" when the agent binary is beside
// krunbox, a small static Go program: the floor of any Go program's
// start-up on this machine (target: exec under 20 ms at the median).
func BenchmarkSandboxExec(b *testing.B) {
	e := newEnv(b, benchSuite(b))
	e.started("bench")
	agent := filepath.Join(filepath.Dir(krunboxBin), "krunbox-agent-linux-"+runtime.GOARCH)
	if _, err := os.Stat(agent); err != nil {
		agent = ""
	}
	var execs, trues, versions, floors []time.Duration
	var execFaults, trueFaults, versionFaults []int64
	b.ResetTimer()
	for b.Loop() {
		d, f := timeRunFaults(b, exec.Command("/bin/true"))
		trues, trueFaults = append(trues, d), append(trueFaults, f)
		if agent != "" {
			floors = append(floors, timeRun(b, exec.Command(agent, "-version")))
		}
		d, f = timeRunFaults(b, e.command("version"))
		versions, versionFaults = append(versions, d), append(versionFaults, f)
		d, f = timeRunFaults(b, e.command("exec", "bench", "true"))
		execs, execFaults = append(execs, d), append(execFaults, f)
	}
	b.StopTimer()
	fault := pageFaultCost(b)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(medianOf(execs)), "exec-median-ms")
	b.ReportMetric(ms(medianOf(trues)), "true-median-ms")
	b.ReportMetric(ms(medianOf(execs)-medianOf(trues)), "added-median-ms")
	b.ReportMetric(ms(medianOf(versions)), "cli-startup-median-ms")
	if agent != "" {
		b.ReportMetric(ms(medianOf(floors)), "go-floor-median-ms")
	}
	b.ReportMetric(float64(medianOf(execFaults)), "exec-faults")
	b.ReportMetric(float64(medianOf(trueFaults)), "true-faults")
	b.ReportMetric(float64(medianOf(versionFaults)), "cli-startup-faults")
	b.ReportMetric(float64(fault)/float64(time.Microsecond), "page-fault-µs")
	// The part of the exec's wall time that is its own page faults, at the
	// cost measured above.
	b.ReportMetric(ms(time.Duration(medianOf(execFaults))*fault), "exec-faults-ms")
}

// BenchmarkSandboxBoot boots a real microVM with "krunbox start" and reads
// the guest agent's boot timings (hello): boot to ready on the guest's
// clock, from its kernel's start to the agent listening with its mounts
// done (target: under 300 ms), and the start command's wall time. It
// needs real KVM and says SKIP otherwise: the test double's guest has no
// kernel of its own to time.
func BenchmarkSandboxBoot(b *testing.B) {
	e := newEnv(b, realSuite(b))
	e.pull()
	e.ok("create", "--name", "boot", image)
	var boots, starts []time.Duration
	b.ResetTimer()
	for b.Loop() {
		starts = append(starts, timeRun(b, e.command("start", "boot")))
		b.StopTimer()
		status := e.inspect("boot")["status"].(map[string]any)
		boot := status["agent"].(map[string]any)["boot"].(map[string]any)
		boots = append(boots, time.Duration(boot["ready_ns"].(float64)))
		e.ok("stop", "boot")
		b.StartTimer()
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(medianOf(boots)), "boot-to-ready-median-ms")
	b.ReportMetric(ms(medianOf(starts)), "krunbox-start-median-ms")
}
