package hostapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/victim"
)

// The guest's hostile moves are played by the test on the host tree the
// agent (a host process here: guest paths are host paths) works on, at a
// chosen request: hookedClient puts a proxy between client and agent that
// calls hook with each frame the client sends, before the agent gets it.

func hookedClient(t *testing.T, hook func(protocol.Frame)) *Client {
	t.Helper()
	return proxiedClient(t, hook, nil)
}

// proxiedClient is hookedClient, with reply, when not nil, called with
// each frame the agent sends, to change it before the client gets it.
func proxiedClient(t *testing.T, hook, reply func(protocol.Frame)) *Client {
	t.Helper()
	a := agenttest.Start(t, nil)
	dir, err := os.MkdirTemp("", "kbp") // short: a unix socket path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("unix", filepath.Join(dir, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			cc, err := l.Accept()
			if err != nil {
				return
			}
			ac, err := net.Dial("unix", a.Socket)
			if err != nil {
				cc.Close()
				return
			}
			go func() {
				defer cc.Close()
				if reply == nil {
					io.Copy(cc, ac)
					return
				}
				for {
					f, err := protocol.ReadFrame(ac)
					if err != nil {
						return
					}
					reply(f)
					if _, err := cc.Write(protocol.AppendFrame(nil, f.Header, f.Body)); err != nil {
						return
					}
				}
			}()
			go func() {
				defer ac.Close()
				for {
					f, err := protocol.ReadFrame(cc)
					if err != nil {
						return
					}
					if hook != nil {
						hook(f)
					}
					if _, err := ac.Write(protocol.AppendFrame(nil, f.Header, f.Body)); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := NewUnixClient(filepath.Join(dir, "p.sock"))
	t.Cleanup(func() { c.Close() })
	return c
}

// requestPath is the path of a file request frame, "" for other frames.
func requestPath(f protocol.Frame) (protocol.Type, string) {
	var r struct {
		Path string `json:"path"`
	}
	switch f.Type {
	case protocol.TypeMkdir, protocol.TypeReadDir, protocol.TypeReadFile, protocol.TypeWriteFile, protocol.TypeStat:
		if protocol.Decode(f.Body, &r) == nil {
			return f.Type, r.Path
		}
	}
	return f.Type, ""
}

// onRequest returns a hook that runs do once, when the client first sends
// a request of type typ for path p; the test fails if that never happens.
func onRequest(t *testing.T, typ protocol.Type, p string, do func()) func(protocol.Frame) {
	var done atomic.Bool
	t.Cleanup(func() {
		if !done.Load() {
			t.Errorf("no %s request for %s came: the hook never ran", typ, p)
		}
	})
	return func(f protocol.Frame) {
		if ft, fp := requestPath(f); ft == typ && fp == p && done.CompareAndSwap(false, true) {
			do()
		}
	}
}

// noSecrets fails when anything under root holds the victim's content.
func noSecrets(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("victim's")) {
				t.Errorf("%s holds the victim's data", p)
			}
		}
		return nil
	})
}

// hookMust reports err from a hook, which runs in the proxy's goroutine.
func hookMust(t *testing.T, err error) {
	if err != nil {
		t.Errorf("hook: %v", err)
	}
}

