// Package e2e tests krunbox end to end: the built krunbox binary driven as
// a subprocess, as a user drives it, booting VMs on the libkrun test double
// (TestDouble) or on real libkrun (TestRealLibkrun, which needs /dev/kvm
// and says SKIP without it).
//
// Environment:
//
//	KRUNBOX_BIN           the krunbox binary (default: built by TestMain)
//	KRUNBOX_E2E_IMAGE     the busybox image the tests run, such as
//	                      oci:/path/busybox:latest (default: built by
//	                      TestMain from Debian's busybox-static)
//	KRUNBOX_E2E_LIBKRUN   "double", "real" or "both" (default): which
//	                      suites run; a suite asked for by name fails
//	                      instead of skipping when it cannot run
//	KRUNBOX_TEST_LIBKRUN  the test double (default: built with cc)
//	KRUNBOX_LIBKRUN       the real libkrun (default: the loader's search,
//	                      LD_LIBRARY_PATH included)
//	KRUNBOX_E2E_CPUS      vCPUs of the sandboxes the scenarios start, as
//	                      KRUNBOX_CPUS (default: krunbox's); nested real
//	                      VMs (hack/realvm) need 1
//	KRUNBOX_E2E_NETPROBE  a static hack/netprobe for the guest (default:
//	                      built with go by the scenarios that need it)
//	KRUNBOX_E2E_KEEP_LOGS a folder where the sandboxes of a test that
//	                      failed leave their console, runner and network
//	                      logs
//
// "make e2e-bundle" packs the compiled suite, krunbox and the image to run
// on a KVM host without Go (see e2e/bundle/README.md).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// cpusEnv names the vCPU count of the suite's sandboxes (see the package
// comment).
const cpusEnv = "KRUNBOX_E2E_CPUS"

var (
	// krunboxBin is the krunbox binary under test.
	krunboxBin string
	// image is the busybox image reference, or imageErr why there is none.
	image    string
	imageErr error
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "krunbox-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if krunboxBin, err = findKrunbox(tmp); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	image, imageErr = findImage(tmp)
	return m.Run()
}

// findKrunbox returns KRUNBOX_BIN, or builds krunbox into dir with the
// guest agent beside it, where krunbox looks for one it does not embed.
func findKrunbox(dir string) (string, error) {
	if p := os.Getenv("KRUNBOX_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("KRUNBOX_BIN: %w (make build)", err)
		}
		return abs, nil
	}
	root := testkrun.RepoRoot()
	for _, b := range []struct {
		out, pkg string
		cgo      string
	}{
		{"krunbox-agent-linux-" + runtime.GOARCH, "./cmd/krunbox-agent", "0"},
		{"krunbox", "./cmd/krunbox", "1"},
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+b.cgo)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "krunbox"), nil
}

// findImage returns KRUNBOX_E2E_IMAGE, or writes the busybox test image
// into an OCI layout under dir.
func findImage(dir string) (string, error) {
	if ref := os.Getenv("KRUNBOX_E2E_IMAGE"); ref != "" {
		return ref, nil
	}
	img, err := testimage.BusyboxImage()
	if err != nil {
		return "", err
	}
	layout := filepath.Join(dir, "busybox")
	if err := testimage.AppendToLayout(layout, "latest", img); err != nil {
		return "", err
	}
	return "oci:" + layout + ":latest", nil
}
