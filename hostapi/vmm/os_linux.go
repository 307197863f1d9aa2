package vmm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/confine"
)

func selfExe() string { return "/proc/self/exe" }

// sharePath is the path libkrun is given for the shared directory open as
// dir: that descriptor's directory, through /proc/self/fd, so that what
// was checked (opened with no symlink on the way) is what is shared.
// libkrun's virtio-fs opens the path with O_PATH|O_NOFOLLOW when the guest
// mounts the share (the runner's descriptor is still open then): on the
// magic link "/proc/self/fd/N" itself that would open the link, so the
// path ends in "/.", which follows the link as a directory on the way.
func sharePath(dir *os.File, _ string) string {
	return fmt.Sprintf("/proc/self/fd/%d/.", dir.Fd())
}

// fdPath is a path that opens the process's descriptor fd anew: for a
// pipe, the pipe.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// runnerSysProcAttr gives a process the namespaces the runner enters (see
// kb_enter_namespaces in monitor_cgo.go): a mount namespace of its own, for
// the overlay root, and, unless it is root already, a user namespace
// mapping the caller's uid and gid to 0, so that the guest sees the
// caller's files (image, writable layer, shares) as owned by root.
func runnerSysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if uid := os.Geteuid(); uid != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		a.GidMappingsEnableSetgroups = false
	}
	return a
}

// setupRoot runs in the runner: in its own mount namespace (namespaces
// true), it stops mounts from propagating to the host and mounts the
// overlay root, if any; in the caller's, it mounts nothing.
func setupRoot(r Root, namespaces bool) error {
	unix.CloseOnExec(fdLock) // the guest program must not inherit the VM's lock
	if !namespaces {
		if r.IsOverlay() {
			return errors.New("an overlay root needs the runner's mount namespace")
		}
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if !r.IsOverlay() {
		return nil
	}
	opts := "lowerdir=" + r.Lower + ",upperdir=" + r.Upper + ",workdir=" + r.Work
	err := unix.Mount("overlay", r.Merged, "overlay", 0, opts)
	if errors.Is(err, unix.EINVAL) && os.Getuid() == 0 && inUserNamespace() {
		// Kernels before 5.11 do not imply user xattrs in a user namespace.
		err = unix.Mount("overlay", r.Merged, "overlay", 0, opts+",userxattr")
	}
	if err != nil {
		return fmt.Errorf("mount overlay on %s (%s): %w", r.Merged, opts, err)
	}
	return nil
}

// protectPaths mounts each path over itself, read-only unless Writable,
// in the runner's mount namespace: the guest's shares see those mounts and
// the guest cannot undo them. Without that namespace it fails.
func protectPaths(paths []Protect, namespaces bool) error {
	if len(paths) > 0 && !namespaces {
		return errors.New("protected paths need the runner's mount namespace, which it does not have")
	}
	for _, p := range paths {
		if err := confine.BindOver(p.Path, !p.Writable); err != nil {
			return err
		}
	}
	return nil
}

func inUserNamespace() bool {
	data, err := os.ReadFile("/proc/self/uid_map")
	return err == nil && !strings.Contains(string(data), "4294967295")
}

// CheckHypervisor checks that the KVM device dev (normally /dev/kvm) can be
// opened read-write, which libkrun needs and, without it, aborts.
func CheckHypervisor(dev string) error { return checkHypervisor(dev) }

func checkHypervisor(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		return nil
	}
	e := &HypervisorError{Err: fmt.Errorf("cannot use KVM: %w", err)}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.hint = "no " + dev + ": enable virtualisation (VT-x/AMD-V) in the firmware and load kvm_intel or kvm_amd; " +
			"inside a VM enable nested virtualisation; WSL2 and containers need " + dev + " passed through"
	case errors.Is(err, fs.ErrPermission):
		e.hint = "add yourself to the group owning " + dev + " (usually kvm: sudo usermod -aG kvm $USER) and log in again"
	default:
		e.hint = "check that " + dev + " is the KVM device and that the kvm module is loaded"
	}
	return e
}

// processStartTime returns the start time of process pid in clock ticks
// since boot (field 22 of /proc/<pid>/stat).
func processStartTime(pid int) (uint64, error) {
	fields, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// procStat returns the fields of /proc/<pid>/stat after the command name:
// fields[0] is field 3 (state).
func procStat(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return nil, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return fields, nil
}

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on
// every architecture krunbox runs on.
const userHZ = 100

// processCPUTime returns the user and system CPU time process pid has
// used (fields 14 and 15 of /proc/<pid>/stat).
func processCPUTime(pid int) (time.Duration, error) {
	fields, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// signalProcess signals the runner through a pidfd checked to be the
// process that wrote the pid file, so a reused pid is never signalled.
func signalProcess(ri *RunnerInfo, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(ri.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return ErrNotRunning
	}
	if err != nil {
		return fmt.Errorf("signal VM runner %d: %w", ri.Pid, err)
	}
	defer unix.Close(fd)
	if st, err := processStartTime(ri.Pid); err != nil || st != ri.StartTime {
		return ErrNotRunning
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return ErrNotRunning
		}
		return fmt.Errorf("signal VM runner %d: %w", ri.Pid, err)
	}
	return nil
}

// shortSocketPath returns a path to the unix socket p that fits in
// sun_path: p itself, or /proc/self/fd/N/<name> through a descriptor of
// its directory that this process keeps open.
func shortSocketPath(p string) (string, error) {
	if len(p) <= maxSocketPath {
		return p, nil
	}
	fd, err := unix.Open(filepath.Dir(p), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("open the directory of %s: %w", p, err)
	}
	short := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + filepath.Base(p)
	if len(short) > maxSocketPath {
		unix.Close(fd)
		return "", fmt.Errorf("socket name %q too long", filepath.Base(p))
	}
	return short, nil
}