func mustT(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCopyInHostile(t *testing.T) {
	tests := []struct {
		name string
		// setup makes the source tree src (victim is the victim
		// directory) and returns a hook, or nil.
		setup func(t *testing.T, src, dst, victim string) func(protocol.Frame)
		// top is the path copied, relative to src's parent ("src" when
		// empty).
		top   string
		check func(t *testing.T, dst, victim string)
	}{{
		name: "a directory swapped for a symlink while the copy runs",
		setup: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
			mustT(t, os.WriteFile(filepath.Join(src, "d", "mine"), []byte("mine"), 0o644))
			// Once d was seen as a directory (the copy makes it in the
			// guest), the guest puts a link to the victim in its place.
			return onRequest(t, protocol.TypeMkdir, filepath.Join(dst, "d"), func() {
				hookMust(t, os.Rename(filepath.Join(src, "d"), filepath.Join(src, "d.old")))
				hookMust(t, os.Symlink(victim, filepath.Join(src, "d")))
			})
		},
		check: func(t *testing.T, dst, victim string) {
			if _, err := os.Lstat(filepath.Join(dst, "d", "secret")); err == nil {
				t.Error("the victim's secret was copied through the swapped-in link")
			}
			if b, err := os.ReadFile(filepath.Join(dst, "d", "mine")); err != nil || string(b) != "mine" {
				t.Errorf("d/mine: %q, %v; want what d held when opened", b, err)
			}
		},
	}, {
		name: "a file swapped for a symlink while the copy runs",
		setup: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(src, 0o755))
			mustT(t, os.WriteFile(filepath.Join(src, "f"), []byte("mine"), 0o644))
			return onRequest(t, protocol.TypeMkdir, dst, func() {
				hookMust(t, os.Remove(filepath.Join(src, "f")))
				hookMust(t, os.Symlink(filepath.Join(victim, "secret"), filepath.Join(src, "f")))
			})
		},
		check: func(t *testing.T, dst, victim string) {
			if target, err := os.Readlink(filepath.Join(dst, "f")); err != nil || target != filepath.Join(victim, "secret") {
				t.Errorf("f: %q, %v; want the link itself", target, err)
			}
		},
	}, {
		name: "symlinks to the victim already in the tree",
		setup: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(src, 0o755))
			mustT(t, os.Symlink(victim, filepath.Join(src, "abs")))
			mustT(t, os.Symlink("../victim", filepath.Join(src, "rel")))
			return nil
		},
		check: func(t *testing.T, dst, victim string) {
			if target, err := os.Readlink(filepath.Join(dst, "abs")); err != nil || target != victim {
				t.Errorf("abs: %q, %v", target, err)
			}
			if target, err := os.Readlink(filepath.Join(dst, "rel")); err != nil || target != "../victim" {
				t.Errorf("rel: %q, %v", target, err)
			}
		},
	}, {
		name: "SRC itself a symlink to the victim: the link is copied",
		top:  "link",
		setup: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.Symlink(victim, filepath.Join(filepath.Dir(src), "link")))
			return nil
		},
		check: func(t *testing.T, dst, victim string) {
			if target, err := os.Readlink(dst); err != nil || target != victim {
				t.Errorf("dst: %q, %v; want a link to the victim", target, err)
			}
		},
	}, {
		name: "FIFOs, sockets and names with newlines",
		setup: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(src, 0o755))
			mustT(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
			mustT(t, os.WriteFile(filepath.Join(src, "late"), []byte("file"), 0o644))
			l, err := net.Listen("unix", filepath.Join(src, "sock"))
			mustT(t, err)
			t.Cleanup(func() { l.Close() })
			mustT(t, os.WriteFile(filepath.Join(src, "new\nline"), []byte("nl"), 0o644))
			mustT(t, os.Mkdir(filepath.Join(src, "dir\nwith\nnewlines"), 0o755))
			mustT(t, os.WriteFile(filepath.Join(src, "dir\nwith\nnewlines", "f"), []byte("f"), 0o644))
			// A file that becomes a FIFO after the copy started: no
			// writer ever comes.
			return onRequest(t, protocol.TypeMkdir, dst, func() {
				hookMust(t, os.Remove(filepath.Join(src, "late")))
				hookMust(t, syscall.Mkfifo(filepath.Join(src, "late"), 0o644))
			})
		},
		check: func(t *testing.T, dst, victim string) {
			for _, name := range []string{"fifo", "sock", "late"} {
				if _, err := os.Lstat(filepath.Join(dst, name)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s was copied: %v", name, err)
				}
			}
			if b, err := os.ReadFile(filepath.Join(dst, "new\nline")); err != nil || string(b) != "nl" {
				t.Errorf("new\\nline: %q, %v", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(dst, "dir\nwith\nnewlines", "f")); err != nil || string(b) != "f" {
				t.Errorf("dir\\nwith\\nnewlines/f: %q, %v", b, err)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			src, dst := filepath.Join(base, "src"), filepath.Join(t.TempDir(), "dst")
			v := victim.New(t)
			victim := v.Path
			// A victim next to src too, for relative links.
			mustT(t, os.Symlink(victim, filepath.Join(base, "victim")))
			c := hookedClient(t, tt.setup(t, src, dst, victim))
			top := src
			if tt.top != "" {
				top = filepath.Join(base, tt.top)
			}
			if err := c.CopyIn(testContext(t), top, dst); err != nil {
				t.Fatal(err)
			}
			tt.check(t, dst, victim)
			noSecrets(t, dst)
			v.Check(t, "after the copy")
		})
	}
}

