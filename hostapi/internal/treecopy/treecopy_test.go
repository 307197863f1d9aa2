package treecopy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/testutil/testimage"
)

// tree builds a source tree for a test case.
type tree struct {
	t    *testing.T
	root string
}

func (tr tree) path(rel string) string { return filepath.Join(tr.root, rel) }

func (tr tree) file(rel, body string, mode fs.FileMode) {
	tr.t.Helper()
	p := tr.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		tr.t.Fatal(err)
	}
	tr.chmod(rel, mode)
}

func (tr tree) dir(rel string, mode fs.FileMode) {
	tr.t.Helper()
	if err := os.MkdirAll(tr.path(rel), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	tr.chmod(rel, mode)
}

// chmod sets mode, setuid, setgid and sticky bits included.
func (tr tree) chmod(rel string, mode fs.FileMode) {
	tr.t.Helper()
	if err := os.Chmod(tr.path(rel), mode); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) symlink(target, rel string) {
	tr.t.Helper()
	if err := os.Symlink(target, tr.path(rel)); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) link(old, rel string) {
	tr.t.Helper()
	if err := os.Link(tr.path(old), tr.path(rel)); err != nil {
		tr.t.Fatal(err)
	}
}

func (tr tree) xattr(rel, name, value string) {
	tr.t.Helper()
	if err := unix.Lsetxattr(tr.path(rel), name, []byte(value), 0); err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
			tr.t.Skipf("no user xattrs on this file system: %v", err)
		}
		tr.t.Fatal(err)
	}
}

// mtime sets the access and modification times of rel, a symbolic link
// itself for a link.
func (tr tree) mtime(rel string, tm time.Time) {
	tr.t.Helper()
	ts := unix.NsecToTimespec(tm.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, tr.path(rel), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		tr.t.Fatal(err)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs as root)")
	}
}

func TestCopyPreservesTheTree(t *testing.T) {
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	big := make([]byte, 3<<20+17)
	rand.Read(big)

	tests := []struct {
		name  string
		root  bool // needs root
		build func(tr tree)
		// check makes checks of its own on the copy, beyond the
		// comparison of the two trees every case gets.
		check func(t *testing.T, src, dst string)
	}{
		{name: "file modes", build: func(tr tree) {
			tr.file("plain", "plain", 0o644)
			tr.file("private", "private", 0o600)
			tr.file("empty", "", 0o644)
			tr.file("bin/tool", "#!/bin/sh\n", 0o755)
			tr.file("bin/su", "setuid", 0o755|fs.ModeSetuid)
			tr.file("bin/wall", "setgid", 0o755|fs.ModeSetgid)
			tr.dir("tmp", 0o777|fs.ModeSticky)
			tr.dir("home", 0o750)
		}},
		{name: "read-only directories are filled", build: func(tr tree) {
			tr.file("ro/inner/f", "in a read-only dir", 0o444)
			tr.dir("ro/inner", 0o555)
			tr.dir("ro", 0o500)
		}},
		{name: "large file", build: func(tr tree) {
			tr.file("big", string(big), 0o644)
		}, check: func(t *testing.T, _, dst string) {
			if b, err := os.ReadFile(filepath.Join(dst, "big")); err != nil || !bytes.Equal(b, big) {
				t.Errorf("large file differs (%d bytes, %v)", len(b), err)
			}
		}},
		{name: "symbolic links are copied, not followed", build: func(tr tree) {
			tr.dir("etc", 0o755)
			tr.file("etc/real", "real", 0o644)
			tr.symlink("real", "etc/relative")
			tr.symlink("/etc/passwd", "etc/absolute")
			tr.symlink("/", "etc/host-root")
			tr.symlink("../nowhere", "etc/dangling")
			tr.symlink("etc", "etc-link")
		}},
		{name: "hard links stay links within the copy", build: func(tr tree) {
			tr.file("a", "shared", 0o640)
			tr.link("a", "b")
			tr.dir("sub", 0o755)
			tr.link("a", "sub/c")
			tr.file("other", "shared", 0o640)
		}, check: func(t *testing.T, src, dst string) {
			ino := func(p string) uint64 {
				var st unix.Stat_t
				if err := unix.Lstat(p, &st); err != nil {
					t.Fatal(err)
				}
				return st.Ino
			}
			a := ino(filepath.Join(dst, "a"))
			if ino(filepath.Join(dst, "b")) != a || ino(filepath.Join(dst, "sub/c")) != a {
				t.Error("the copies of a, b and sub/c are not one file")
			}
			if ino(filepath.Join(dst, "other")) == a {
				t.Error("other became a link of a")
			}
			if a == ino(filepath.Join(src, "a")) {
				t.Error("the copy of a is a link to the source")
			}
			if err := os.WriteFile(filepath.Join(dst, "b"), []byte("changed"), 0o640); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(src, "a")); string(b) != "shared" {
				t.Errorf("a write to the copy reached the source: %q", b)
			}
		}},
		{name: "extended attributes", build: func(tr tree) {
			tr.file("bin/su", "su", 0o755)
			tr.xattr("bin/su", OverrideStatXattr, "0:0:4755:file")
			tr.xattr("bin", OverrideStatXattr, "0:0:0755:dir")
			tr.xattr("bin/su", "user.other", "kept too")
		}, check: func(t *testing.T, _, dst string) {
			if v, err := getXattr(filepath.Join(dst, "bin/su"), "user.other"); err != nil || string(v) != "kept too" {
				t.Errorf("user.other = %q, %v", v, err)
			}
		}},
		{name: "times", build: func(tr tree) {
			tr.file("d/f", "f", 0o644)
			tr.symlink("f", "d/l")
			tr.mtime("d/f", old)
			tr.mtime("d/l", old)
			tr.mtime("d", old.Add(time.Hour))
		}},
		{name: "fifo", build: func(tr tree) {
			if err := unix.Mkfifo(tr.path("pipe"), 0o620); err != nil {
				tr.t.Fatal(err)
			}
		}},
		{name: "owners", root: true, build: func(tr tree) {
			tr.file("f", "f", 0o4755)
			tr.dir("d", 0o750)
			tr.symlink("f", "l")
			for rel, id := range map[string]int{"f": 1234, "d": 42, "l": 7} {
				if err := os.Lchown(tr.path(rel), id, id+1); err != nil {
					tr.t.Fatal(err)
				}
			}
			tr.chmod("f", 0o755|fs.ModeSetuid) // chown cleared it
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				requireRoot(t)
			}
			base := t.TempDir()
			src, dst := filepath.Join(base, "src"), filepath.Join(base, "dst")
			if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.build(tree{t, src})
			before := testimage.ReadTree(t, src)

			st, err := Copy(t.Context(), src, dst)
			if err != nil {
				t.Fatal(err)
			}
			if st.Method == "" {
				t.Error("no method reported")
			}
			got := testimage.ReadTree(t, dst)
			for _, d := range testimage.CompareTrees(before, got, os.Geteuid() == 0, true) {
				t.Error("copy: " + d)
			}
			if tt.check != nil {
				tt.check(t, src, dst)
			}
			for _, d := range testimage.CompareTrees(before, testimage.ReadTree(t, src), true, true) {
				t.Error("source changed: " + d)
			}
		})
	}
}

