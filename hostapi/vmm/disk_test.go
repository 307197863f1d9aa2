//go:build linux

package vmm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestOpenDisk(t *testing.T) {
	const size = 1 << 20
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.img")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		size       int64
		want       string // "" for success
	}{
		{"regular file of the size", img, size, ""},
		{"a symlink to one", link, size, "is a symbolic link: refused"},
		{"grown", img, size / 2, "1048576 bytes where the sandbox's disk has 524288: refused"},
		{"cut short (libkrun's discard of the last blocks)", img, 2 * size, ""},
		{"a fifo, never blocked on", fifo, size, "not a regular file"},
		{"a directory", dir, size, "is a directory"},
		{"missing", filepath.Join(dir, "none"), size, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := openDisk(tt.path, tt.size)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if fi, err := f.Stat(); err != nil || fi.Size() != tt.size {
					t.Errorf("openDisk(%s, %d): the file has %v bytes (%v), want it extended to the disk's size", tt.path, tt.size, fi.Size(), err)
				}
				return
			}
			var de *DiskError
			if err == nil || !errors.As(err, &de) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("openDisk(%s) = %v, want a DiskError saying %q", tt.path, err, tt.want)
			}
			if f != nil {
				f.Close()
			}
		})
	}
}

func TestBlockUnavailable(t *testing.T) {
	ok := ProbeReport{Library: "/lib/libkrun.so.1", Disks: true}
	doubleWant := "" // the double's disks are loop devices
	if os.Geteuid() != 0 {
		doubleWant = "which needs root"
	}
	tests := []struct {
		name   string
		change func(r *ProbeReport)
		want   string // "" for available
	}{
		{"BLK build of 1.19", func(*ProbeReport) {}, ""},
		{"no BLK", func(r *ProbeReport) { r.Disks = false }, "built without BLK=1"},
		{"before 1.19", func(r *ProbeReport) { r.Missing = []string{"krun_fs_add_overlay_file"} }, "libkrun 1.19 has both"},
		{"not loaded", func(r *ProbeReport) { r.LoadErr = "no libkrun" }, "no libkrun"},
		{"upstream's 1.19", func(r *ProbeReport) { r.StaleShares = "stale" }, "answers EOPNOTSUPP"},
		{"the double", func(r *ProbeReport) { r.StaleShares, r.TestDouble = "stale", true }, doubleWant},
	}
	for _, tt := range tests {
		r := ok
		tt.change(&r)
		err := BlockUnavailable(&r)
		if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// blockSpec makes spec's root a block root over its image tree, with a
// fresh (unformatted) disk of 64 MiB: the runner never reads the disk.
func blockSpec(t *testing.T, spec *Spec) (image, disk string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test double's disks are loop devices, which need root")
	}
	image = spec.Root.Dir
	disk = filepath.Join(filepath.Dir(spec.ConsoleLog), "disk.img")
	if err := os.WriteFile(disk, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	spec.Root = Root{Image: image, Disk: disk, DiskSize: 64 << 20}
	return image, disk
}

// A block root's image tree reaches the guest read-only, with the disk as
// a block device, and the agent's files placed beside the tree, never in
// it.
func TestBlockRootImageReadOnly(t *testing.T) {
	skipIfReal(t)
	spec, dir := shellSpec(t, `touch /written 2>/dev/null || echo read-only; test -b $KRUNBOX_TESTKRUN_DIR/block/root && echo disk; cat /.krunbox/agent.json`)
	image, _ := blockSpec(t, spec)
	spec.Files = []File{{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte("config\n")}}
	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("exit %v: %s\nrunner log: %s", es, readFile(t, spec.ConsoleLog), readFile(t, filepath.Join(dir, LogFile)))
	}
	if got := readFile(t, spec.ConsoleLog); got != "read-only\ndisk\nconfig\n" {
		t.Errorf("the guest saw %q", got)
	}
	for _, p := range []string{"written", ".krunbox"} {
		if _, err := os.Lstat(filepath.Join(image, p)); err == nil {
			t.Errorf("the image tree got %s", p)
		}
	}
}

// An image that has /.krunbox itself, a directory or a link to a host
// directory, still gets krunbox's files beside its tree, which shadow its
// own (as libkrun's overlay entries do): the tree and the link's target
// are left as they were.
func TestBlockRootShadowsTheImagesKrunbox(t *testing.T) {
	for _, link := range []bool{false, true} {
		t.Run(map[bool]string{false: "directory", true: "link"}[link], func(t *testing.T) {
			skipIfReal(t)
			spec, dir := shellSpec(t, `cat /.krunbox/agent.json; ls /.krunbox`)
			image, _ := blockSpec(t, spec)
			target := filepath.Join(image, ".krunbox")
			if link {
				target = t.TempDir()
				if err := os.Symlink(target, filepath.Join(image, ".krunbox")); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(target, "image-file"), []byte("image\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			spec.Files = []File{{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte("config\n")}}
			if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
				t.Fatalf("exit %v: %s\nrunner log: %s", es, readFile(t, spec.ConsoleLog), readFile(t, filepath.Join(dir, LogFile)))
			}
			if got := readFile(t, spec.ConsoleLog); got != "config\nagent.json\n" {
				t.Errorf("the guest saw %q", got)
			}
			ents, err := os.ReadDir(target)
			if err != nil || len(ents) != 1 || ents[0].Name() != "image-file" {
				t.Errorf("the image's /.krunbox (or where it points) holds %v, %v", ents, err)
			}
		})
	}
}

// An image tree without /dev, /proc and /sys (a scratch image's, the test
// image's) boots as a block root: libkrun's init makes them where missing,
// which a read-only root refuses, so the runner gives them as overlay
// directories; without them the double stops as libkrun's init does.
func TestBlockRootWithoutInitMountPoints(t *testing.T) {
	skipIfReal(t)
	spec, dir := shellSpec(t, `test -e /proc/self/status && test -c /dev/null && echo mounted`)
	image, _ := blockSpec(t, spec)
	for _, d := range []string{"dev", "proc", "sys"} {
		if err := os.RemoveAll(filepath.Join(image, d)); err != nil {
			t.Fatal(err)
		}
	}
	if es := wait(t, startVM(t, dir, spec)); es.Code != 0 {
		t.Fatalf("exit %v: %s\nrunner log: %s", es, readFile(t, spec.ConsoleLog), readFile(t, filepath.Join(dir, LogFile)))
	}
	if got := readFile(t, spec.ConsoleLog); got != "mounted\n" {
		t.Errorf("the guest saw %q", got)
	}
	for _, d := range []string{"dev", "proc", "sys"} {
		if _, err := os.Lstat(filepath.Join(image, d)); err == nil {
			t.Errorf("the image tree got /%s", d)
		}
	}
}
