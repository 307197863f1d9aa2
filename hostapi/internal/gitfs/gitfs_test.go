package gitfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/confine"
)

// What a guest can plant in a .git directory: links out, a FIFO, an
// alternates file. Nothing leads out, nothing blocks.
func TestConfined(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.MkdirAll(filepath.Join(dir, "objects/info"), 0o755)
	os.WriteFile(filepath.Join(dir, "objects/info/alternates"), []byte(outside+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "abs-link"))
	os.Symlink("../"+filepath.Base(outside)+"/secret", filepath.Join(dir, "rel-link"))
	os.Symlink(outside, filepath.Join(dir, "refs"))
	syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644)
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if fh, err := f.Open("HEAD"); err != nil {
		t.Errorf("HEAD: %v", err)
	} else {
		b, _ := io.ReadAll(fh)
		fh.Close()
		if string(b) != "ref: refs/heads/main\n" {
			t.Errorf("HEAD = %q", b)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, name := range []string{"abs-link", "rel-link", "refs/secret", "../" + filepath.Base(outside) + "/secret", outside + "/secret"} {
			if fh, err := f.Open(name); err == nil {
				fh.Close()
				t.Errorf("%s opened", name)
			}
		}
		if _, err := f.Open("fifo"); !errors.Is(err, confine.ErrNotRegular) {
			t.Errorf("fifo: %v, want ErrNotRegular", err)
		}
		if _, err := f.Open("objects/info/alternates"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("alternates: %v, want it absent", err)
		}
		if _, err := f.Create("refs/heads/x"); err == nil {
			t.Error("created a file through the refs symlink")
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("blocked")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("outside holds %d entries, want the secret alone", len(ents))
	}
	// Writes stay inside, made atomically by rename.
	tmp, err := f.TempFile("objects/pack", "tmp_")
	if err != nil {
		t.Fatal(err)
	}
	tmp.Write([]byte("obj"))
	tmp.Close()
	if err := f.Rename(tmp.Name(), "objects/ab/cdef"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "objects/ab/cdef")); err != nil || string(b) != "obj" {
		t.Errorf("written object: %q, %v", b, err)
	}
}
