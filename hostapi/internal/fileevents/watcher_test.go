package fileevents

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// recorder collects the batches a watcher delivers.
type recorder struct {
	mu      sync.Mutex
	batches [][]protocol.FileEvent
}

func (r *recorder) deliver(_ context.Context, evs []protocol.FileEvent) error {
	r.mu.Lock()
	r.batches = append(r.batches, evs)
	r.mu.Unlock()
	return nil
}

// events returns every event delivered so far, as "op path" strings
// ("move oldpath path" for a move).
func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, b := range r.batches {
		for _, e := range b {
			s := string(e.Op) + " "
			if e.OldPath != "" {
				s += e.OldPath + " "
			}
			out = append(out, s+e.Path)
		}
	}
	return out
}

// waitFor waits until every one of want has been delivered.
func (r *recorder) waitFor(t *testing.T, want ...string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.events()
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %q never came; got %q", missing, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type fixture struct {
	host string // the share's host directory
	w    *Watcher
	rec  *recorder
	log  *syncbuf.Buffer
	stop func() error
}

// start watches a new share, mounted at /w in the "guest".
func start(t *testing.T, lim Limits, setup func(host string)) *fixture {
	t.Helper()
	host := t.TempDir()
	if setup != nil {
		setup(host)
	}
	lb := &syncbuf.Buffer{}
	w, err := New([]Share{{HostPath: host, GuestPath: "/w"}}, lim, slog.New(slog.NewTextHandler(lb, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{host: host, w: w, rec: &recorder{}, log: lb}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, f.rec.deliver) }()
	var once sync.Once
	var runErr error
	f.stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { f.stop() })
	return f
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestWatchRecursive(t *testing.T) {
	f := start(t, Limits{}, func(host string) { mkdir(t, filepath.Join(host, "old/sub")) })
	if f.w.Dirs() != 3 {
		t.Fatalf("watching %d directories, want 3 (the root, old, old/sub)", f.w.Dirs())
	}
	// A directory existing at the start is watched.
	write(t, filepath.Join(f.host, "old/sub/f"), "x")
	f.rec.waitFor(t, "create /w/old/sub/f", "modify /w/old/sub/f")

	// A new tree made at once: what it holds when the watch comes is
	// reported as created, and it is watched from then on.
	mkdir(t, filepath.Join(f.host, "new/a/b"))
	write(t, filepath.Join(f.host, "new/a/b/inside"), "x")
	f.rec.waitFor(t, "create /w/new", "create /w/new/a", "create /w/new/a/b", "create /w/new/a/b/inside")
	write(t, filepath.Join(f.host, "new/a/b/later"), "x")
	f.rec.waitFor(t, "create /w/new/a/b/later")
	if f.w.Dirs() != 6 {
		t.Errorf("watching %d directories, want 6", f.w.Dirs())
	}

	// A removed tree is forgotten.
	if err := os.RemoveAll(filepath.Join(f.host, "new")); err != nil {
		t.Fatal(err)
	}
	f.rec.waitFor(t, "delete_dir /w/new")
	if f.w.Dirs() != 3 {
		t.Errorf("watching %d directories after the removal, want 3", f.w.Dirs())
	}
}

func rename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// waitDirs waits until the watcher watches n directories.
func (f *fixture) waitDirs(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.w.Dirs() != n {
		if time.Now().After(deadline) {
			t.Fatalf("watching %d directories, want %d", f.w.Dirs(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWatchRename(t *testing.T) {
	f := start(t, Limits{}, func(host string) {
		mkdir(t, filepath.Join(host, "dir/sub"))
		write(t, filepath.Join(host, "dir/sub/f"), "x")
		write(t, filepath.Join(host, "file"), "x")
		mkdir(t, filepath.Join(host, "other"))
	})
	h := func(rel string) string { return filepath.Join(f.host, rel) }
	// One move each, for a file and for a directory (not a delete and a
	// create, nor the directory's tree). Every event is known once the
	// last one asked for came: the batches are delivered in order.
	rename(t, h("file"), h("renamed"))
	f.rec.waitFor(t, "move /w/file /w/renamed")
	rename(t, h("dir"), h("moved"))
	f.rec.waitFor(t, "move /w/dir /w/moved")
	// The moved directory and the one below it are watched under their
	// new paths.
	write(t, h("moved/top"), "x")
	f.rec.waitFor(t, "create /w/moved/top", "modify /w/moved/top")
	write(t, h("moved/sub/g"), "x")
	got := f.rec.waitFor(t, "create /w/moved/sub/g", "modify /w/moved/sub/g")
	want := []string{"move /w/file /w/renamed", "move /w/dir /w/moved", "create /w/moved/top", "modify /w/moved/top", "create /w/moved/sub/g", "modify /w/moved/sub/g"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if f.w.Dirs() != 4 {
		t.Errorf("watching %d directories, want 4 (the root, other, moved, moved/sub)", f.w.Dirs())
	}

	// Deeper, twice: every path below follows.
	rename(t, h("moved"), h("other/deep"))
	f.rec.waitFor(t, "move /w/moved /w/other/deep")
	if err := os.Chmod(h("other/deep/sub/g"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.rec.waitFor(t, "attrib /w/other/deep/sub/g")
	if err := os.Remove(h("other/deep/top")); err != nil {
		t.Fatal(err)
	}
	f.rec.waitFor(t, "delete /w/other/deep/top")
	// Over an empty directory, which is no longer watched.
	mkdir(t, h("other/empty"))
	f.rec.waitFor(t, "create /w/other/empty")
	f.waitDirs(t, 5)
	if err := unix.Rename(h("other/deep"), h("other/empty")); err != nil { // os.Rename refuses
		t.Fatal(err)
	}
	f.rec.waitFor(t, "move /w/other/deep /w/other/empty")
	f.waitDirs(t, 4)
	write(t, h("other/empty/sub/h"), "x")
	f.rec.waitFor(t, "create /w/other/empty/sub/h")

	// Out of the shares: a delete, and nothing more is watched there.
	outside := t.TempDir()
	rename(t, h("other/empty"), filepath.Join(outside, "deep"))
	f.rec.waitFor(t, "delete_dir /w/other/empty")
	f.waitDirs(t, 2)
	write(t, filepath.Join(outside, "deep/sub/secret"), "x")
	// Into the shares from outside: a create, with the tree it brings.
	rename(t, filepath.Join(outside, "deep"), h("in"))
	got = f.rec.waitFor(t, "create /w/in", "create /w/in/sub", "create /w/in/sub/secret")
	for _, e := range got {
		if strings.Contains(e, "/w/other/empty/sub/secret") {
			t.Errorf("a change out of the shares was reported: %q", got)
		}
	}
	write(t, h("in/sub/later"), "x")
	f.rec.waitFor(t, "create /w/in/sub/later")
	f.waitDirs(t, 4)
}

func TestWatchRenameExcluded(t *testing.T) {
	host := t.TempDir()
	mkdir(t, filepath.Join(host, "d/sub"))
	w, err := New([]Share{{HostPath: host, GuestPath: "/w", Exclude: []string{filepath.Join(host, "x"), filepath.Join(host, "y/sub")}}}, Limits{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, rec.deliver) }()
	defer func() { cancel(); <-done }()
	f := &fixture{host: host, w: w, rec: rec}

	// Renamed to where a directory below it is excluded: that one is no
	// longer watched.
	rename(t, filepath.Join(host, "d"), filepath.Join(host, "y"))
	rec.waitFor(t, "move /w/d /w/y")
	f.waitDirs(t, 2)
	// Renamed to an excluded path: a move, and nothing watched there.
	rename(t, filepath.Join(host, "y"), filepath.Join(host, "x"))
	rec.waitFor(t, "move /w/y /w/x")
	f.waitDirs(t, 1)
	write(t, filepath.Join(host, "x/f"), "x")
	write(t, filepath.Join(host, "x/sub/f"), "x")
	write(t, filepath.Join(host, "end"), "x")
	got := rec.waitFor(t, "create /w/end")
	for _, e := range got {
		if strings.Contains(e, "/w/x/") {
			t.Errorf("a change in an excluded directory was reported: %q", got)
		}
	}
}

// TestRenamedFrom checks renamedFrom against fsnotify's real events, so
// that a change of how fsnotify shows a rename's old name fails it.
func TestRenamedFrom(t *testing.T) {
	tests := []struct {
		name     string
		old, new string // below the watched directory; old "" for a create
		outside  bool   // old is outside the watched directory
	}{
		{"plain", "a", "b", false},
		{"quotes and arrows", `a" ← "x`, `b ← "y"`, false},
		{"newline and spaces", "a\nb  c", " d\t", false},
		{"control and invalid UTF-8", "a\x01\xff", "b\xfe\u2190", false},
		{"a create", "", "new", false},
		{"from outside", "a", "b", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, other := t.TempDir(), t.TempDir()
			fsw, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer fsw.Close()
			if err := fsw.Add(dir); err != nil {
				t.Fatal(err)
			}
			from, to := filepath.Join(dir, tt.old), filepath.Join(dir, tt.new)
			if tt.outside {
				from = filepath.Join(other, tt.old)
			}
			want := from
			if tt.old == "" || tt.outside {
				want = ""
			}
			if tt.old == "" {
				write(t, to, "x")
			} else {
				write(t, from, "x")
				rename(t, from, to)
			}
			for {
				select {
				case ev := <-fsw.Events:
					if ev.Name != to || !ev.Has(fsnotify.Create) {
						continue
					}
					if got := renamedFrom(ev); got != want {
						t.Errorf("renamedFrom(%v) = %q, want %q", ev, got, want)
					}
					return
				case err := <-fsw.Errors:
					t.Fatal(err)
				case <-time.After(10 * time.Second):
					t.Fatalf("no create of %q came", to)
				}
			}
		})
	}
}

func TestWatchCoalescesBurst(t *testing.T) {
	f := start(t, Limits{Window: 200 * time.Millisecond}, func(host string) { write(t, filepath.Join(host, "f"), "0") })
	p := filepath.Join(f.host, "f")
	for i := range 100 {
		write(t, p, fmt.Sprint(i))
	}
	write(t, filepath.Join(f.host, "tmp"), "x")
	os.Remove(filepath.Join(f.host, "tmp"))
	write(t, filepath.Join(f.host, "end"), "x")
	got := f.rec.waitFor(t, "modify /w/f", "create /w/end")
	if n := strings.Count(strings.Join(got, "\n"), "modify /w/f"); n > 2 {
		t.Errorf("100 writes gave %d modify events, want them coalesced: %q", n, got)
	}
	if slices.Contains(got, "create /w/tmp") || slices.Contains(got, "delete /w/tmp") {
		t.Errorf("a file created and removed within the window was reported: %q", got)
	}
}

func TestWatchBatchBound(t *testing.T) {
	f := start(t, Limits{MaxPaths: 10}, nil)
	for i := range 50 {
		write(t, filepath.Join(f.host, fmt.Sprint(i)), "x")
	}
	f.rec.waitFor(t, "modify /w")
	if got := f.rec.events(); slices.Contains(got, "create /w/0") {
		t.Errorf("an overflowing batch reported paths: %q", got)
	}
	for i := range 50 {
		write(t, filepath.Join(f.host, fmt.Sprint("again", i)), "x")
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(strings.Join(f.rec.events(), "\n"), "modify /w") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the second burst gave no modify of the root: %q", f.rec.events())
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Once the burst is over, batches are ordinary again.
	write(t, filepath.Join(f.host, "end"), "x")
	f.rec.waitFor(t, "create /w/end")
	if n := strings.Count(f.log.String(), "paths (or"); n != 1 {
		t.Errorf("the overflow was logged %d times, want once:\n%s", n, f.log.String())
	}
}

func TestWatchDirBound(t *testing.T) {
	f := start(t, Limits{MaxDirs: 3}, func(host string) { mkdir(t, filepath.Join(host, "a")) })
	for _, d := range []string{"b", "c", "d"} {
		mkdir(t, filepath.Join(f.host, d))
	}
	// The third directory is the last one watched: past it, the guest is
	// told to look at each directory it cannot be told about.
	f.rec.waitFor(t, "create /w/b", "create /w/c", "modify /w/c", "create /w/d", "modify /w/d")
	if f.w.Dirs() != 3 {
		t.Errorf("watching %d directories, want the bound, 3", f.w.Dirs())
	}
	if n := strings.Count(f.log.String(), "directories in the shares"); n != 1 {
		t.Errorf("the bound was logged %d times, want once:\n%s", n, f.log.String())
	}
}

func TestWatchKernelOverflow(t *testing.T) {
	f := start(t, Limits{}, nil)
	write(t, filepath.Join(f.host, "lost"), "x")
	f.w.handleError(fsnotify.ErrEventOverflow)
	f.w.handleError(fsnotify.ErrEventOverflow)
	f.rec.waitFor(t, "modify /w")
	if got := f.rec.events(); slices.Contains(got, "create /w/lost") {
		t.Errorf("got %q, want the batch replaced by a modify of the share root", got)
	}
	if n := strings.Count(f.log.String(), "event queue overflowed"); n != 1 {
		t.Errorf("the overflow was logged %d times, want once:\n%s", n, f.log.String())
	}
}

func TestWatchKernelWatchLimit(t *testing.T) {
	f := start(t, Limits{}, nil)
	for _, d := range []string{"a", "b"} {
		f.w.limited(f.w.shares[0], d, &os.SyscallError{Syscall: "inotify_add_watch", Err: syscall.ENOSPC})
	}
	f.w.limited(f.w.shares[0], "gone", os.ErrNotExist)
	got := f.rec.waitFor(t, "modify /w/a", "modify /w/b")
	if slices.Contains(got, "modify /w/gone") {
		t.Errorf("a directory gone meanwhile was reported: %q", got)
	}
	if n := strings.Count(f.log.String(), "max_user_watches"); n != 1 {
		t.Errorf("the kernel's limit was logged %d times, want once:\n%s", n, f.log.String())
	}
}

func TestWatchNoSymlinks(t *testing.T) {
	outside := t.TempDir()
	f := start(t, Limits{}, func(host string) {
		if err := os.Symlink(outside, filepath.Join(host, "link")); err != nil {
			t.Fatal(err)
		}
	})
	if f.w.Dirs() != 1 {
		t.Fatalf("watching %d directories, want only the share's root (not the link's target)", f.w.Dirs())
	}
	write(t, filepath.Join(outside, "secret"), "x")
	// A link made later, to a directory outside, is not followed either.
	if err := os.Symlink(outside, filepath.Join(f.host, "link2")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(outside, "secret2"), "x")
	write(t, filepath.Join(f.host, "end"), "x")
	got := f.rec.waitFor(t, "create /w/link2", "create /w/end")
	for _, e := range got {
		if strings.Contains(e, "secret") {
			t.Errorf("a change outside the share was reported: %q", got)
		}
	}
	if f.w.Dirs() != 1 {
		t.Errorf("watching %d directories, want 1", f.w.Dirs())
	}
}

func TestWatchExclude(t *testing.T) {
	host := t.TempDir()
	mkdir(t, filepath.Join(host, ".git/objects"))
	w, err := New([]Share{{HostPath: host, GuestPath: "/w", Exclude: []string{filepath.Join(host, ".git")}}}, Limits{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if w.Dirs() != 1 {
		t.Errorf("watching %d directories, want the root only", w.Dirs())
	}
}

func TestWatchStops(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(ents)
	}
	beforeFDs, beforeG := fds(), runtime.NumGoroutine()
	f := start(t, Limits{}, func(host string) { mkdir(t, filepath.Join(host, "a/b/c")) })
	write(t, filepath.Join(f.host, "a/f"), "x")
	f.rec.waitFor(t, "create /w/a/f")
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for fds() != beforeFDs || runtime.NumGoroutine() > beforeG {
		if time.Now().After(deadline) {
			t.Fatalf("after Run returned: %d descriptors (before: %d), %d goroutines (before: %d)", fds(), beforeFDs, runtime.NumGoroutine(), beforeG)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunStopsOnDeliverError(t *testing.T) {
	host := t.TempDir()
	w, err := New([]Share{{HostPath: host, GuestPath: "/w"}}, Limits{Window: time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), func(context.Context, []protocol.FileEvent) error { return os.ErrClosed })
	}()
	write(t, filepath.Join(host, "f"), "x")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "deliver") {
			t.Errorf("Run returned %v, want the delivery's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after deliver failed")
	}
}
