package vmm

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func selfExe() string {
	exe, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return exe
}

// sharePath is the path libkrun is given for the shared directory open as
// dir: on macOS, the path that was just opened with no symlink on the way.
// libkrun's macOS virtio-fs resolves paths, not descriptors, so a link
// planted between this check and libkrun's open is not caught there.
func sharePath(_ *os.File, p string) string { return p }

// fdPath is a path that opens the process's descriptor fd anew: for a
// pipe, the pipe.
func fdPath(fd int) string { return "/dev/fd/" + strconv.Itoa(fd) }

// runnerSysProcAttr: macOS has no namespaces.
func runnerSysProcAttr() *syscall.SysProcAttr { return nil }

// setupRoot: macOS has no overlayfs, so only plain-directory roots work.
func setupRoot(r Root, _ bool) error {
	unix.CloseOnExec(fdLock)
	if r.IsOverlay() {
		return errors.New("overlay roots need Linux; use a plain directory (root dir) on macOS")
	}
	return nil
}

// CheckHypervisor checks that Hypervisor.framework is available; dev is
// ignored on macOS.
func CheckHypervisor(dev string) error { return checkHypervisor(dev) }

func checkHypervisor(string) error {
	v, err := unix.SysctlUint32("kern.hv_support")
	if err == nil && v == 1 {
		return nil
	}
	return &HypervisorError{
		Err:  fmt.Errorf("Hypervisor.framework is not available (kern.hv_support=%d, %v)", v, err),
		hint: "krunbox needs macOS 14 or later on Apple silicon, outside a VM without nested virtualisation",
	}
}

func processStartTime(pid int) (uint64, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, err
	}
	if kp.Proc.P_pid != int32(pid) {
		return 0, fmt.Errorf("no process %d", pid)
	}
	tv := kp.Proc.P_starttime
	return uint64(tv.Sec)*1e6 + uint64(tv.Usec), nil
}

// processCPUTime is not implemented on macOS: doctor's boot check reports
// no CPU time there.
func processCPUTime(pid int) (time.Duration, error) {
	return 0, fmt.Errorf("CPU time of process %d: %w", pid, errors.ErrUnsupported)
}

func signalProcess(ri *RunnerInfo, sig syscall.Signal) error {
	if st, err := processStartTime(ri.Pid); err != nil || st != ri.StartTime {
		return ErrNotRunning
	}
	if err := syscall.Kill(ri.Pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return ErrNotRunning
		}
		return fmt.Errorf("signal VM runner %d: %w", ri.Pid, err)
	}
	return nil
}

func shortSocketPath(p string) (string, error) {
	if len(p) <= maxSocketPath {
		return p, nil
	}
	return "", fmt.Errorf("unix socket path %s is longer than %d bytes; use a shorter state directory (KRUNBOX_HOME)", p, maxSocketPath)
}

// protectPaths: macOS has no mount namespaces, so paths cannot be
// protected (see ProtectsPaths).
func protectPaths(paths []Protect, _ bool) error {
	if len(paths) > 0 {
		return errors.New("protected paths need Linux's mount namespaces")
	}
	return nil
}
