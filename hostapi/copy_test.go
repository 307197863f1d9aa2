package hostapi

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// writeTree makes a tree with files of several modes, a large file, a
// symbolic link, a read-only directory and a FIFO.
func writeTree(t *testing.T, root string) []byte {
	t.Helper()
	big := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB: many frames
	files := []struct {
		path string
		data []byte
		mode fs.FileMode
	}{
		{"a", []byte("a"), 0o640},
		{"x.sh", []byte("#!/bin/sh\n"), 0o755},
		{"sub/big", big, 0o600},
		{"ro/inside", []byte("in"), 0o644},
	}
	for _, f := range files {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
	}
	if err := os.Symlink("sub/big", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "ro"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "ro"), 0o755) })
	return big
}

func checkTree(t *testing.T, root string, big []byte) {
	t.Helper()
	tree := testimage.ReadTree(t, root)
	for p, mode := range map[string]fs.FileMode{"a": 0o640, "x.sh": 0o755, "sub": 0o755, "sub/big": 0o600, "ro": 0o555, "ro/inside": 0o644} {
		if n, ok := tree[p]; !ok || n.Mode != mode {
			t.Errorf("%s: %v, want mode %v", p, n, mode)
		}
	}
	if n := tree["link"]; n.Type != "symlink" || n.Link != "sub/big" {
		t.Errorf("link: %v", n)
	}
	if _, ok := tree["fifo"]; ok {
		t.Error("a FIFO was copied")
	}
	if b, err := os.ReadFile(filepath.Join(root, "sub/big")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("sub/big: %d bytes, %v", len(b), err)
	}
}

// The test agent runs on this host: guest paths are host paths.

func TestCopyInAndOut(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	src := filepath.Join(t.TempDir(), "src")
	big := writeTree(t, src)

	in := filepath.Join(t.TempDir(), "in")
	if err := c.CopyIn(ctx, src, in); err != nil {
		t.Fatal(err)
	}
	checkTree(t, in, big)
	// Again onto the copy: files are replaced, directories merged.
	os.WriteFile(filepath.Join(src, "a"), []byte("changed"), 0o640)
	if err := c.CopyIn(ctx, src, in); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(in, "a")); string(b) != "changed" {
		t.Errorf("a after a second copy: %q", b)
	}
	os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o640)

	out := filepath.Join(t.TempDir(), "out")
	if err := c.CopyOut(ctx, src, out); err != nil {
		t.Fatal(err)
	}
	checkTree(t, out, big)

	// Single files and links, both ways.
	if err := c.CopyIn(ctx, filepath.Join(src, "x.sh"), filepath.Join(in, "y.sh")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(in, "y.sh")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("a file copied in: %v, %v", fi, err)
	}
	if err := c.CopyOut(ctx, filepath.Join(src, "link"), filepath.Join(out, "link2")); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(out, "link2")); err != nil || target != "sub/big" {
		t.Errorf("a link copied out: %q, %v", target, err)
	}
	if err := c.CopyOut(ctx, filepath.Join(src, "missing"), filepath.Join(out, "m")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("copy out of a missing file: %v", err)
	}
}

func TestCopyOutDropsSetIDBits(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	src := filepath.Join(t.TempDir(), "suid")
	if err := os.WriteFile(src, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(src, 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := c.CopyOut(ctx, src, dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode() != 0o755 {
		t.Errorf("mode of a set-id file copied out: %v, %v; want 0755", fi.Mode(), err)
	}
}
