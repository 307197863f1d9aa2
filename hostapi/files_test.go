package hostapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/poll"
)

func TestWriteReadFile(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	for _, size := range []int{0, 1, protocol.MaxChunk - 1, protocol.MaxChunk + 1, 3<<20 + 7} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			data := make([]byte, size)
			rand.NewChaCha8([32]byte{byte(size), byte(size >> 8)}).Read(data)
			name := filepath.Join(dir, fmt.Sprintf("f%d", size))
			if err := c.WriteFile(ctx, name, data, 0o640); err != nil {
				t.Fatal(err)
			}
			onDisk, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(onDisk, data) {
				t.Fatalf("file on disk differs (%d bytes, %v)", len(onDisk), err)
			}
			if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640 (no umask)", fi.Mode())
			}
			got, err := c.ReadFile(ctx, name)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("ReadFile: %d bytes, %v; want %d", len(got), err, size)
			}
		})
	}
}

func TestWriteFileReplacesAtomically(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	os.WriteFile(name, []byte("old"), 0o600)
	os.Link(name, filepath.Join(dir, "hardlink"))
	if err := c.WriteFile(ctx, name, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(name); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	// Replaced, not rewritten: the old inode (the hard link) is untouched,
	// and WriteFile kept the existing mode like os.WriteFile.
	if b, _ := os.ReadFile(filepath.Join(dir, "hardlink")); string(b) != "old" {
		t.Errorf("hard link to the old file now reads %q", b)
	}
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old 0600 kept", fi.Mode())
	}
	assertNoTempFiles(t, dir, "f", "hardlink")
}

func TestAbortedWriteLeavesOldFile(t *testing.T) {
	c, _ := newTestClient(t, nil)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	os.WriteFile(name, []byte("old"), 0o644)

	w, err := c.Create(testContext(t), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(bytes.Repeat([]byte("x"), 3<<20))
	w.Abort()
	if err := w.Close(); err == nil {
		t.Error("Close after Abort succeeded")
	}

	ctx, cancel := context.WithCancel(testContext(t))
	w, err = c.Create(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("partial"))
	cancel()
	if err := w.Close(); err == nil {
		t.Error("Close after cancel succeeded")
	}

	poll.Until(t, "the agent to discard the temporary files", 20*time.Second, func() bool {
		ents, _ := os.ReadDir(dir)
		return len(ents) == 1
	})
	if b, _ := os.ReadFile(name); string(b) != "old" {
		t.Fatalf("content %q after aborted writes, want old", b)
	}
}

func TestWriteOptions(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	write := func(name string, opts *WriteOptions, data string) error {
		w, err := c.Create(ctx, filepath.Join(dir, name), opts)
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, data); err != nil {
			w.Abort()
			return err
		}
		return w.Close()
	}
	if err := write("a/b/c", nil, "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("write under a missing directory: %v, want ErrNotExist", err)
	}
	if err := write("a/b/c", &WriteOptions{MkdirAll: true, Perm: 0o755}, "x"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a/b/c")); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("MkdirAll write: %v", fi)
	}
	if err := write("a/b/c", &WriteOptions{Exclusive: true}, "y"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("exclusive write of an existing file: %v, want ErrExist", err)
	}
	if err := write("a/b/c", &WriteOptions{Append: true}, "yz"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a/b/c")); string(b) != "xyz" {
		t.Errorf("after append: %q", b)
	}
	os.Link(filepath.Join(dir, "a/b/c"), filepath.Join(dir, "link"))
	if err := write("a/b/c", &WriteOptions{InPlace: true, Sync: true, KeepMode: true}, "in place"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "link")); string(b) != "in place" {
		t.Errorf("in-place write did not go to the same inode: link reads %q", b)
	}
	if err := write("a", nil, "x"); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("write over a directory: %v, want EISDIR", err)
	}
	if err := write("a/b/c/d", &WriteOptions{MkdirAll: true}, "x"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("write under a file: %v, want ENOTDIR", err)
	}
	if err := write("setuid", &WriteOptions{Perm: 0o755 | fs.ModeSetuid}, "x"); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "setuid")); fi.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("setuid bit lost: %v", fi.Mode())
	}
}

