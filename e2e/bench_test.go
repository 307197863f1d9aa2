package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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

func medianOf(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func timeRun(b *testing.B, cmd *exec.Cmd) time.Duration {
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return time.Since(start)
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
	b.ResetTimer()
	for b.Loop() {
		trues = append(trues, timeRun(b, exec.Command("/bin/true")))
		if agent != "" {
			floors = append(floors, timeRun(b, exec.Command(agent, "-version")))
		}
		versions = append(versions, timeRun(b, e.command("version")))
		execs = append(execs, timeRun(b, e.command("exec", "bench", "true")))
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(ms(medianOf(execs)), "exec-median-ms")
	b.ReportMetric(ms(medianOf(trues)), "true-median-ms")
	b.ReportMetric(ms(medianOf(execs)-medianOf(trues)), "added-median-ms")
	b.ReportMetric(ms(medianOf(versions)), "cli-startup-median-ms")
	if agent != "" {
		b.ReportMetric(ms(medianOf(floors)), "go-floor-median-ms")
	}
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
