package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

// TestCopyOutDestination checks how cp picks the host destination (into
// an existing directory, or the name given) and that a DST that is a
// symbolic link is refused, never followed. The agent runs on this host:
// guest paths are host paths.
func TestCopyOutDestination(t *testing.T) {
	a := agenttest.Start(t, nil)
	c := hostapi.NewUnixClient(a.Socket)
	t.Cleanup(func() { c.Close() })
	guest := t.TempDir()
	mustWrite(t, filepath.Join(guest, "tree", "f"), "tree's")
	mustWrite(t, filepath.Join(guest, "file"), "file's")

	tests := []struct {
		name    string
		src     string
		dst     func(t *testing.T, dir, victim string) string
		wantErr string
		want    map[string]string // host paths below dir and their contents
	}{{
		name: "a tree into an existing directory",
		src:  "tree",
		dst: func(t *testing.T, dir, victim string) string {
			mustMkdir(t, filepath.Join(dir, "out"))
			return filepath.Join(dir, "out")
		},
		want: map[string]string{"out/tree/f": "tree's"},
	}, {
		name: "a tree to a new name",
		src:  "tree",
		dst:  func(t *testing.T, dir, victim string) string { return filepath.Join(dir, "new") },
		want: map[string]string{"new/f": "tree's"},
	}, {
		name: "a file into an existing directory, with a trailing slash",
		src:  "file",
		dst: func(t *testing.T, dir, victim string) string {
			mustMkdir(t, filepath.Join(dir, "out"))
			return filepath.Join(dir, "out") + "/"
		},
		want: map[string]string{"out/file": "file's"},
	}, {
		name: "a file over an existing file",
		src:  "file",
		dst: func(t *testing.T, dir, victim string) string {
			mustWrite(t, filepath.Join(dir, "old"), "old")
			return filepath.Join(dir, "old")
		},
		want: map[string]string{"old": "file's"},
	}, {
		name: "a tree to a symlink to the victim directory",
		src:  "tree",
		dst: func(t *testing.T, dir, victim string) string {
			mustSymlink(t, victim, filepath.Join(dir, "link"))
			return filepath.Join(dir, "link")
		},
		wantErr: "symbolic link",
	}, {
		name: "a file to a symlink to the victim directory, with a trailing slash",
		src:  "file",
		dst: func(t *testing.T, dir, victim string) string {
			mustSymlink(t, victim, filepath.Join(dir, "link"))
			return filepath.Join(dir, "link") + "/"
		},
		wantErr: "symbolic link",
	}, {
		name: "a file to a symlink to the victim's file",
		src:  "file",
		dst: func(t *testing.T, dir, victim string) string {
			mustSymlink(t, filepath.Join(victim, "secret"), filepath.Join(dir, "link"))
			return filepath.Join(dir, "link")
		},
		wantErr: "symbolic link",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(t.TempDir(), "victim")
			mustWrite(t, filepath.Join(victim, "secret"), "victim's")
			before := hashDir(t, victim)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err := copyOut(ctx, c, filepath.Join(guest, tt.src), tt.dst(t, dir, victim))
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("copyOut: %v, want an error saying %q", err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Errorf("copyOut: %v", err)
			}
			for p, want := range tt.want {
				if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != want {
					t.Errorf("%s: %q, %v; want %q", p, b, err, want)
				}
			}
			if after := hashDir(t, victim); after != before {
				t.Errorf("the victim directory changed")
			}
		})
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// hashDir hashes a tree: names, modes, times and contents.
func hashDir(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%q %v %d\n", p, fi.Mode(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