func TestWriteThroughSymlinkReplacesTarget(t *testing.T) {
	c, _ := newTestClient(t, nil)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "target"), []byte("old"), 0o644)
	os.Symlink("target", filepath.Join(dir, "link"))
	if err := c.WriteFile(testContext(t), filepath.Join(dir, "link"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "link")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("the symlink was replaced: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "target")); string(b) != "new" {
		t.Fatalf("target reads %q", b)
	}
}

func TestOpenRange(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	name := filepath.Join(t.TempDir(), "f")
	os.WriteFile(name, []byte("0123456789"), 0o644)
	for _, tt := range []struct {
		off, n int64
		want   string
	}{{0, 0, "0123456789"}, {3, 0, "3456789"}, {3, 4, "3456"}, {8, 100, "89"}, {20, 0, ""}} {
		f, err := c.OpenRange(ctx, name, tt.off, tt.n)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != tt.want {
			t.Errorf("OpenRange(%d, %d) = %q, %v; want %q", tt.off, tt.n, b, err, tt.want)
		}
	}
	f, err := c.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fi, _ := f.Stat(); fi.Size() != 10 || fi.Name() != "f" || fi.IsDir() {
		t.Errorf("Stat of the open file: %v %v", fi.Name(), fi.Size())
	}
}

func TestCloseBeforeEndOfLargeFile(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	name := filepath.Join(t.TempDir(), "big")
	os.WriteFile(name, make([]byte, 32<<20), 0o644)
	f, err := c.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(f, buf); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := f.Read(buf); err == nil {
		t.Error("read after Close succeeded")
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("connection after closing a file early: %v", err)
	}
}

// TestReadFIFO reads named pipes: opening one never waits for a writer, a
// FIFO nobody writes reads as empty, and cancelling a read that waits for
// data lets the pipe go (its writer sees no reader left).
func TestReadFIFO(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := c.ReadFile(ctx, fifo); err != nil || len(data) != 0 {
		t.Fatalf("ReadFile of a FIFO without writers = %q, %v; want empty", data, err)
	}

	// A writer that keeps the pipe open: opened while a reader of our own
	// holds the other end, which then lets go.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	readCtx, cancel := context.WithCancel(ctx)
	f, err := c.Open(readCtx, fifo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("hello"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(f, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v; want hello", buf, err)
	}
	cancel()
	if _, err := f.Read(buf); !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v, want context.Canceled", err)
	}
	// The agent closes its end: writes fail once no reader is left.
	poll.Until(t, "the agent to let the FIFO go after the read was cancelled", 10*time.Second, func() bool {
		_, err := w.WriteString("x")
		return errors.Is(err, syscall.EPIPE)
	})
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("agent after a cancelled FIFO read: %v", err)
	}
}

func TestReadFileErrors(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	for _, tt := range []struct {
		name   string
		target error
	}{
		{"missing", fs.ErrNotExist},
		{".", syscall.EISDIR},
		{"file/below", syscall.ENOTDIR},
	} {
		_, err := c.ReadFile(ctx, filepath.Join(dir, tt.name))
		var pe *fs.PathError
		if !errors.As(err, &pe) || pe.Op != "open" || pe.Path != filepath.Join(dir, tt.name) || !errors.Is(err, tt.target) {
			t.Errorf("ReadFile(%s) = %v, want a PathError for %v", tt.name, err, tt.target)
		}
	}
}

