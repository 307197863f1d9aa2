package hostapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Sizes of a block root's disk (Config.DiskMiB). The disk is a sparse
// file: its size bounds what the guest can write to its root (it then
// gets ENOSPC), and the host file takes only what the guest wrote.
const (
	// DefaultDiskMiB, 16 GiB, holds a language toolchain, its caches and
	// a build's output; a sandbox costs nothing of it until its guest
	// writes.
	DefaultDiskMiB = 16 << 10
	// MinDiskMiB leaves room for ext4's journal and metadata.
	MinDiskMiB = 256
	// MaxDiskMiB is ext4's comfortable range, 16 TiB.
	MaxDiskMiB = 16 << 20
)

// DiskMinHostFree is the free space a block-root sandbox needs on the host
// file system of its disk to start, 1 GiB: the guest's writes to its
// sparse disk take host space as they come, and a host file system that
// fills up fails them with I/O errors in the guest and the host's own
// programs with ENOSPC. Below it, Start refuses with a *HostSpaceError.
const DiskMinHostFree = 1 << 30

// diskFile is a block root's disk image in the sandbox's directory, and
// diskPartial the image being made, renamed to diskFile once formatted.
const (
	diskFile    = "disk.img"
	diskPartial = "disk.img.partial"
)

// mke2fsNames are where mke2fs is looked for besides PATH: the sbin
// folders a user's PATH may lack, and Homebrew's e2fsprogs (keg-only).
var mke2fsNames = []string{
	"/usr/sbin/mke2fs", "/sbin/mke2fs",
	"/opt/homebrew/opt/e2fsprogs/sbin/mke2fs", "/usr/local/opt/e2fsprogs/sbin/mke2fs",
}

// Mke2fs returns the mke2fs program of e2fsprogs that formats block roots'
// disks, or an error saying how to install it. A BusyBox mke2fs (PATH's
// first on Alpine and in initramfs images) makes ext2 only and takes none
// of the options makeDisk passes: it is passed over.
func Mke2fs() (string, error) {
	var candidates []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.IsAbs(dir) {
			candidates = append(candidates, filepath.Join(dir, "mke2fs"))
		}
	}
	candidates = append(candidates, mke2fsNames...)
	var other string
	for _, p := range candidates {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if isE2fsprogs(p) {
			return p, nil
		}
		if other == "" {
			other = p
		}
	}
	hint := "install e2fsprogs (apt-get install e2fsprogs, dnf install e2fsprogs, apk add e2fsprogs)"
	if runtime.GOOS == "darwin" {
		hint = "install e2fsprogs (brew install e2fsprogs)"
	}
	if other != "" {
		return "", fmt.Errorf("no mke2fs of e2fsprogs, which formats block roots' disks (%s is another, such as BusyBox's): %s", other, hint)
	}
	return "", fmt.Errorf("no mke2fs, which formats block roots' disks: %s", hint)
}

// isE2fsprogs tells whether the mke2fs at p is e2fsprogs': its -V names
// the EXT2FS library (BusyBox's refuses -V).
func isE2fsprogs(p string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "-V").CombinedOutput()
	return err == nil && bytes.Contains(out, []byte("EXT2FS Library"))
}

