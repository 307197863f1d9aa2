package e2e

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// blockDiskMiB is the disk of the block-root scenarios: the smallest
// krunbox takes, so that filling it is quick in a nested VM too.
const blockDiskMiB = 256

// needBlock skips where block roots cannot be made: the double makes its
// disks loop devices, which needs root; upstream's libkrun (no
// krun_set_virtiofs_cache) fails overlayfs' copy-up from its virtio-fs,
// unless CoherentEnv says the library is krunbox's own.
func (e *env) needBlock() {
	e.t.Helper()
	if e.suite.mode == double && os.Geteuid() != 0 {
		e.t.Skip("the test double's disks are loop devices, which need root")
	}
	if e.suite.stale != "" && os.Getenv(CoherentEnv) != "1" {
		e.t.Skipf("SKIP: block roots need the libkrun krunbox ships (this one: %s); build it with make libkrun and point KRUNBOX_LIBKRUN at it, or set %s=1 to run this anyway", e.suite.stale, CoherentEnv)
	}
}

// diskUsed is what the sandbox's disk image in dir (or the file dir)
// takes on the host, and its size.
func diskUsed(t testing.TB, dir string) (used, size int64) {
	t.Helper()
	p := dir
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		p = filepath.Join(dir, "disk.img")
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512, fi.Size()
}

// testBlockRoot: a sandbox with a block root writes its root to a sparse
// disk of its own, never to the image cache: the changes last across stop
// and start, the guest gets ENOSPC at the disk's size and the sandbox
// works on after it, cp works on the stopped sandbox (through a VM
// booted for it), ls and inspect show the disk's use, and rm removes it.
func testBlockRoot(t *testing.T, e *env) {
	e.needBlock()
	e.pull()
	var imgs []struct{ Rootfs string }
	if err := json.Unmarshal([]byte(e.ok("images", "--json")), &imgs); err != nil || len(imgs) != 1 {
		t.Fatalf("images --json: %v %v", imgs, err)
	}
	before := testimage.ReadTree(t, imgs[0].Rootfs)

	e.ok("create", "--name", "blk", "--root", "block", "--disk", "256MiB", image)
	root, _ := e.inspect("blk")["root"].(map[string]any)
	if root["kind"] != "block" || root["disk_size"] != float64(blockDiskMiB<<20) {
		t.Fatalf("inspect: root %v, want block with a %d MiB disk", root, blockDiskMiB)
	}
	e.ok("start", "blk")
	dir := e.sandboxDir("blk")
	if used, size := diskUsed(t, dir); size != blockDiskMiB<<20 || used > 64<<20 {
		t.Errorf("disk after the first start: %d bytes used of %d, want a sparse %d MiB", used, size, blockDiskMiB)
	}
	e.ok("exec", "blk", "sh", "-c", "echo kept > /root/x; echo more >> /etc/passwd; rm /bin/ls")
	e.ok("stop", "blk")
	e.ok("start", "blk")
	if got := e.ok("exec", "blk", "sh", "-c", "cat /root/x; tail -n 1 /etc/passwd; test -e /bin/ls || echo no-ls"); got != "kept\nmore\nno-ls\n" {
		t.Errorf("root after stop and start: %q", got)
	}

	// ENOSPC at the disk's size, and the sandbox goes on working.
	r := e.krunbox("exec", "blk", "sh", "-c", "dd if=/dev/zero of=/fill bs=1M count=512; echo dd=$?")
	if !strings.Contains(r.stdout+r.stderr, "No space left on device") || strings.Contains(r.stdout, "dd=0") {
		t.Errorf("filling the disk: want ENOSPC: %s", r)
	}
	if used, _ := diskUsed(t, dir); used > (blockDiskMiB+16)<<20 {
		t.Errorf("a full %d MiB disk takes %d MiB on the host", blockDiskMiB, used>>20)
	}
	var ls []struct {
		Name string
		Disk *struct{ Size, Used int64 }
	}
	if err := json.Unmarshal([]byte(e.ok("ls", "-a", "--json")), &ls); err != nil || len(ls) != 1 || ls[0].Disk == nil ||
		ls[0].Disk.Size != blockDiskMiB<<20 || ls[0].Disk.Used < 128<<20 {
		t.Errorf("ls --json: %+v %v, want the full disk's use", ls, err)
	}
	var df struct {
		Sandboxes []struct {
			Name, Root string
			Disk       *struct{ Size, Used int64 }
		}
		DisksUsed, DisksSize, ImagesSize int64
	}
	if err := json.Unmarshal([]byte(e.ok("df", "--json")), &df); err != nil || len(df.Sandboxes) != 1 || df.Sandboxes[0].Root != "block" ||
		df.DisksSize != blockDiskMiB<<20 || df.DisksUsed < 128<<20 || df.DisksUsed > (blockDiskMiB+16)<<20 || df.ImagesSize == 0 {
		// (the full disk's use, not ls's figure to the byte: the running
		// guest's ext4 still commits its journal in between)
		t.Errorf("df --json: %+v %v, want the block root's full disk and the image", df, err)
	}
	e.ok("exec", "blk", "sh", "-c", "rm /fill && sync")
	// ext4 discards the freed blocks after its journal commits them.
	poll.Until(t, "the host file to give back what the guest removed (discard)", time.Minute, func() bool {
		used, _ := diskUsed(t, dir)
		return used <= 64<<20
	})
	if got := e.ok("exec", "blk", "sh", "-c", "echo after > /root/y && cat /root/y"); got != "after\n" {
		t.Errorf("after ENOSPC: %q", got)
	}

	// cp with the sandbox stopped, in and out.
	e.ok("stop", "blk")
	src := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(src, []byte("copied in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ok("cp", src, "blk:/root/in.txt")
	out := filepath.Join(t.TempDir(), "x")
	e.ok("cp", "blk:/root/x", out)
	if b, err := os.ReadFile(out); err != nil || string(b) != "kept\n" {
		t.Errorf("cp out of the stopped sandbox: %q %v", b, err)
	}
	e.ok("start", "blk")
	if got := e.ok("exec", "blk", "cat", "/root/in.txt"); got != "copied in\n" {
		t.Errorf("cp into the stopped sandbox: %q", got)
	}

	for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, imgs[0].Rootfs), true, true) {
		t.Error("image cache changed: " + d)
	}
	e.ok("rm", "-f", "blk")
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory, with its disk, is left: %v", err)
	}
}

