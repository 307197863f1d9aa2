package confine

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func TestOpenRootNoSymlinks(t *testing.T) {
	_, dir, _ := hostile(t)
	root, err := OpenRootNoSymlinks(filepath.Join(dir, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	root.Close()
	tests := []struct {
		name string
		path string
		want []error
	}{
		// O_NOFOLLOW|O_DIRECTORY on a last symlink is ENOTDIR.
		{"a symlink to a directory outside", filepath.Join(dir, "abs"), []error{syscall.ELOOP, syscall.ENOTDIR}},
		{"a relative symlink out", filepath.Join(dir, "rel"), []error{syscall.ELOOP, syscall.ENOTDIR}},
		{"a symlink to a directory inside", filepath.Join(dir, "inside"), []error{syscall.ELOOP, syscall.ENOTDIR}},
		{"a symlink on the way", dir + "/abs/.", []error{syscall.ELOOP}},
		{"a FIFO", filepath.Join(dir, "fifo"), []error{syscall.ENOTDIR}},
		{"a file", filepath.Join(dir, "small"), []error{syscall.ENOTDIR}},
		{"nothing", filepath.Join(dir, "absent"), []error{os.ErrNotExist}},
		{"a relative path", "tree/sub", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, err := OpenRootNoSymlinks(tt.path)
			if err == nil {
				root.Close()
				t.Fatalf("OpenRootNoSymlinks(%q) succeeded", tt.path)
			}
			if tt.want != nil && !slices.ContainsFunc(tt.want, func(e error) bool { return errors.Is(err, e) }) {
				t.Fatalf("OpenRootNoSymlinks(%q) = %v, want %v", tt.path, err, tt.want)
			}
		})
	}
}
