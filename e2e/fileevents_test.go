package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// Bounds of the file events scenario.
const (
	// wakeWithin is how soon after a host edit the guest's watcher must
	// wake.
	wakeWithin = time.Second
	// burstFiles is the size of the host's burst (a checkout, an npm
	// install).
	burstFiles = 10000
	// execDuringBurst bounds an exec's answer while the burst is delivered:
	// the VM is not stalled.
	execDuringBurst = 10 * time.Second
	// latencyEdits is how many host and guest edits the latency of a
	// wake is measured over, on a real VM.
	latencyEdits = 20
)

// quantile is the q-quantile (0.5: the median) of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// injectLog is where the test double's stand-in for the guest kernel's
// /proc/fs/fsnotify_inject records the agent's requests (hack/README.md).
const injectLog = "/dev/.testkrun/fsnotify_inject"

// guestWatcher is a file watcher running in the guest (netprobe watch),
// its events as lines.
type guestWatcher struct {
	mu    sync.Mutex
	lines []string
}

func (w *guestWatcher) add(l string) {
	w.mu.Lock()
	w.lines = append(w.lines, l)
	w.mu.Unlock()
}

func (w *guestWatcher) has(line string) bool { return w.index(line, 0) >= 0 }

// index is the position of line among the lines printed from the from-th
// on, or -1.
func (w *guestWatcher) index(line string, from int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := from; i < len(w.lines); i++ {
		if w.lines[i] == line {
			return i
		}
	}
	return -1
}

// about returns the lines about the file at p among those printed from the
// from-th on.
func (w *guestWatcher) about(p string, from int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range w.lines[from:] {
		if _, name, _ := strings.Cut(l, " "); name == p {
			out = append(out, l)
		}
	}
	return out
}

// count is how many lines the watcher printed.
func (w *guestWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lines)
}