// EACCES from the guest reads as fs.ErrPermission. The agent runs without
// privileges (as nobody when the tests run as root, as in CI), in a
// directory it may read, so only the file's mode refuses it.
func TestPermissionDenied(t *testing.T) {
	c, _ := newTestClient(t, nil, unprivileged(t)...)
	ctx := testContext(t)
	dir, err := os.MkdirTemp("", "kbperm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	public, secret := filepath.Join(dir, "public"), filepath.Join(dir, "secret")
	os.WriteFile(public, []byte("open"), 0o644)
	os.WriteFile(secret, []byte("closed"), 0o000)
	if data, err := c.ReadFile(ctx, public); err != nil || string(data) != "open" {
		t.Fatalf("ReadFile of a 0644 file beside it: %q, %v", data, err)
	}
	_, err = c.ReadFile(ctx, secret)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Op != "open" || pe.Path != secret || !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("ReadFile of a 0000 file: %v, want a PathError for ErrPermission", err)
	}
}

func TestStatAndLstat(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	os.WriteFile(name, []byte("hello"), 0o640)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	os.Chtimes(name, mtime, mtime)
	os.Symlink("f", filepath.Join(dir, "l"))

	fi, err := c.Stat(ctx, filepath.Join(dir, "l"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name() != "l" || fi.Size() != 5 || fi.Mode() != 0o640 || !fi.ModTime().Equal(mtime) {
		t.Errorf("Stat(l) = %s %d %v %v", fi.Name(), fi.Size(), fi.Mode(), fi.ModTime())
	}
	if sys := fi.Sys().(*FileSys); sys.Uid != uint32(os.Getuid()) || sys.Nlink != 1 {
		t.Errorf("Sys = %+v", sys)
	}
	li, err := c.Lstat(ctx, filepath.Join(dir, "l"))
	if err != nil {
		t.Fatal(err)
	}
	if li.Mode()&fs.ModeSymlink == 0 || li.Sys().(*FileSys).LinkTarget != "f" {
		t.Errorf("Lstat(l) = %v %+v", li.Mode(), li.Sys())
	}
	if di, _ := c.Stat(ctx, dir); di == nil || !di.IsDir() {
		t.Errorf("Stat(dir) = %v", di)
	}
	if _, err := c.Stat(ctx, filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v", err)
	}
	os.Symlink("nowhere", filepath.Join(dir, "dangling"))
	if _, err := c.Stat(ctx, filepath.Join(dir, "dangling")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(dangling) = %v", err)
	}
	if _, err := c.Lstat(ctx, filepath.Join(dir, "dangling")); err != nil {
		t.Errorf("Lstat(dangling) = %v", err)
	}
}

func TestReadDir(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "b"), []byte("12"), 0o644)
	os.Mkdir(filepath.Join(dir, "a"), 0o755)
	os.Symlink("b", filepath.Join(dir, "c"))
	ents, err := c.ReadDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		info, _ := e.Info()
		got = append(got, fmt.Sprintf("%s %v %d", e.Name(), e.Type(), info.Size()))
	}
	want := []string{"a d--------- 4096", "b ---------- 2", "c L--------- 1"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		// Directory sizes vary by file system: compare names and types.
		for i := range got {
			if i >= len(want) || strings.Fields(got[i])[0] != strings.Fields(want[i])[0] || strings.Fields(got[i])[1] != strings.Fields(want[i])[1] {
				t.Fatalf("ReadDir = %v, want %v", got, want)
			}
		}
	}
	if _, err := c.ReadDir(ctx, filepath.Join(dir, "b")); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("ReadDir(file) = %v, want ENOTDIR", err)
	}
	if _, err := c.ReadDir(ctx, filepath.Join(dir, "zz")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir(missing) = %v", err)
	}
}

