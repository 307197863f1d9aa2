package confine

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// hostile makes a tree the way a guest or an image could, next to a
// victim directory outside it, and returns both.
func hostile(t *testing.T) (root *os.Root, dir, victim string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "tree")
	victim = filepath.Join(base, "victim")
	for _, d := range []string{dir, victim, filepath.Join(dir, "sub")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(victim, "secret"), "victim's")
	write(t, filepath.Join(dir, "small"), "hello")
	must(t, os.Symlink(victim, filepath.Join(dir, "abs")))
	must(t, os.Symlink("../victim", filepath.Join(dir, "rel")))
	must(t, os.Symlink(filepath.Join(victim, "secret"), filepath.Join(dir, "secretlink")))
	must(t, os.Symlink("sub", filepath.Join(dir, "inside")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(t, err)
	must(t, f.Truncate(2<<30))
	f.Close()
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	must(t, err)
	t.Cleanup(func() { l.Close() })
	must(t, os.WriteFile(filepath.Join(dir, "new\nline"), []byte("nl"), 0o644))
	root, err = os.OpenRoot(dir)
	must(t, err)
	t.Cleanup(func() { root.Close() })
	return root, dir, victim
}

func write(t *testing.T, p, s string) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(s), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestReadFile(t *testing.T) {
	root, _, _ := hostile(t)
	tests := []struct {
		name    string
		max     int64
		want    string
		wantErr error
	}{
		{name: "small", max: 100, want: "hello"},
		{name: "new\nline", max: 100, want: "nl"},
		{name: "small", max: 4, wantErr: ErrTooLarge},
		{name: "sparse", max: DefaultMaxRead, wantErr: ErrTooLarge},
		{name: "fifo", max: 100, wantErr: ErrNotRegular},
		{name: "sock", max: 100},
		{name: "sub", max: 100, wantErr: ErrNotRegular},
		{name: "secretlink", max: 100},
		{name: "abs/secret", max: 100},
		{name: "rel/secret", max: 100},
		{name: "../victim/secret", max: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadFile(root, tt.name, tt.max)
			if tt.want != "" {
				if err != nil || string(got) != tt.want {
					t.Fatalf("ReadFile = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadFile = %q, want an error", got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("ReadFile: %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestReadFileNoSymlinks(t *testing.T) {
	_, dir, victim := hostile(t)
	if b, err := ReadFileNoSymlinks(filepath.Join(dir, "small"), 10); err != nil || string(b) != "hello" {
		t.Fatalf("plain file: %q, %v", b, err)
	}
	for _, p := range []string{
		filepath.Join(dir, "abs", "secret"),
		filepath.Join(dir, "secretlink"),
		dir + "/inside/../small",
		"relative/path",
	} {
		if b, err := ReadFileNoSymlinks(p, 100); err == nil {
			t.Errorf("ReadFileNoSymlinks(%q) = %q, want an error", p, b)
		}
	}
	if _, err := ReadFileNoSymlinks(filepath.Join(dir, "fifo"), 10); !errors.Is(err, ErrNotRegular) {
		t.Errorf("fifo: %v, want ErrNotRegular", err)
	}
	if b, err := ReadFileNoSymlinks(filepath.Join(victim, "secret"), 100); err != nil || string(b) != "victim's" {
		t.Errorf("victim read directly: %q, %v", b, err)
	}
}

func TestWriteFile(t *testing.T) {
	root, dir, victim := hostile(t)
	// A symlink at the name is replaced, not followed.
	must(t, WriteFile(root, "secretlink", []byte("mine"), 0o640))
	fi, err := os.Lstat(filepath.Join(dir, "secretlink"))
	must(t, err)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
		t.Errorf("secretlink is %v, want a regular 0640 file", fi.Mode())
	}
	// Directories on the way may not lead out.
	for _, name := range []string{"abs/secret", "rel/secret", "../victim/secret", "fifo/x"} {
		if err := WriteFile(root, name, []byte("x"), 0o644); err == nil {
			t.Errorf("WriteFile(%q) succeeded", name)
		}
	}
	// ... but may be resolved inside.
	must(t, WriteFile(root, "inside/f", []byte("in"), 0o644))
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "f")); string(b) != "in" {
		t.Errorf("inside/f: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "secret")); string(b) != "victim's" {
		t.Errorf("victim changed: %q", b)
	}
	ents, _ := os.ReadDir(victim)
	if len(ents) != 1 {
		t.Errorf("victim has %d entries, want 1", len(ents))
	}
}

func TestMkdirAll(t *testing.T) {
	root, dir, victim := hostile(t)
	if err := MkdirAll(root, "abs/x", 0o755, false); err == nil {
		t.Error("MkdirAll through a symlink without replace succeeded")
	}
	must(t, MkdirAll(root, "abs/x/y", 0o755, true))
	fi, err := os.Lstat(filepath.Join(dir, "abs"))
	must(t, err)
	if !fi.IsDir() {
		t.Errorf("abs is %v, want a directory", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "abs", "x", "y")); err != nil {
		t.Error(err)
	}
	must(t, MkdirAll(root, "fifo", 0o755, true))
	must(t, MkdirAll(root, "sub", 0o755, false))
	if err := MkdirAll(root, "../victim/z", 0o755, true); err == nil {
		t.Error("MkdirAll ../victim/z succeeded")
	}
	ents, _ := os.ReadDir(victim)
	if len(ents) != 1 {
		t.Errorf("victim has %d entries, want 1", len(ents))
	}
}

func TestOpenDirNoSymlinks(t *testing.T) {
	_, dir, _ := hostile(t)
	f, err := OpenDirNoSymlinks(filepath.Join(dir, "sub"))
	must(t, err)
	f.Close()
	for _, p := range []string{filepath.Join(dir, "abs"), filepath.Join(dir, "inside"), filepath.Join(dir, "small"), filepath.Join(dir, "fifo")} {
		if f, err := OpenDirNoSymlinks(p); err == nil {
			f.Close()
			t.Errorf("OpenDirNoSymlinks(%q) succeeded", p)
		}
	}
}
