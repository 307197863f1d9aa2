package vmm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/krun"
)

// DiskID names a block root's disk in libkrun's configuration. The guest
// sees its first (and only) disk as /dev/vda.
const DiskID = "root"

// DiskError reports a block root's disk image that the runner refuses:
// not a regular file (a symlink included, never followed), or not the
// size the sandbox was made with.
type DiskError struct {
	Path string
	Err  error
}

func (e *DiskError) Error() string { return fmt.Sprintf("disk image %s: %v", e.Path, e.Err) }

func (e *DiskError) Unwrap() error { return e.Err }

// Hint says what to do.
func (e *DiskError) Hint() string {
	return "the sandbox's disk was changed on the host; remove the sandbox (krunbox rm) and create it again"
}

// initMountPoints gives a read-only image tree the directories libkrun's
// init mounts on (/dev, /proc, /sys) where the tree lacks them, as a
// scratch image's does: init makes them where missing, which a read-only
// root refuses, and the VM would stop before its agent ran. They are
// overlay directories of the root's device: the tree is never written.
func initMountPoints(ctx *krun.Context, lib *krun.Library, image string) error {
	if !lib.Has("krun_fs_add_overlay_dir") {
		return errors.New("a block root needs libkrun's overlay files (libkrun 1.19): its image tree is shared read-only")
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		_, err := os.Lstat(filepath.Join(image, d))
		if err == nil {
			continue
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := ctx.AddOverlayDir(krun.RootTag, d, unix.S_IFDIR|0o755); err != nil {
			return fmt.Errorf("mount point /%s: %w", d, err)
		}
	}
	return nil
}

// openDisk opens a block root's disk image read-write without following a
// symlink, and checks that it is a regular file of at most size bytes. A
// shorter one is extended back to size: libkrun (its imago backend) cuts
// the file short when the guest discards the disk's last blocks (a real
// VM, 2026-12-03: 8 MiB less after a full disk was emptied), and what is
// past the end reads as zeros, as discarded blocks do. A longer one was
// grown by something else and is refused. The descriptor must stay open
// while libkrun uses the image by its path (fdPath), so that what was
// checked is what the guest gets.
func openDisk(path string, size int64) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, &DiskError{Path: path, Err: errors.New("is a symbolic link: refused")}
	}
	if err != nil {
		return nil, &DiskError{Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("not a regular file (%v): refused", fi.Mode().Type())
	case fi.Size() > size:
		err = fmt.Errorf("%d bytes where the sandbox's disk has %d: refused", fi.Size(), size)
	case fi.Size() < size:
		if terr := f.Truncate(size); terr != nil {
			err = fmt.Errorf("extend to the disk's %d bytes: %w", size, terr)
		}
	}
	if err != nil {
		f.Close()
		return nil, &DiskError{Path: path, Err: err}
	}
	return f, nil
}

// CheckBlock checks that the library lib (empty: the default search) can
// give a VM a block root ([BlockUnavailable]), loading it in a child
// process ([Probe]).
func CheckBlock(ctx context.Context, lib string) error {
	r, err := Probe(ctx, lib)
	if err != nil {
		return err
	}
	return BlockUnavailable(r)
}

// BlockUnavailable says why the library that r reports on cannot give a
// VM a block root, or returns nil when it can: it must add disks (a BLK
// build, [krun.DiskFunc]), and share the image tree read-only and place
// the agent beside it as overlay files (libkrun 1.19). libkrunfw's kernels
// of ABI 5 all have virtio-blk, ext4 and overlayfs built in. The test
// double makes each disk a loop device, which needs root.
func BlockUnavailable(r *ProbeReport) error {
	switch {
	case r.LoadErr != "":
		return errors.New(r.LoadErr)
	case !r.Disks:
		return fmt.Errorf("libkrun %s has no disks (it was built without BLK=1: no %s)", r.Library, krun.DiskFunc)
	case slices.Contains(r.Missing, "krun_fs_add_overlay_file") || slices.Contains(r.Missing, "krun_add_virtiofs3"):
		return fmt.Errorf("libkrun %s lacks read-only shares or overlay files (libkrun 1.19 has both)", r.Library)
	case r.StaleShares != "" && !r.TestDouble:
		// krun.ShareCacheFunc marks the libkrun krunbox builds
		// (hack/libkrun), which carries the fix below too.
		return fmt.Errorf("libkrun %s is not the one krunbox ships (it lacks %s): upstream's 1.19 answers EOPNOTSUPP to the "+
			"file-attribute ioctl overlayfs makes when it copies an image file up, so every write to one would fail in the guest "+
			"(hack/libkrun/0002-*.patch fixes it); use the release bundle's libkrun, or make libkrun", r.Library, krun.ShareCacheFunc)
	case r.TestDouble && os.Geteuid() != 0:
		return errors.New("the libkrun test double makes each disk a loop device, which needs root")
	}
	return nil
}