// TestCopyInSparseFile copies a 2 GiB sparse file: as its data, in
// bounded time and memory.
func TestCopyInSparseFile(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 2 GiB")
	}
	c, _ := newTestClient(t, nil)
	src := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(src)
	mustT(t, err)
	mustT(t, f.Truncate(2<<30))
	f.Close()
	dst := filepath.Join(t.TempDir(), "copy")
	// A deadline of its own: writing 2 GiB takes a while on a busy host.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	if err := c.CopyIn(ctx, src, dst); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dst); err != nil {
		t.Error(err)
	} else if fi.Size() != 2<<30 {
		t.Errorf("the copy: %d bytes, want 2 GiB", fi.Size())
	}
}

func TestCopyOutHostile(t *testing.T) {
	tests := []struct {
		name string
		// prepare makes what the host destination dst holds before the
		// copy of the guest tree src (see below) to dst, and returns a
		// hook, or nil.
		prepare func(t *testing.T, src, dst, victim string) func(protocol.Frame)
		wantErr string
		check   func(t *testing.T, dst string)
	}{{
		name: "DST a symlink to the victim",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.Symlink(victim, dst))
			return nil
		},
		wantErr: "symbolic link",
	}, {
		name: "a symlink below DST to the victim where a directory goes",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.Mkdir(dst, 0o755))
			mustT(t, os.Symlink(victim, filepath.Join(dst, "d")))
			return nil
		},
		check: func(t *testing.T, dst string) {
			checkCopied(t, dst)
		},
	}, {
		name: "a symlink below DST to the victim where a file goes",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(filepath.Join(dst, "d"), 0o755))
			mustT(t, os.Symlink(filepath.Join(victim, "secret"), filepath.Join(dst, "d", "f")))
			return nil
		},
		check: func(t *testing.T, dst string) {
			checkCopied(t, dst)
		},
	}, {
		name: "a symlink below DST to another directory of DST",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(filepath.Join(dst, "other"), 0o755))
			mustT(t, os.Symlink("other", filepath.Join(dst, "d")))
			return nil
		},
		check: func(t *testing.T, dst string) {
			checkCopied(t, dst)
			if entries, _ := os.ReadDir(filepath.Join(dst, "other")); len(entries) != 0 {
				t.Errorf("written through a link into other: %v", entries)
			}
		},
	}, {
		name: "symlinks planted at the names of temporary files",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(filepath.Join(dst, "d", "other"), 0o755))
			mustT(t, os.WriteFile(filepath.Join(dst, "d", "other", "target"), []byte("keep"), 0o644))
			for _, name := range []string{".f.krunbox-copy", ".link.krunbox-link"} {
				mustT(t, os.Symlink("other/target", filepath.Join(dst, "d", name)))
			}
			return nil
		},
		check: func(t *testing.T, dst string) {
			checkCopied(t, dst)
			if b, _ := os.ReadFile(filepath.Join(dst, "d", "other", "target")); string(b) != "keep" {
				t.Errorf("written through a planted link: %q", b)
			}
		},
	}, {
		name: "a directory of DST swapped for a symlink while the copy runs",
		prepare: func(t *testing.T, src, dst, victim string) func(protocol.Frame) {
			mustT(t, os.MkdirAll(filepath.Join(dst, "d"), 0o755))
			// When the copy lists the guest's d, it has made the host's.
			return onRequest(t, protocol.TypeReadDir, filepath.Join(src, "d"), func() {
				hookMust(t, os.Rename(filepath.Join(dst, "d"), filepath.Join(dst, "d.old")))
				hookMust(t, os.Symlink(victim, filepath.Join(dst, "d")))
			})
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The guest's tree: d/f, d/link -> f, a FIFO.
			src := filepath.Join(t.TempDir(), "guest")
			mustT(t, os.MkdirAll(filepath.Join(src, "d"), 0o750))
			mustT(t, os.WriteFile(filepath.Join(src, "d", "f"), []byte("guest's"), 0o640))
			mustT(t, os.Symlink("f", filepath.Join(src, "d", "link")))
			mustT(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
			dst := filepath.Join(t.TempDir(), "dst")
			v := victim.New(t)
			victim := v.Path
			c := hookedClient(t, tt.prepare(t, src, dst, victim))
			err := c.CopyOut(testContext(t), src, dst)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("CopyOut: %v, want an error saying %q", err, tt.wantErr)
			case tt.wantErr == "" && err != nil:
				t.Errorf("CopyOut: %v", err)
			}
			if tt.check != nil {
				tt.check(t, dst)
			}
			v.Check(t, "after the copy")
		})
	}
}

