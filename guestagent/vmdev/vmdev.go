//go:build linux

// Package vmdev gives the guest agent the two virtual devices it needs from
// libkrun: vsock, to talk to the host, and virtio-fs, to mount host
// directories.
//
// Under the libkrun test double (hack/testkrun) there is no VM and so no
// vsock or virtio-fs device. The double then sets one environment variable,
// KRUNBOX_TESTKRUN_DIR, in the workload's environment, naming a directory of
// the guest where it provides stand-ins:
//
//   - $KRUNBOX_TESTKRUN_DIR/vsock/<port>.sock is vsock port <port>: for a port
//     the host connects to, the guest listens on this unix socket; for a port
//     the guest connects out on, the double listens on it.
//   - $KRUNBOX_TESTKRUN_DIR/virtiofs/<tag> is the directory shared under the
//     virtio-fs tag <tag>; mounting the tag bind-mounts it.
//   - $KRUNBOX_TESTKRUN_DIR/block/<id> is the disk added with the id <id>:
//     a loop device of its image.
//   - $KRUNBOX_TESTKRUN_DIR/fsnotify_inject stands for the guest kernel's
//     /proc/fs/fsnotify_inject: a plain file that records each request
//     written to it, for the tests to read.
//
// Real libkrun never sets the variable, so production always uses the real
// devices. This is the only place the agent behaves differently under test.
package vmdev

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"
)

// TestDirEnv is the environment variable through which the libkrun test
// double hands its device stand-ins to the guest.
const TestDirEnv = "KRUNBOX_TESTKRUN_DIR"

// testDir returns the test double's stand-in directory, or "" in a real VM.
func testDir() string { return os.Getenv(TestDirEnv) }

// UnderTestDouble reports whether the agent runs under the libkrun test
// double rather than in a real VM.
func UnderTestDouble() bool { return testDir() != "" }

// FsnotifyInject is the guest kernel's fsnotify injection interface, which
// krunbox's libkrunfw adds: each write(2) fires one event.
const FsnotifyInject = "/proc/fs/fsnotify_inject"

// FsnotifyInjectPath is where the agent finds the fsnotify injection
// interface: FsnotifyInject in a VM, the test double's stand-in under it.
func FsnotifyInjectPath() string {
	if dir := testDir(); dir != "" {
		return filepath.Join(dir, "fsnotify_inject")
	}
	return FsnotifyInject
}

// SocketPath is the unix socket standing in for vsock port under the test
// double whose stand-in directory is dir.
func SocketPath(dir string, port uint32) string {
	return filepath.Join(dir, "vsock", strconv.FormatUint(uint64(port), 10)+".sock")
}

// Listen listens on vsock port for connections from the host.
func Listen(port uint32) (net.Listener, error) {
	if dir := testDir(); dir != "" {
		p := SocketPath(dir, port)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, fmt.Errorf("listen on vsock port %d (test double): %w", port, err)
		}
		l, err := net.Listen("unix", p)
		if err != nil {
			return nil, fmt.Errorf("listen on vsock port %d (test double): %w", port, err)
		}
		return l, nil
	}
	l, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	return l, nil
}

// Dial connects to vsock port on the host.
func Dial(port uint32) (net.Conn, error) {
	if dir := testDir(); dir != "" {
		c, err := net.Dial("unix", SocketPath(dir, port))
		if err != nil {
			return nil, fmt.Errorf("dial host vsock port %d (test double): %w", port, err)
		}
		return c, nil
	}
	c, err := vsock.Dial(vsock.Host, port, nil)
	if err != nil {
		return nil, fmt.Errorf("dial host vsock port %d: %w", port, err)
	}
	return c, nil
}

// MountVirtiofs mounts the virtio-fs share tag on target, which must exist,
// read-only when readOnly is set.
func MountVirtiofs(tag, target string, readOnly bool) error {
	var flags uintptr
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	dir := testDir()
	if dir == "" {
		if err := unix.Mount(tag, target, "virtiofs", flags, ""); err != nil {
			return fmt.Errorf("mount virtiofs %s on %s: %w", tag, target, err)
		}
		return nil
	}
	src := filepath.Join(dir, "virtiofs", tag)
	if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("mount virtiofs %s on %s (test double bind of %s): %w", tag, target, src, err)
	}
	if readOnly {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("mount virtiofs %s on %s read-only (test double): %w", tag, target, err)
		}
	}
	return nil
}

// BlockDevice is the device node of the VM's disk id, its first and only
// one: /dev/vda in a VM (libkrun names its disks by the order they were
// added, and the guest cannot see their ids).
func BlockDevice(id string) string {
	if dir := testDir(); dir != "" {
		return filepath.Join(dir, "block", id)
	}
	return "/dev/vda"
}