func TestReadDirLarge(t *testing.T) {
	c, _ := newTestClient(t, nil)
	dir := t.TempDir()
	const n = 5000
	for i := range n {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("file-with-a-long-name-%05d", i)), nil, 0o644)
	}
	ents, err := c.ReadDir(testContext(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n || ents[0].Name() != "file-with-a-long-name-00000" || ents[n-1].Name() != fmt.Sprintf("file-with-a-long-name-%05d", n-1) {
		t.Fatalf("%d entries", len(ents))
	}
}

func TestDirectoryOperations(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	p := func(s string) string { return filepath.Join(dir, s) }

	if err := c.MkdirAll(ctx, p("x/y/z"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := c.MkdirAll(ctx, p("x/y/z"), 0o750); err != nil {
		t.Errorf("MkdirAll of an existing directory: %v", err)
	}
	if err := c.Mkdir(ctx, p("x"), 0o755); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Mkdir(existing) = %v, want ErrExist", err)
	}
	if err := c.Mkdir(ctx, p("q/r"), 0o755); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Mkdir without parent = %v, want ErrNotExist", err)
	}
	os.WriteFile(p("x/file"), nil, 0o644)
	if err := c.MkdirAll(ctx, p("x/file/sub"), 0o755); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("MkdirAll under a file = %v, want ENOTDIR", err)
	}
	if err := c.Remove(ctx, p("x")); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		t.Errorf("Remove(non-empty) = %v, want ENOTEMPTY", err)
	}
	if err := c.Remove(ctx, p("x/file")); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(ctx, p("x/file")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Remove(missing) = %v", err)
	}
	if err := c.RemoveAll(ctx, p("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("x still there after RemoveAll: %v", err)
	}
	if err := c.RemoveAll(ctx, p("x")); err != nil {
		t.Errorf("RemoveAll(missing) = %v, want nil", err)
	}
	if err := c.RemoveAll(ctx, "/"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RemoveAll(/) = %v, want EINVAL", err)
	}
}

func TestRenameSymlinkReadlinkChmod(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	dir := t.TempDir()
	p := func(s string) string { return filepath.Join(dir, s) }
	os.WriteFile(p("a"), []byte("A"), 0o644)
	os.WriteFile(p("b"), []byte("B"), 0o644)

	if err := c.Rename(ctx, p("a"), p("b")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p("b")); string(b) != "A" {
		t.Errorf("after rename b = %q", b)
	}
	err := c.Rename(ctx, p("a"), p("c"))
	var le *os.LinkError
	if !errors.As(err, &le) || le.Old != p("a") || le.New != p("c") || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Rename(missing) = %v, want an os.LinkError for ErrNotExist", err)
	}
	if err := c.Symlink(ctx, "b", p("s")); err != nil {
		t.Fatal(err)
	}
	if err := c.Symlink(ctx, "b", p("s")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Symlink over an existing file = %v", err)
	}
	if target, err := c.Readlink(ctx, p("s")); err != nil || target != "b" {
		t.Errorf("Readlink = %q, %v", target, err)
	}
	if _, err := c.Readlink(ctx, p("b")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Readlink(not a link) = %v, want EINVAL", err)
	}
	if err := c.Chmod(ctx, p("s"), 0o600|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p("b")); fi.Mode() != 0o600|fs.ModeSticky {
		t.Errorf("after Chmod through the link: %v", fi.Mode())
	}
	if err := c.Chmod(ctx, p("nope"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Chmod(missing) = %v", err)
	}
}

func TestRelativePathsUseWorkdir(t *testing.T) {
	work := t.TempDir()
	c, _ := newTestClient(t, &protocol.Config{Workdir: work})
	ctx := testContext(t)
	if err := c.WriteFile(ctx, "rel.txt", []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(work, "rel.txt")); err != nil || string(b) != "r" {
		t.Fatalf("relative write landed elsewhere: %q, %v", b, err)
	}
	if fi, err := c.Stat(ctx, "rel.txt"); err != nil || fi.Size() != 1 {
		t.Fatalf("Stat(rel) = %v, %v", fi, err)
	}
}

func assertNoTempFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("directory holds %v, want %v", names, want)
	}
}
