package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// netprobeEnv names a prebuilt hack/netprobe (static, for the guest): the
// real-VM payloads carry one, as L1 has no Go toolchain.
const netprobeEnv = "KRUNBOX_E2E_NETPROBE"

// netprobe returns the path of a static hack/netprobe for the guest: the
// one netprobeEnv names, or one built for this test.
func netprobe(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(netprobeEnv); p != "" {
		return p
	}
	probe := filepath.Join(t.TempDir(), "netprobe")
	build := exec.Command("go", "build", "-o", probe, "../hack/netprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build netprobe (or set %s): %v\n%s", netprobeEnv, err, out)
	}
	return probe
}