func TestCopyCounts(t *testing.T) {
	src := t.TempDir()
	tr := tree{t, src}
	tr.file("a", "12345", 0o644)
	tr.link("a", "b")
	tr.file("d/c", "123", 0o644)
	tr.symlink("a", "l")
	if err := unix.Mkfifo(tr.path("p"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Copy(t.Context(), src, filepath.Join(t.TempDir(), "dst"))
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{Method: st.Method, Dirs: 2, Files: 2, Symlinks: 1, Others: 1, Hardlinks: 1, Bytes: 8, Cloned: st.Cloned, XattrsSkipped: st.XattrsSkipped}
	if *st != want {
		t.Errorf("stats %+v, want %+v", *st, want)
	}
}

func TestCopyFailures(t *testing.T) {
	src := t.TempDir()
	tree{t, src}.file("f", "x", 0o644)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	exists := t.TempDir()
	tests := []struct {
		name     string
		ctx      context.Context
		src, dst string
		want     error
	}{
		{"destination exists", t.Context(), src, exists, fs.ErrExist},
		{"no source", t.Context(), filepath.Join(src, "missing"), filepath.Join(t.TempDir(), "dst"), fs.ErrNotExist},
		{"cancelled", cancelled, src, filepath.Join(t.TempDir(), "dst"), context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Copy(tt.ctx, tt.src, tt.dst)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// The ownership attribute is never dropped: where it cannot be set, the
// copy fails. Linux allows no user attributes on a symbolic link.
func TestOwnershipXattrIsNotSkipped(t *testing.T) {
	src := t.TempDir()
	tree{t, src}.file("f", "x", 0o644)
	tree{t, src}.xattr("f", OverrideStatXattr, "0:0:0644:file")
	dst := filepath.Join(t.TempDir(), "dst")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dst, "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	c := &copier{ctx: t.Context()}
	err := c.copyXattrs(filepath.Join(src, "f"), link)
	if err == nil || c.stats.XattrsSkipped != 0 {
		t.Fatalf("copying the ownership attribute onto a link: %v, %d skipped; want an error", err, c.stats.XattrsSkipped)
	}
	if !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("error %v, want the kernel's refusal", err)
	}
}