// waitWoken waits up to wakeWithin (scaled for nested VMs) for the
// watcher to print line.
func (w *guestWatcher) waitWoken(t *testing.T, line string) {
	t.Helper()
	deadline := time.Now().Add(poll.Scaled(wakeWithin))
	for !w.has(line) {
		if time.Now().After(deadline) {
			w.mu.Lock()
			t.Errorf("the guest's watcher did not wake within %v for %q; it printed %q", wakeWithin, line, w.lines)
			w.mu.Unlock()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testFileEvents: host edits to the workspace wake a file watcher in the
// guest (create, modify, delete, rename), a burst of 10k files leaves the
// guest reading the last state with the VM answering meanwhile, and the
// guest's own writes are not fired again. On the double (whose guest sees
// the host's edits natively) it checks the requests the agent made; on a
// real VM, that the watcher woke (and, for the guest's own write, how
// often), and it skips where the guest kernel cannot take the events (the
// agent's report).
func testFileEvents(t *testing.T, e *env) {
	ws := realDir(t)
	must(t, os.WriteFile(filepath.Join(ws, "edit.txt"), []byte("v1\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "gone.txt"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(ws, "old.txt"), []byte("x"), 0o644))
	// An overlay root: the events concern the workspace share, not the
	// root (block roots boot krunbox's libkrunfw in BlockRoot).
	dir := e.started("fe", "--workspace", ws, "--root", "overlay")

	// The runner says what the agent reported once it watches (or that
	// it will not).
	var report string
	poll.Until(t, "the runner's file events line", 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "runner.log"))
		_, report, _ = strings.Cut(string(b), "file events: ")
		report, _, _ = strings.Cut(report, "\n")
		return report != ""
	})
	if !strings.HasPrefix(report, "delivered") {
		if e.suite.mode == real {
			t.Skipf("SKIP: the guest kernel takes no file events (the agent: %s)", report)
		}
		t.Fatalf("file events on the double: %s", report)
	}
	if got, _ := e.inspect("fe")["file_events"].(string); !strings.HasPrefix(got, "delivered") {
		t.Errorf("inspect's file_events: %q, want delivered", got)
	}

	e.ok("cp", netprobe(t), "fe:/netprobe")
	w := &guestWatcher{}
	cmd := e.command("exec", "fe", "/netprobe", "watch", ws)
	out, err := cmd.StdoutPipe()
	must(t, err)
	startCmd(t, cmd)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				close(ready)
				continue
			}
			w.add(sc.Text())
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the guest's watcher never started")
	}

	p := func(name string) string { return filepath.Join(ws, name) }
	steps := []struct {
		name     string
		apply    func() error
		wake     string   // the watcher's line
		requests []string // the agent's requests (on the double)
	}{
		{"create", func() error { return os.WriteFile(p("new.txt"), []byte("new\n"), 0o644) },
			"create " + p("new.txt"), []string{"create\x00" + p("new.txt") + "\x00"}},
		{"modify", func() error { return appendFile(p("edit.txt"), "v2\n") },
			"modify " + p("edit.txt"), []string{"modify\x00" + p("edit.txt") + "\x00"}},
		{"delete", func() error { return os.Remove(p("gone.txt")) },
			"delete " + p("gone.txt"), []string{"delete\x00" + p("gone.txt") + "\x00"}},
		{"rename", func() error { return os.Rename(p("old.txt"), p("renamed.txt")) },
			// One move, which the guest kernel fires as a local rename's
			// IN_MOVED_FROM and IN_MOVED_TO.
			"moved_to " + p("renamed.txt"), []string{"move\x00" + p("old.txt") + "\x00" + p("renamed.txt") + "\x00"}},
	}
	for i := range latencyEdits {
		for _, who := range []string{"host", "guest"} {
			must(t, os.WriteFile(p(fmt.Sprintf("%s-%d.txt", who, i)), nil, 0o644))
		}
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			must(t, s.apply())
			if e.suite.mode == real {
				w.waitWoken(t, s.wake)
				return
			}
			// On the double the watcher wakes natively; what counts is
			// that the agent fired the event, within the same bound.
			e.waitRequests(t, wakeWithin+2*time.Second, s.requests...)
		})
	}

	t.Run("Latency", func(t *testing.T) {
		if e.suite.mode != real {
			t.Skip("on the double the guest sees the host's edits natively: nothing to measure")
		}
		// The guest's own edits, made by a shell already running in it on
		// a line of its stdin, as a guest-side tool would: the same
		// watcher, the same way back to the host as for a host edit.
		guest := e.command("exec", "-i", "fe", "sh", "-c", `while read f; do echo x >> "$f"; done`)
		in, err := guest.StdinPipe()
		must(t, err)
		startCmd(t, guest)
		defer in.Close()
		var host, local []time.Duration
		woke := func(file string, edit func()) time.Duration {
			from := w.count()
			start := time.Now()
			edit()
			deadline := start.Add(poll.Scaled(wakeWithin))
			for w.index("modify "+file, from) < 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the guest's watcher did not wake for %s within %v", file, poll.Scaled(wakeWithin))
				}
				time.Sleep(time.Millisecond)
			}
			return time.Since(start)
		}
		for i := range latencyEdits {
			hf, gf := p(fmt.Sprintf("host-%d.txt", i)), p(fmt.Sprintf("guest-%d.txt", i))
			host = append(host, woke(hf, func() { must(t, appendFile(hf, "x\n")) }))
			local = append(local, woke(gf, func() {
				_, err := fmt.Fprintln(in, gf)
				must(t, err)
			}))
		}
		t.Logf("file events latency, edit to the guest's watcher waking, %d edits each: host edit median %v p95 %v; guest edit median %v p95 %v",
			latencyEdits, quantile(host, 0.5), quantile(host, 0.95), quantile(local, 0.5), quantile(local, 0.95))
	})

	t.Run("GuestWritesNotEchoed", func(t *testing.T) {
		if st := e.inspect("fe")["file_events"].(string); st != "delivered" {
			t.Skipf("the agent cannot tell the guest's writes apart here: %s", st)
		}
		guest := p("guest.txt")
		from := w.count()
		e.ok("exec", "fe", "sh", "-c", "echo guest > "+guest)
		// A host edit after the guest's: once it wakes the watcher, the
		// host's echo of the guest's write has been handled too, and the
		// watcher has printed what the guest's write fired before it.
		must(t, os.WriteFile(p("after-guest.txt"), []byte("x"), 0o644))
		w.waitWoken(t, "create "+p("after-guest.txt"))
		if t.Failed() {
			return
		}
		if e.suite.mode == double {
			got := e.waitRequests(t, 10*time.Second, "create\x00"+p("after-guest.txt")+"\x00")
			if slices.Contains(strings.Split(got, "\x00"), guest) {
				t.Errorf("the guest's own write was fired again: %q", got)
			}
		}
		// The guest's kernel fired its write's events itself, once each
		// (an open that creates, one write, the close); an echo fired
		// again would add a create or a modify.
		want := []string{"create " + guest, "modify " + guest, "close_write " + guest}
		if got := w.about(guest, from); !slices.Equal(got, want) {
			t.Errorf("the guest's watcher printed %q for the guest's own write, want %q", got, want)
		}
	})

	t.Run("Burst", func(t *testing.T) {
		burst := p("burst")
		must(t, os.Mkdir(burst, 0o755))
		done := make(chan error, 1)
		go func() {
			for i := range burstFiles {
				if err := os.WriteFile(filepath.Join(burst, fmt.Sprintf("f%05d", i)), []byte(fmt.Sprintf("%d\n", i)), 0o644); err != nil {
					done <- err
					return
				}
			}
			done <- os.WriteFile(filepath.Join(burst, "last"), []byte("final\n"), 0o644)
		}()
		start := time.Now()
		e.ok("exec", "fe", "true")
		if d := time.Since(start); d > execDuringBurst {
			t.Errorf("an exec during the burst took %v, want at most %v", d, execDuringBurst)
		}
		must(t, <-done)
		if got := e.ok("exec", "fe", "cat", filepath.Join(burst, "last")); got != "final\n" {
			t.Errorf("the guest read %q from the burst's last file, want its final content", got)
		}
		if e.suite.mode == real {
			w.waitWoken(t, "create,dir "+burst)
			return
		}
		// Every file of the burst is reported, or (past the watcher's
		// bound) the share's root as modified, for the guest to rescan.
		e.waitRequestsAny(t, 20*time.Second, "create\x00"+filepath.Join(burst, "last")+"\x00", "modify\x00"+ws+"\x00")
	})
}

