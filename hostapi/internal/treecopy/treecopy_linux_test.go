package treecopy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// On a file system that cannot clone (ext4, tmpfs), the copy says it
// copied the data.
func TestCopyWithoutReflinks(t *testing.T) {
	src := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(src, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC && fs.Type != unix.TMPFS_MAGIC {
		t.Skipf("the temporary directory is on a file system (magic %#x) that may clone", fs.Type)
	}
	tree{t, src}.file("f", "data", 0o644)
	st, err := Copy(t.Context(), src, filepath.Join(t.TempDir(), "dst"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Method != Plain || st.Cloned != 0 {
		t.Errorf("method %s, %d cloned; want a plain copy", st.Method, st.Cloned)
	}
}

// On btrfs, every file is a reflink: the copy shares the source's data.
func TestCopyReflinks(t *testing.T) {
	requireRoot(t)
	mkfs, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		t.Skip("needs mkfs.btrfs (btrfs-progs) to make a file system that clones")
	}
	img := filepath.Join(t.TempDir(), "btrfs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 128<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.btrfs: %v\n%s", err, out)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a loop device here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	src := filepath.Join(mnt, "src")
	tr := tree{t, src}
	tr.file("a", "aaaa", 0o644)
	tr.file("d/b", "bbbb", 0o600)
	tr.link("a", "d/a2")
	st, err := Copy(t.Context(), src, filepath.Join(mnt, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Method != Reflink || st.Cloned != 2 || st.Files != 2 {
		t.Errorf("stats %+v, want 2 files, both cloned (reflink)", *st)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "dst/d/b")); err != nil || string(b) != "bbbb" {
		t.Errorf("cloned file: %q, %v", b, err)
	}
}