// checkCopied checks the copy of the guest tree of TestCopyOutHostile.
func checkCopied(t *testing.T, dst string) {
	t.Helper()
	for name, want := range map[string]fs.FileMode{"d": fs.ModeDir | 0o750, "d/f": 0o640} {
		switch fi, err := os.Lstat(filepath.Join(dst, name)); {
		case err != nil:
			t.Error(err)
		case fi.Mode() != want:
			t.Errorf("%s: mode %v, want %v", name, fi.Mode(), want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "d", "f")); err != nil || string(b) != "guest's" {
		t.Errorf("d/f: %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "d", "link")); err != nil || target != "f" {
		t.Errorf("d/link: %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the FIFO was copied: %v", err)
	}
}

// TestCopyOutBadGuestNames has the guest list "." and ".." as entries of
// a directory (its directories "z" and "zz", renamed in the agent's
// answer, at the same length): the copy fails and writes nothing beside
// its destination.
func TestCopyOutBadGuestNames(t *testing.T) {
	for _, name := range []string{".", ".."} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "guest")
			from := strings.Repeat("z", len(name))
			mustT(t, os.MkdirAll(filepath.Join(src, from), 0o755))
			mustT(t, os.WriteFile(filepath.Join(src, from, "planted"), []byte("x"), 0o644))
			c := proxiedClient(t, nil, func(f protocol.Frame) {
				if f.Type == protocol.TypeData {
					copy(f.Body, bytes.ReplaceAll(f.Body, []byte(`"name":"`+from+`"`), []byte(`"name":"`+name+`"`)))
				}
			})
			parent := t.TempDir()
			err := c.CopyOut(testContext(t), src, filepath.Join(parent, "dst"))
			if err == nil || !strings.Contains(err.Error(), "bad entry name") {
				t.Errorf("CopyOut: %v, want a bad entry name", err)
			}
			entries, err := os.ReadDir(parent)
			mustT(t, err)
			for _, e := range entries {
				if e.Name() != "dst" {
					t.Errorf("the copy wrote %q beside its destination", e.Name())
				}
			}
		})
	}
}