// testBlockRootHostile: a block root's disk changed on the host (replaced
// by a symlink, grown, its file system damaged) stops that sandbox from
// starting with an error that says so, never following the link nor
// touching what it points to, and leaves other sandboxes working; a host
// file system short of space refuses the start, saying so.
func testBlockRootHostile(t *testing.T, e *env) {
	e.needBlock()
	e.pull()
	size := int64(blockDiskMiB) << 20
	made := func(name string) string {
		t.Helper()
		e.ok("create", "--name", name, "--root", "block", "--disk", "256MiB", image)
		e.ok("start", name)
		e.ok("stop", name)
		return filepath.Join(e.sandboxDir(name), "disk.img")
	}
	refused := func(name, want string) {
		t.Helper()
		r := e.krunbox("start", name)
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("start %s: want a failure saying %q: %s", name, want, r)
		}
	}

	t.Run("Symlink", func(t *testing.T) {
		disk := made("lnk")
		// A sparse file of the disk's size: any write to it would
		// allocate blocks.
		victim := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(victim, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(victim, size); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(disk); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, disk); err != nil {
			t.Fatal(err)
		}
		refused("lnk", "is a symbolic link: refused")
		if used, got := diskUsed(t, victim); used != 0 || got != size {
			t.Errorf("the link's target was written: %d bytes allocated, size %d", used, got)
		}
		e.ok("rm", "-f", "lnk")
		if _, err := os.Stat(victim); err != nil {
			t.Errorf("rm followed the link: %v", err)
		}
	})
	t.Run("Oversized", func(t *testing.T) {
		disk := made("big")
		if err := os.Truncate(disk, 1<<40); err != nil {
			t.Fatal(err)
		}
		refused("big", "bytes where the sandbox's disk has")
		if err := os.Truncate(disk, size); err != nil {
			t.Fatal(err)
		}
		e.ok("start", "big")
		e.ok("rm", "-f", "big")
	})
	t.Run("Corrupted", func(t *testing.T) {
		disk := made("bad")
		f, err := os.OpenFile(disk, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The primary superblock and the group descriptors after it.
		if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 8192)), 1024); err != nil {
			t.Fatal(err)
		}
		f.Close()
		refused("bad", "the sandbox's disk is damaged or not a file system")
		e.ok("create", "--name", "good", "--root", "block", "--disk", "256MiB", image)
		e.ok("start", "good")
		if got := e.ok("exec", "good", "echo", "fine"); got != "fine\n" {
			t.Errorf("another sandbox: %q", got)
		}
		e.ok("rm", "-f", "bad", "good")
	})
	t.Run("HostFull", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mounting a small file system needs root")
		}
		home := t.TempDir()
		if err := syscall.Mount("tmpfs", home, "tmpfs", 0, "size=256m"); err != nil {
			t.Skipf("mount a tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(home, syscall.MNT_DETACH) })
		small := newEnv(t, e.suite)
		small.home = home
		small.pull()
		small.ok("create", "--name", "full", "--root", "block", "--disk", "256MiB", image)
		r := small.krunbox("start", "full")
		if r.code == 0 || !strings.Contains(r.stderr, "MiB free, less than the 1024 MiB a sandbox with a block root needs") {
			t.Errorf("start on a full host: %s", r)
		}
		if _, err := os.Lstat(filepath.Join(small.sandboxDir("full"), "disk.img")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a disk was made on a full host: %v", err)
		}
	})
}
