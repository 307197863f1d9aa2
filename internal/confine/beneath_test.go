package confine

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenBeneath(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	os.Symlink(outside, filepath.Join(dir, "link"))
	os.Symlink("b", filepath.Join(dir, "a/inner"))
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, open := range []struct {
		name string
		fn   func(*os.File, string, int, os.FileMode) (*os.File, error)
	}{{"OpenBeneath", OpenBeneath}, {"walk", openBeneathWalk}} {
		t.Run(open.name, func(t *testing.T) {
			tests := []struct {
				name    string
				wantErr error
			}{
				{"a/b/new-" + open.name, nil},
				{"link/x-" + open.name, unix.ELOOP},
				{"a/inner/y-" + open.name, unix.ELOOP},
				{"../z-" + open.name, unix.EXDEV},
			}
			for _, tt := range tests {
				f, err := open.fn(d, tt.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
				if tt.wantErr == nil {
					if err != nil {
						t.Errorf("%s: %v", tt.name, err)
						continue
					}
					fi, _ := f.Stat()
					f.Close()
					if fi.Mode().Perm() != 0o640&^0o022 && fi.Mode().Perm() != 0o640 {
						t.Errorf("%s: mode %v", tt.name, fi.Mode())
					}
					continue
				}
				if err == nil {
					f.Close()
				}
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("%s: %v, want %v", tt.name, err, tt.wantErr)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("a file was made outside: %v", ents)
			}
		})
	}
}
