package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func openTree(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.Open(dir)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func TestOpenAt(t *testing.T) {
	_, dir, _ := hostile(t)
	d := openTree(t, dir)
	tests := []struct {
		name     string
		wantType fs.FileMode // of what was opened
		wantErr  error
	}{
		{name: "small"},
		{name: "new\nline"},
		{name: "sub", wantType: fs.ModeDir},
		{name: "fifo", wantType: fs.ModeNamedPipe}, // opened, without blocking
		{name: "sparse"},
		{name: "abs", wantErr: ErrSymlink},
		{name: "inside", wantErr: ErrSymlink},
		{name: "secretlink", wantErr: ErrSymlink},
		{name: "sock", wantErr: ErrNotRegular},
		{name: "missing", wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := OpenAt(d, tt.name)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("OpenAt: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			fi, err := f.Stat()
			must(t, err)
			if fi.Mode().Type() != tt.wantType {
				t.Errorf("opened a %v, want type %v", fi.Mode(), tt.wantType)
			}
			if f.Name() != filepath.Join(dir, tt.name) {
				t.Errorf("Name() = %q", f.Name())
			}
		})
	}
	if _, err := OpenDirAt(d, "inside"); !errors.Is(err, ErrSymlink) {
		t.Errorf("OpenDirAt of a link to a directory: %v, want ErrSymlink", err)
	}
	if _, err := OpenDirAt(d, "small"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("OpenDirAt of a file: %v, want ENOTDIR", err)
	}
	if target, err := ReadlinkAt(d, "abs"); err != nil || filepath.Base(target) != "victim" {
		t.Errorf("ReadlinkAt: %q, %v", target, err)
	}
	if typ, err := TypeAt(d, "abs"); err != nil || typ != fs.ModeSymlink {
		t.Errorf("TypeAt of a link: %v, %v", typ, err)
	}
}

func TestOpenParent(t *testing.T) {
	_, dir, _ := hostile(t)
	for _, tt := range []struct{ p, dir, name string }{
		{filepath.Join(dir, "small"), dir, "small"},
		{filepath.Join(dir, "abs") + "/", dir, "abs"},
		{dir + "/.", filepath.Dir(dir), "tree"}, // cleaned first
		{"..", "..", "."},
		{".", ".", "."},
		{"/", "/", "."},
		// The user's own path is resolved once, links included.
		{filepath.Join(dir, "abs", "secret"), filepath.Join(dir, "abs"), "secret"},
	} {
		f, name, err := OpenParent(tt.p)
		if err != nil {
			t.Errorf("OpenParent(%q): %v", tt.p, err)
			continue
		}
		if f.Name() != tt.dir || name != tt.name {
			t.Errorf("OpenParent(%q) = %q, %q; want %q, %q", tt.p, f.Name(), name, tt.dir, tt.name)
		}
		f.Close()
	}
	if _, _, err := OpenParent(filepath.Join(dir, "small", "x")); err == nil {
		t.Error("OpenParent below a file succeeded")
	}
}

func TestMkdirAtAndReplaceAt(t *testing.T) {
	_, dir, victim := hostile(t)
	d := openTree(t, dir)
	// A link where a directory goes is replaced, not followed.
	for _, name := range []string{"abs", "inside", "new"} {
		sub, err := MkdirAt(d, name, 0o700)
		if err != nil {
			t.Fatalf("MkdirAt(%q): %v", name, err)
		}
		f, err := CreateAt(sub, "made")
		must(t, err)
		f.Close()
		sub.Close()
		if fi, err := os.Lstat(filepath.Join(dir, name)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v, %v; want a directory", name, fi, err)
		}
	}
	// An existing directory is taken as it is.
	sub, err := MkdirAt(d, "sub", 0o700)
	must(t, err)
	sub.Close()
	if _, err := MkdirAt(d, "small", 0o700); err == nil {
		t.Error("MkdirAt over a file succeeded")
	}
	// A link where a file goes is replaced, not followed; a planted
	// name cannot be created over.
	err = ReplaceAt(d, "secretlink", func(tmp string) error {
		f, err := CreateAt(d, tmp)
		if err != nil {
			return err
		}
		f.WriteString("mine")
		return f.Close()
	})
	must(t, err)
	if b, err := os.ReadFile(filepath.Join(dir, "secretlink")); err != nil || string(b) != "mine" {
		t.Errorf("secretlink: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "secretlink")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("secretlink is not a regular file: %v, %v", fi, err)
	}
	if _, err := CreateAt(d, "inside"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateAt over an entry: %v, want ErrExist", err)
	}
	must(t, ReplaceAt(d, "link", func(tmp string) error { return SymlinkAt("small", d, tmp) }))
	if target, err := os.Readlink(filepath.Join(dir, "link")); err != nil || target != "small" {
		t.Errorf("link: %q, %v", target, err)
	}
	// A failed replace leaves nothing behind.
	if err := ReplaceAt(d, "sub", func(tmp string) error { return SymlinkAt("small", d, tmp) }); err == nil {
		t.Error("ReplaceAt over a non-empty directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".tmp" {
			t.Errorf("left behind: %q", e.Name())
		}
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "secret")); string(b) != "victim's" {
		t.Errorf("victim changed: %q", b)
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 1 {
		t.Errorf("victim holds %d entries, want 1", len(entries))
	}
}
