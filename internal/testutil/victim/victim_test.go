package victim

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestChanges(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(dir string) error
	}{
		{"content", func(d string) error { return os.WriteFile(filepath.Join(d, "secret"), []byte("pwned\n"), 0o600) }},
		{"same size", func(d string) error {
			return os.WriteFile(filepath.Join(d, "secret"), []byte("the victim's secreT\n"), 0o600)
		}},
		{"mode", func(d string) error { return os.Chmod(filepath.Join(d, "secret"), 0o644) }},
		{"time", func(d string) error {
			return os.Chtimes(filepath.Join(d, "sub/key"), time.Now(), time.Now().Add(time.Hour))
		}},
		{"new file", func(d string) error { return os.WriteFile(filepath.Join(d, "pwned"), nil, 0o600) }},
		{"removed", func(d string) error { return os.Remove(filepath.Join(d, ".ssh/authorized_keys")) }},
		{"link", func(d string) error {
			os.Remove(filepath.Join(d, "link"))
			return os.Symlink("sub/key", filepath.Join(d, "link"))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := New(t)
			if c := v.Changes(t); len(c) != 0 {
				t.Fatalf("changes before any: %v", c)
			}
			if err := tt.change(v.Path); err != nil {
				t.Fatal(err)
			}
			if c := v.Changes(t); len(c) == 0 {
				t.Errorf("a change of %s went unseen", tt.name)
			}
		})
	}
}
