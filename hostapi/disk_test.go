package hostapi

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"golang.org/x/sys/unix"
)

// makeDisk formats a sparse file: what it takes on the host and how long
// it takes grow little with the disk's size.
func TestMakeDiskIsSparse(t *testing.T) {
	if _, err := Mke2fs(); err != nil {
		t.Skip(err)
	}
	for _, size := range []int64{MinDiskMiB << 20, DefaultDiskMiB << 20, 1 << 40} {
		dir := t.TempDir()
		start := time.Now()
		if err := makeDisk(t.Context(), dir, size); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		fi, err := os.Lstat(filepath.Join(dir, diskFile))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != size || allocated(fi) > 32<<20 || took > 10*time.Second {
			t.Errorf("a %d MiB disk: %d bytes, %d MiB allocated, made in %v", size>>20, fi.Size(), allocated(fi)>>20, took)
		}
		if _, err := os.Lstat(filepath.Join(dir, diskPartial)); err == nil {
			t.Error("the partial disk is left")
		}
	}
}

// A Host whose libkrun has no disks refuses a block root, saying why,
// before it makes anything.
func TestBlockRootUnavailable(t *testing.T) {
	h, ref := testHost(t, WithLibkrun(testkrun.Build(t, "-DTESTKRUN_NO_BLK")))
	_, err := h.Create(t.Context(), Config{Image: ref, Root: RootBlock})
	var be *BlockUnavailableError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "built without BLK=1") || !strings.Contains(be.Hint(), "root =") {
		t.Fatalf("Create: %v, want a BlockUnavailableError", err)
	}
	if sbs, _ := h.List(); len(sbs) != 0 {
		t.Errorf("a sandbox was made: %v", sbs)
	}
}

func TestDiskSizeValidated(t *testing.T) {
	for _, tt := range []struct {
		mib  int
		want string
	}{
		{0, ""}, // the default
		{MinDiskMiB, ""},
		{MinDiskMiB - 1, "disk 255 MiB: want 256 MiB to"},
		{MaxDiskMiB + 1, "want 256 MiB to 16777216 MiB"},
	} {
		c := Config{Image: "alpine", DiskMiB: tt.mib}.withDefaults()
		err := c.validate()
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("disk %d MiB: %v, want %q", tt.mib, err, tt.want)
		}
	}
}

// A block root's sandbox records its disk's size at create; Disk reports
// it, and what the disk takes once made; other roots have no disk.
func TestSandboxDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test double's disks are loop devices, which need root")
	}
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Root: RootBlock, DiskMiB: 512})
	d, err := sb.Disk()
	if err != nil || d == nil || d.Size != 512<<20 || d.Used == 0 || d.Used > 64<<20 {
		t.Errorf("Disk() = %+v, %v; want 512 MiB, a few MiB used", d, err)
	}
	if r := sb.Root(); r.Kind != RootBlock || r.DiskSize != 512<<20 {
		t.Errorf("Root() = %+v", r)
	}
	ov := started(t, h, Config{Image: ref, Root: RootOverlay})
	if d, err := ov.Disk(); d != nil || err != nil {
		t.Errorf("an overlay root's Disk() = %+v, %v; want none", d, err)
	}
}

// Mke2fs passes over a BusyBox mke2fs first in PATH (Alpine, initramfs
// images such as the real-VM tier's L1), which rejects makeDisk's options.
func TestMke2fsSkipsBusyBox(t *testing.T) {
	want, err := Mke2fs()
	if err != nil {
		t.Skip(err)
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox to stand for its mke2fs")
	}
	dir := t.TempDir()
	if err := os.Symlink(busybox, filepath.Join(dir, "mke2fs")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	got, err := Mke2fs()
	if err != nil || got == filepath.Join(dir, "mke2fs") {
		t.Fatalf("Mke2fs with BusyBox's first in PATH: %q, %v; want e2fsprogs' (%s)", got, err, want)
	}
	// With only BusyBox's, the error says what it found and what to install.
	saved := mke2fsNames
	t.Cleanup(func() { mke2fsNames = saved })
	mke2fsNames = nil
	t.Setenv("PATH", dir)
	if _, err := Mke2fs(); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "mke2fs")) || !strings.Contains(err.Error(), "e2fsprogs") {
		t.Fatalf("Mke2fs with only BusyBox's: %v, want an error naming it and e2fsprogs", err)
	}
}

// A block root starts while its file system has DiskMinHostFree available,
// however large its disk, saying at Info (never as a warning on every
// start's stderr) that the disk can outgrow it; below that it is refused.
func TestCheckHostSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs as the sandboxes' file system needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1100m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	var logs syncbuf.Buffer
	h, err := NewHost(WithDirs(Dirs{State: dir, Cache: t.TempDir()}),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{host: h, name: "sb", dir: dir}

	if err := s.checkHostSpace(DefaultDiskMiB << 20); err != nil {
		t.Fatalf("1100 MiB free, 16 GiB disk: %v, want a start", err)
	}
	if l := logs.String(); strings.Contains(l, "level=WARN") || !strings.Contains(l, "level=INFO") || !strings.Contains(l, "can grow past the host's free space") {
		t.Errorf("log of a disk larger than the free space: %q, want one INFO line and no warning", l)
	}

	// 200 MiB written: about 900 MiB left, below DiskMinHostFree.
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 200<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	err = s.checkHostSpace(MinDiskMiB << 20)
	var hs *HostSpaceError
	if !errors.As(err, &hs) || hs.Available >= DiskMinHostFree || hs.Dir != dir {
		t.Fatalf("about 900 MiB free: %v, want a *HostSpaceError below %d bytes for %s", err, int64(DiskMinHostFree), dir)
	}
	if !strings.Contains(err.Error(), "less than the 1024 MiB") || !strings.Contains(hs.Hint(), "krunbox df") {
		t.Errorf("refusal: %q (hint %q)", err, hs.Hint())
	}
}
