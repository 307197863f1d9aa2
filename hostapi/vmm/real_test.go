//go:build linux

package vmm

import (
	"os"
	"testing"

	"github.com/krunbox/krunbox/krun"
)

// realLib is the real libkrun while TestRealLibkrun runs the scenarios
// against it; empty otherwise (the scenarios then use the test double).
var realLib string

func skipIfReal(t *testing.T) {
	t.Helper()
	if realLib != "" {
		t.Skip("depends on the test double")
	}
}

// TestRealLibkrun runs the VM scenarios against real libkrun, booting real
// microVMs. It needs /dev/kvm, libkrun (KRUNBOX_LIBKRUN or the default
// search) and libkrunfw, and says SKIP otherwise. Built with "go test -c",
// it runs where Go is not installed: point KRUNBOX_TEST_VSOCKPROBE at a
// prebuilt testdata/vsockprobe and KRUNBOX_TEST_BUSYBOX at a static
// busybox (hack/README.md).
func TestRealLibkrun(t *testing.T) {
	if err := CheckHypervisor("/dev/kvm"); err != nil {
		t.Skipf("SKIP real-libkrun suite: %v", err)
	}
	r, err := Probe(t.Context(), os.Getenv(krun.LibraryEnv))
	switch {
	case err != nil:
		t.Skipf("SKIP real-libkrun suite: %v", err)
	case r.LoadErr != "":
		t.Skipf("SKIP real-libkrun suite: %s", r.LoadErr)
	case r.TestDouble:
		t.Skipf("SKIP real-libkrun suite: %s is the test double", r.Library)
	case r.KrunfwErr != "":
		t.Skipf("SKIP real-libkrun suite: %s", r.KrunfwErr)
	}
	realLib = r.Library
	defer func() { realLib = "" }()
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"ExitCodePropagation", TestExitCodePropagation},
		{"GuestEnvironment", TestGuestEnvironment},
		{"NetworkNone", TestNetworkNone},
		{"ConsoleLogAndRunnerLog", TestConsoleLogAndRunnerLog},
		{"LogsBounded", TestLogsBounded},
		{"LogsOfTheLastBoot", TestLogsOfTheLastBoot},
		{"NoKVMIsAClearError", TestNoKVMIsAClearError},
		{"StartRefusesARunningVM", TestStartRefusesARunningVM},
		{"DetachedFromCaller", TestDetachedFromCaller},
		{"DeadRunnerIsStoppedNotHung", TestDeadRunnerIsStoppedNotHung},
		{"Stop", TestStop},
		{"OverlayRootLeavesImageUntouched", TestOverlayRootLeavesImageUntouched},
		{"UnprivilegedOverlay", TestUnprivilegedOverlay},
		{"VsockGuestListens", TestVsockGuestListens},
		{"VsockGuestDials", TestVsockGuestDials},
		{"FilesPlacedWithoutTouchingTheImage", TestFilesPlacedWithoutTouchingTheImage},
		{"SharesUnderTheDouble", TestSharesUnderTheDouble},
		{"ProtectedPaths", TestProtectedPaths},
	} {
		t.Run(sc.name, sc.run)
	}
}
