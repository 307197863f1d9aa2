package confine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestWithin(t *testing.T) {
	tests := []struct {
		dir, path string
		want      bool
	}{
		{"/a", "/a", true},
		{"/a", "/a/b", true},
		{"/a", "/ab", false},
		{"/a/b", "/a", false},
		{"/", "/x", true},
		{"/", "/", true},
	}
	for _, tt := range tests {
		if got := Within(tt.dir, tt.path); got != tt.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tt.dir, tt.path, got, tt.want)
		}
	}
}

// LstatNoSymlinks describes the last name as it is, a symlink too, and
// refuses a symlink on the way to it.
func TestLstatNoSymlinks(t *testing.T) {
	_, dir, _ := hostile(t)
	tests := []struct {
		name string
		path string
		mode fs.FileMode // of a path described
		want []error     // of a path refused
	}{
		{"a file", filepath.Join(dir, "small"), 0, nil},
		{"a directory", filepath.Join(dir, "sub"), fs.ModeDir, nil},
		{"a symlink, last", filepath.Join(dir, "abs"), fs.ModeSymlink, nil},
		{"a FIFO, not opened", filepath.Join(dir, "fifo"), fs.ModeNamedPipe, nil},
		// O_NOFOLLOW|O_DIRECTORY on a last symlink is ENOTDIR.
		{"through a symlink to a directory outside", filepath.Join(dir, "abs", "secret"), 0, []error{syscall.ELOOP, syscall.ENOTDIR}},
		{"through a symlink inside", filepath.Join(dir, "inside", "x"), 0, []error{syscall.ELOOP, syscall.ENOTDIR}},
		{"through a symlink further up", filepath.Join(dir, "abs", "a", "b"), 0, []error{syscall.ELOOP}},
		{"nothing", filepath.Join(dir, "absent"), 0, []error{os.ErrNotExist}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fi, err := LstatNoSymlinks(tt.path)
			if tt.want != nil {
				if err == nil || !slices.ContainsFunc(tt.want, func(e error) bool { return errors.Is(err, e) }) {
					t.Fatalf("LstatNoSymlinks(%q) = %v, %v; want %v", tt.path, fi, err, tt.want)
				}
				return
			}
			if err != nil || fi.Mode().Type() != tt.mode {
				t.Fatalf("LstatNoSymlinks(%q) = %v, %v; want a %v", tt.path, fi, err, tt.mode)
			}
		})
	}
}
