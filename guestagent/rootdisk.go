//go:build linux

package guestagent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/guestagent/vmdev"
)

// diskMount is where the agent mounts a block root's disk: in the guest's
// /dev, the one file system it may write before the switch ("/" is the
// image tree, read-only). It is unmounted (detached) once the overlay is
// the root: the guest sees the disk's content only through the overlay.
const diskMount = "/dev/.krunbox-disk"

// The disk's directories: the overlay's upper and work directories, and
// the mount point of the overlay itself.
const (
	diskUpper  = "upper"
	diskWork   = "work"
	diskMerged = "root"
)

// maxMountinfo bounds what the agent reads of /proc/self/mountinfo, which
// libkrun's init made (a few lines).
const maxMountinfo = 1 << 20

// switchRoot makes the guest's root an overlay of the current root (the
// image tree, read-only) under the disk d's file system, and moves the
// mounts made on the old root (/proc, /sys, /dev, ...) onto it. Only this
// process (and what it starts later) sees the new root: libkrun's init
// keeps the old one.
func switchRoot(d *protocol.RootDisk) error {
	dev := vmdev.BlockDevice(d.ID)
	old, err := os.Open("/")
	if err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	defer old.Close()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("root disk: make mounts private: %w", err)
	}
	if err := os.MkdirAll(diskMount, 0o700); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	// discard: blocks the guest frees are punched out of the host's
	// sparse file (libkrun passes virtio-blk discards on), so the host
	// spends what the guest holds, not what it ever wrote.
	if err := unix.Mount(dev, diskMount, d.FSType, unix.MS_NOATIME, "discard"); err != nil {
		return fmt.Errorf("root disk: mount %s (%s) on %s: %w: the sandbox's disk is damaged or not a file system", dev, d.FSType, diskMount, err)
	}
	for _, dir := range []string{diskUpper, diskWork, diskMerged} {
		if err := os.Mkdir(diskMount+"/"+dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("root disk: %w", err)
		}
	}
	merged := diskMount + "/" + diskMerged
	opts := "lowerdir=/,upperdir=" + diskMount + "/" + diskUpper + ",workdir=" + diskMount + "/" + diskWork
	if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		return fmt.Errorf("root disk: mount the overlay (%s): %w", opts, err)
	}
	mounts, err := topMounts()
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		if mp == "/dev" {
			continue // it holds merged: moved once merged is the root
		}
		if err := moveMount(mp, merged+mp); err != nil {
			return err
		}
	}
	if err := os.Chdir(merged); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("root disk: move the overlay to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("root disk: chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if err := moveMount(fmt.Sprintf("/proc/self/fd/%d/dev", old.Fd()), "/dev"); err != nil {
		return err
	}
	if err := unix.Unmount(diskMount, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("root disk: unmount %s: %w", diskMount, err)
	}
	return nil
}

// moveMount moves the mount at src to dst, made if missing.
func moveMount(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if err := unix.Mount(src, dst, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("root disk: move the mount %s to %s: %w", src, dst, err)
	}
	return nil
}

// topMounts lists the mount points directly below "/" (one path
// component), each once.
func topMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("root disk: %w", err)
	}
	defer f.Close()
	return parseTopMounts(io.LimitReader(f, maxMountinfo))
}

func parseTopMounts(r io.Reader) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == "/" || strings.Count(mp, "/") != 1 || seen[mp] {
			continue
		}
		seen[mp] = true
		out = append(out, mp)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("root disk: read mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