// testFileEventsNotDelivered: with a stock libkrunfw (the double standing
// for one), the agent says the guest takes no file events, inspect says
// so, and the runner watches nothing: no inotify descriptor.
func testFileEventsNotDelivered(t *testing.T, e *env) {
	if e.suite.mode != double {
		t.Skip("needs a guest kernel without the fsnotify injection: the double standing for one")
	}
	e.extra = append(e.extra, "TESTKRUN_NO_FSNOTIFY=1")
	ws := realDir(t)
	dir := e.started("nofe", "--workspace", ws)
	const want = "file events: not delivered: the guest kernel has no fsnotify injection (a stock libkrunfw)"
	poll.Until(t, "the runner's file events line", 30*time.Second, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "runner.log"))
		return strings.Contains(string(b), want)
	})
	if got, _ := e.inspect("nofe")["file_events"].(string); "file events: "+got != want {
		t.Errorf("inspect's file_events: %q", got)
	}
	pid := int(e.inspect("nofe")["status"].(map[string]any)["pid"].(float64))
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	must(t, err)
	for _, fd := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); strings.Contains(l, "inotify") {
			t.Errorf("the runner holds an inotify descriptor (fd %s): it watches for a guest that takes no events", fd.Name())
		}
	}
}

// waitRequests waits until the double's record of the agent's requests
// holds each of want, and returns it.
func (e *env) waitRequests(t *testing.T, within time.Duration, want ...string) string {
	t.Helper()
	var got string
	poll.Until(t, fmt.Sprintf("the agent's requests %q", want), within, func() bool {
		got = e.ok("exec", "fe", "cat", injectLog)
		for _, w := range want {
			if !strings.Contains(got, w) {
				return false
			}
		}
		return true
	})
	return got
}

// waitRequestsAny waits until the record holds one of want.
func (e *env) waitRequestsAny(t *testing.T, within time.Duration, want ...string) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("one of the agent's requests %q", want), within, func() bool {
		got := e.ok("exec", "fe", "cat", injectLog)
		for _, w := range want {
			if strings.Contains(got, w) {
				return true
			}
		}
		return false
	})
}

func appendFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
