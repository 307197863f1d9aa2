package testimage

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestFromDirs(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(lower, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(lower, "usr/bin/a"), []byte("aaa"), 0o755))
	must(os.Link(filepath.Join(lower, "usr/bin/a"), filepath.Join(lower, "usr/bin/b")))
	must(os.Symlink("a", filepath.Join(lower, "usr/bin/c")))
	must(os.WriteFile(filepath.Join(upper, "x"), []byte("x"), 0o600))
	for _, p := range []string{"usr", "usr/bin", "usr/bin/a"} { // whatever the umask
		must(os.Chmod(filepath.Join(lower, p), 0o755))
	}

	img, err := FromDirs(lower, upper)
	must(err)
	layers, err := img.Layers()
	must(err)
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2", len(layers))
	}
	type ent struct {
		typ  byte
		link string
		body string
		mode int64
	}
	want := []map[string]ent{
		{
			"usr/":      {typ: tar.TypeDir, mode: 0o755},
			"usr/bin/":  {typ: tar.TypeDir, mode: 0o755},
			"usr/bin/a": {typ: tar.TypeReg, body: "aaa", mode: 0o755},
			"usr/bin/b": {typ: tar.TypeLink, link: "usr/bin/a", mode: 0o755},
			"usr/bin/c": {typ: tar.TypeSymlink, link: "a", mode: 0o777},
		},
		{"x": {typ: tar.TypeReg, body: "x", mode: 0o600}},
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		must(err)
		got := map[string]ent{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			must(err)
			if h.Uid != 0 || h.Gid != 0 {
				t.Errorf("layer %d: %s owned by %d:%d, want root", i, h.Name, h.Uid, h.Gid)
			}
			body, err := io.ReadAll(tr)
			must(err)
			got[h.Name] = ent{typ: h.Typeflag, link: h.Linkname, body: string(body), mode: h.Mode & 0o7777}
		}
		rc.Close()
		if len(got) != len(want[i]) {
			t.Errorf("layer %d: %v, want %v", i, got, want[i])
		}
		for name, w := range want[i] {
			if got[name] != w {
				t.Errorf("layer %d: %s is %+v, want %+v", i, name, got[name], w)
			}
		}
	}
}