// makeDisk makes a block root's disk at path: a sparse file of size bytes
// formatted as ext4 by mke2fs, in user space, before any guest sees it.
// mke2fs writes only the file system's metadata (lazy inode tables and
// journal: the guest kernel initialises them), so the time and host space
// it takes grow little with size. It is made under a temporary name, so
// an interrupted one is made again at the next start.
func makeDisk(ctx context.Context, dir string, size int64) error {
	mke2fs, err := Mke2fs()
	if err != nil {
		return err
	}
	partial, final := filepath.Join(dir, diskPartial), filepath.Join(dir, diskFile)
	if err := os.Remove(partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove an interrupted disk: %w", err)
	}
	f, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("make the disk: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// -m 0: no blocks reserved for root, whom the guest's processes
		// usually are: the disk's size is the guest's bound. No discard:
		// the file is sparse already.
		cmd := exec.CommandContext(ctx, mke2fs, "-q", "-F", "-t", "ext4", "-m", "0", "-L", "krunbox-root",
			"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", partial)
		if out, cerr := cmd.CombinedOutput(); cerr != nil {
			err = fmt.Errorf("%s: %w: %s", mke2fs, cerr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(partial, final)
	}
	if err != nil {
		os.Remove(partial)
		return fmt.Errorf("make the disk: %w", err)
	}
	return nil
}

// DiskInfo is a block-root sandbox's disk.
type DiskInfo struct {
	// Size is the disk's size in bytes: the most the guest can write.
	Size int64 `json:"size"`
	// Used is what its file takes on the host: what the guest wrote
	// (the file is sparse). 0 before the first start.
	Used int64 `json:"used"`
}

// Disk returns the sandbox's disk, or nil when its root is not a block
// root. It looks at the file's own metadata, never at what it holds.
func (s *Sandbox) Disk() (*DiskInfo, error) {
	r := s.Root()
	if r.Kind != RootBlock {
		return nil, nil
	}
	d := &DiskInfo{Size: r.DiskSize}
	fi, err := os.Lstat(s.path(diskFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return d, nil
	case err != nil:
		return nil, fmt.Errorf("disk of %s: %w", s.name, err)
	}
	d.Used = allocated(fi)
	return d, nil
}

// HostSpaceError reports a host file system too full for a block-root
// sandbox to start.
type HostSpaceError struct {
	Dir       string
	Available int64
}

func (e *HostSpaceError) Error() string {
	return fmt.Sprintf("the host file system of %s has %d MiB free, less than the %d MiB a sandbox with a block root needs to start",
		e.Dir, e.Available>>20, DiskMinHostFree>>20)
}

// Hint says what to do.
func (e *HostSpaceError) Hint() string {
	return "free space on the host ('krunbox df' shows what sandboxes and images take; 'krunbox rm', 'krunbox prune' remove them)"
}

// checkHostSpace refuses to start a block root whose disk's file system
// has less than DiskMinHostFree available, and logs (at Info) when the
// disk could outgrow what is available. Not a warning: a sparse disk of
// the default size outgrows a laptop's free space as a rule, and the
// refusal above is the bound; a warning on every start would be noise on
// every krunbox run's stderr (seen on the real-VM tier, 2026-12-03).
func (s *Sandbox) checkHostSpace(size int64) error {
	dir := s.path(".")
	avail, err := availableSpace(dir)
	if err != nil {
		return fmt.Errorf("free space of %s: %w", dir, err)
	}
	if avail < DiskMinHostFree {
		return &HostSpaceError{Dir: dir, Available: avail}
	}
	var used int64
	if fi, err := os.Lstat(s.path(diskFile)); err == nil {
		used = allocated(fi)
	}
	if size-used > avail {
		s.host.log.Info("the sandbox's disk can grow past the host's free space: when the host file system is full, the guest's writes fail",
			"sandbox", s.name, "disk_mib", size>>20, "used_mib", used>>20, "host_free_mib", avail>>20)
	}
	return nil
}

// blockDisk returns the disk of a block root, made at its first start.
func (s *Sandbox) blockDisk(ctx context.Context) (string, error) {
	size := s.Root().DiskSize
	if err := s.checkHostSpace(size); err != nil {
		return "", err
	}
	disk := s.path(diskFile)
	if _, err := os.Lstat(disk); err == nil {
		return disk, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	start := time.Now()
	if err := makeDisk(ctx, s.path("."), size); err != nil {
		return "", err
	}
	s.host.log.Debug("disk made", "sandbox", s.name, "mib", size>>20, "took", time.Since(start).Round(time.Millisecond))
	return disk, nil
}
