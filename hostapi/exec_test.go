package hostapi

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/proctree"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// TestRunExitStatus: a process that ran is a result, whatever its exit
// status: Run's error is nil, and the result says how it ended.
func TestRunExitStatus(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	tests := []struct {
		script   string
		code     int
		signal   string
		stdout   string
		stderr   string
		timeout  time.Duration
		timedOut bool
	}{
		{script: "echo out; echo err >&2", code: 0, stdout: "out\n", stderr: "err\n"},
		{script: "exit 3", code: 3},
		{script: "exit 255", code: 255},
		{script: "kill -TERM $$", code: 128 + int(syscall.SIGTERM), signal: "SIGTERM"},
		{script: "kill -KILL $$", code: 137, signal: "SIGKILL"},
		{script: "printf 'no newline'; exit 1", code: 1, stdout: "no newline"},
		{script: "echo oops >&2; exit 2", code: 2, stderr: "oops\n"},
		{script: "echo before; exec sleep 100", code: 137, signal: "SIGKILL", stdout: "before\n", timeout: 300 * time.Millisecond, timedOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			res, err := c.Run(ctx, Cmd{Args: []string{"sh", "-c", tt.script}, Timeout: tt.timeout})
			if err != nil || res == nil {
				t.Fatalf("Run = %+v, %v; want a result and no error", res, err)
			}
			if res.ExitCode != tt.code || res.Signal != tt.signal || res.TimedOut != tt.timedOut {
				t.Errorf("ended with code %d signal %q timed out %v, want %d %q %v", res.ExitCode, res.Signal, res.TimedOut, tt.code, tt.signal, tt.timedOut)
			}
			if string(res.Stdout) != tt.stdout || string(res.Stderr) != tt.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", res.Stdout, res.Stderr, tt.stdout, tt.stderr)
			}
			if res.Success() != (tt.code == 0) {
				t.Errorf("Success() = %v for code %d", res.Success(), tt.code)
			}
			rerr := res.Err()
			if tt.code == 0 {
				if rerr != nil {
					t.Errorf("Err() = %v, want nil", rerr)
				}
				return
			}
			var ee *ExitError
			if !errors.As(rerr, &ee) {
				t.Fatalf("Err() = %#v, want *ExitError", rerr)
			}
			if ee.ExitCode() != tt.code || ee.Signal != tt.signal || ee.TimedOut != tt.timedOut || string(ee.Stderr) != tt.stderr {
				t.Errorf("ExitError %+v, want code %d signal %q timed out %v stderr %q", ee, tt.code, tt.signal, tt.timedOut, tt.stderr)
			}
		})
	}
}

// TestOutputExitError: Output, like os/exec's, reports a failed command as
// an *ExitError carrying its stderr.
func TestOutputExitError(t *testing.T) {
	c, _ := newTestClient(t, nil)
	out, err := c.Output(testContext(t), "sh", "-c", "echo partial; echo oops >&2; exit 2")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 2 || string(ee.Stderr) != "oops\n" {
		t.Fatalf("err = %v, want exit 2 with stderr oops", err)
	}
	if got := err.Error(); got != "exit status 2" {
		t.Errorf("Error() = %q", got)
	}
	if string(out) != "partial\n" {
		t.Errorf("output %q, want what it wrote before failing", out)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-exec")
	os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644)
	badFormat := filepath.Join(dir, "bad-format")
	os.WriteFile(badFormat, []byte("\x00\x01\x02 not a program"), 0o755)
	aFile := filepath.Join(dir, "file")
	os.WriteFile(aFile, nil, 0o644)
	noInterp := filepath.Join(dir, "no-interpreter")
	os.WriteFile(noInterp, []byte("#!/no/such/interpreter -x\n"), 0o755)
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	tests := []struct {
		name   string
		cmd    Cmd
		op     string
		target error
		msg    string
	}{
		{"interpreter missing", Command(noInterp), "exec", fs.ErrNotExist, "cannot run " + noInterp + ": no such file or directory: its interpreter /no/such/interpreter is missing"},
		{"not found message", Command("no-such-program-krunbox"), "exec", fs.ErrNotExist, "cannot run no-such-program-krunbox: executable file not found in $PATH"},
		{"missing cwd message", Cmd{Args: []string{"true"}, Dir: "/no/such/dir"}, "chdir", fs.ErrNotExist, "cannot run in /no/such/dir: "},
		{"not found in PATH", Command("no-such-program-krunbox"), "exec", fs.ErrNotExist, "cannot run "},
		{"not found by path", Command(filepath.Join(dir, "missing")), "exec", fs.ErrNotExist, "cannot run "},
		{"not executable", Command(notExec), "exec", fs.ErrPermission, "cannot run "},
		{"not a program", Command(badFormat), "exec", syscall.ENOEXEC, "cannot run "},
		{"missing cwd", Cmd{Args: []string{"true"}, Dir: filepath.Join(dir, "nope")}, "chdir", fs.ErrNotExist, "cannot run in "},
		{"cwd is a file", Cmd{Args: []string{"true"}, Dir: aFile}, "chdir", syscall.ENOTDIR, "cannot run in "},
		{"unknown user", Cmd{Args: []string{"true"}, User: "no-such-user-krunbox"}, "user", ErrUnknownUser, "cannot run as no-such-user-krunbox: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Run(ctx, tt.cmd)
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v (result %+v), want *StartError", err, res)
			}
			if res != nil {
				t.Errorf("a process that never started has a result: %+v", res)
			}
			if se.Op != tt.op || !errors.Is(err, tt.target) {
				t.Errorf("StartError %q (op %q), want op %q and errors.Is %v", err, se.Op, tt.op, tt.target)
			}
			if !strings.HasPrefix(err.Error(), tt.msg) {
				t.Errorf("message %q, want it to start with %q", err, tt.msg)
			}
			var ee *ExitError
			if errors.As(err, &ee) {
				t.Errorf("start failure reported as an exit: %v", err)
			}
		})
	}
}

func TestEnvIsExplicit(t *testing.T) {
	cfg := &protocol.Config{Env: []string{"FROM_CONFIG=1", "OVERRIDDEN=config"}}
	c, _ := newTestClient(t, cfg, agenttest.WithEnv("AGENT_SECRET=leak"))
	res, err := c.Run(testContext(t), Cmd{Args: []string{"env"}, Env: []string{"OVERRIDDEN=request", "EXTRA=x"}})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	if _, ok := env["AGENT_SECRET"]; ok {
		t.Error("the agent's own environment leaked into the process")
	}
	for k, want := range map[string]string{"FROM_CONFIG": "1", "OVERRIDDEN": "request", "EXTRA": "x"} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q (env %v)", k, env[k], want, env)
		}
	}
	if env["PATH"] == "" || env["HOME"] == "" {
		t.Errorf("no default PATH or HOME: %v", env)
	}
	if _, ok := env["TERM"]; ok {
		t.Error("TERM set without a terminal")
	}
}

func TestWorkingDirectory(t *testing.T) {
	work := t.TempDir()
	c, _ := newTestClient(t, &protocol.Config{Workdir: work})
	ctx := testContext(t)
	for _, tt := range []struct{ dir, want string }{{"", work}, {"/", "/"}, {"sub", filepath.Join(work, "sub")}} {
		os.MkdirAll(filepath.Join(work, "sub"), 0o755)
		out, err := c.Run(ctx, Cmd{Args: []string{"pwd"}, Dir: tt.dir})
		if err != nil || strings.TrimSpace(string(out.Stdout)) != tt.want {
			t.Errorf("Dir %q: pwd = %q, %v; want %q", tt.dir, out.Stdout, err, tt.want)
		}
	}
}

func TestSignalReachesProcessGroup(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	p, err := c.Start(ctx, Command("sh", "-c", "sleep 100 & echo $!; wait"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	child := readPid(t, p.Stdout())
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Signal != "SIGUSR1" || ee.Code != 128+int(syscall.SIGUSR1) {
		t.Fatalf("Wait = %v, want killed by SIGUSR1 (code %d)", err, 128+int(syscall.SIGUSR1))
	}
	waitGone(t, child)
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	start := time.Now()
	p, err := c.Start(ctx, Cmd{Args: []string{"sh", "-c", "sleep 100 & echo $!; wait"}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	child := readPid(t, p.Stdout())
	err = p.Wait()
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.TimedOut || ee.Signal != "SIGKILL" || ee.Code != 137 {
		t.Fatalf("Wait = %#v, want a timeout kill", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 20*time.Second {
		t.Errorf("timed out after %v", d)
	}
	waitGone(t, child)
}

func TestContextCancelKillsProcess(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx, cancel := context.WithCancel(testContext(t))
	p, err := c.Start(ctx, Command("sh", "-c", "sleep 100 & echo $!; wait"))
	if err != nil {
		t.Fatal(err)
	}
	child := readPid(t, p.Stdout())
	cancel()
	if err := p.Wait(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	waitGone(t, p.Pid)
	waitGone(t, child)
	// The connection still serves.
	if out, err := c.Output(testContext(t), "echo", "alive"); err != nil || string(out) != "alive\n" {
		t.Fatalf("after cancel: %q, %v", out, err)
	}
}

func TestDisconnectKillsGroup(t *testing.T) {
	c, a := newTestClient(t, nil)
	p, err := c.Start(testContext(t), Command("sh", "-c", "sleep 100 & echo $!; sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	child := readPid(t, p.Stdout())
	c.Close()
	waitGone(t, p.Pid)
	waitGone(t, child)
	if err := p.Wait(); !errors.Is(err, ErrClientClosed) {
		t.Errorf("Wait after Close = %v, want ErrClientClosed", err)
	}
	// Another client of the same agent is unaffected.
	c2 := NewUnixClient(a.Socket)
	defer c2.Close()
	if _, err := c2.Ping(testContext(t)); err != nil {
		t.Fatal(err)
	}
}

func TestOrphansAreReaped(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	// The shell exits at once; its background child becomes an orphan,
	// which the agent (a subreaper) inherits and must reap.
	out, err := c.Output(ctx, "sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatal(err)
	}
	orphan, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if ppid, ok := proctree.Parent(orphan); ok && ppid != a.Pid() {
		t.Fatalf("orphan %d has parent %d, want the agent %d (subreaper)", orphan, ppid, a.Pid())
	}
	waitGone(t, orphan) // gone means reaped: a zombie still has /proc/<pid>
	poll.Until(t, "no zombie children of the agent", 20*time.Second, func() bool { return len(zombieChildren(a.Pid())) == 0 })
}

func TestExitStatusNotStolenByReaper(t *testing.T) {
	// Many processes exiting at once, while orphans exit too: each Wait
	// must still get its own process's status.
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _ := c.Run(ctx, Command("sh", "-c", fmt.Sprintf("(exit 0) & exit %d", i%7)))
			if res == nil || res.ExitCode != i%7 {
				errs <- fmt.Errorf("process %d: result %+v, want exit %d", i, res, i%7)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := c.Output(ctx, "sh", "-c", fmt.Sprintf("echo %d; echo e%d >&2", i, i))
			if err != nil || string(out) != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("exec %d: %q, %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStdinStreaming(t *testing.T) {
	c, _ := newTestClient(t, nil)
	p, err := c.Start(testContext(t), Cmd{Args: []string{"cat"}, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := bufio.NewReader(p.Stdout())
	for i := range 3 {
		line := fmt.Sprintf("line %d\n", i)
		if _, err := io.WriteString(p.Stdin(), line); err != nil {
			t.Fatal(err)
		}
		// The echo comes back before more is written: stdin is streamed,
		// not collected until EOF.
		got, err := r.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("read %q, %v; want %q", got, err, line)
		}
	}
	if err := p.Stdin().Close(); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Fatalf("after stdin EOF: %q, %v", rest, err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("cat after stdin EOF: %v", err)
	}
}

func TestStdinFromReader(t *testing.T) {
	c, _ := newTestClient(t, nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16) // 5 MiB: several windows
	data = append(data, "the end"...)                          // not a whole window
	res, err := c.Run(testContext(t), Cmd{Args: []string{"sha256sum"}, Stdin: bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	// Every byte arrived, in order, and stdin was closed at the end.
	want := fmt.Sprintf("%x  -\n", sha256.Sum256(data))
	if got := string(res.Stdout); got != want {
		t.Fatalf("sha256sum of the guest's stdin: %q, want %q", got, want)
	}
}

func TestStdinAndStdoutBothWaysAtOnce(t *testing.T) {
	// 64 MiB through cat: stdin and stdout windows fill and drain at the
	// same time, on one connection, with other requests alongside.
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	data := bytes.Repeat([]byte("krunbox\n"), 64<<20/8)
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 20; i++ {
			if _, err := c.Ping(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var out countingWriter
	if _, err := c.Run(ctx, Cmd{Args: []string{"cat"}, Stdin: bytes.NewReader(data), Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.n != int64(len(data)) {
		t.Fatalf("cat echoed %d bytes, want %d", out.n, len(data))
	}
	if err := <-done; err != nil {
		t.Fatalf("pings alongside: %v", err)
	}
}

type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// The same writer for stdout and stderr receives both streams in the order
// the process wrote them. The guest writes each line only once the test has
// seen the previous one (it waits for a line on stdin in between), so the
// order is the process's, not a race between the two streams.
func TestCombinedOutput(t *testing.T) {
	c, _ := newTestClient(t, nil)
	var b syncbuf.Buffer
	p, err := c.Start(testContext(t), Cmd{
		Args:      []string{"sh", "-c", "echo a; read x; echo b >&2; read x; echo c"},
		Stdout:    &b,
		Stderr:    &b,
		OpenStdin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, want := range []string{"a\n", "a\nb\n"} {
		poll.Until(t, fmt.Sprintf("combined output %q", want), 20*time.Second, func() bool { return len(b.String()) >= len(want) })
		if got := b.String(); got != want {
			t.Fatalf("combined output %q, want %q", got, want)
		}
		if _, err := io.WriteString(p.Stdin(), "next\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "a\nb\nc\n" {
		t.Fatalf("combined output %q, want %q", got, "a\nb\nc\n")
	}
}

func TestTTYAndResize(t *testing.T) {
	c, _ := newTestClient(t, nil)
	p, err := c.Start(testContext(t), Cmd{
		Args:      []string{"sh", "-c", "stty size; test -t 0 && echo tty; echo $TERM; read x; stty size"},
		TTY:       &WindowSize{Rows: 24, Cols: 80},
		OpenStdin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := bufio.NewReader(p.Stdout())
	expectLine(t, r, "24 80")
	expectLine(t, r, "tty")
	expectLine(t, r, "xterm-256color")
	if err := p.Resize(40, 132); err != nil {
		t.Fatal(err)
	}
	// Ordered after the resize on the same connection.
	io.WriteString(p.Stdin(), "\n")
	expectLine(t, r, "") // the terminal echoes the newline
	expectLine(t, r, "40 132")
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(p.Stderr()); len(b) != 0 {
		t.Errorf("stderr with a TTY: %q", b)
	}
}

func TestLargeOutputBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 1 GiB")
	}
	c, a := newTestClient(t, nil)
	const size = 1 << 30
	p, err := c.Start(testContext(t), Command("head", "-c", strconv.Itoa(size), "/dev/zero"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	n, err := io.Copy(io.Discard, p.Stdout())
	close(stop)
	<-sampled
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d", n, err, size)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	growth := int64(peak) - int64(before.HeapInuse)
	t.Logf("client heap growth %d KiB; agent peak RSS %d KiB", growth>>10, peakRSS(t, a.Pid())>>10)
	if growth > 32<<20 {
		t.Errorf("client heap grew by %d MiB streaming 1 GiB", growth>>20)
	}
	if rss := peakRSS(t, a.Pid()); rss > 64<<20 {
		t.Errorf("agent peak RSS %d MiB streaming 1 GiB", rss>>20)
	}
}

func TestSlowReaderHoldsProcessBack(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	// stdout is not read; the background writer must block, while stderr
	// and other requests still flow.
	p, err := c.Start(ctx, Command("sh", "-c", "head -c 104857600 /dev/zero & echo $! >&2; echo hello >&2; wait"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errs := bufio.NewReader(p.Stderr())
	writer, _ := strconv.Atoi(strings.TrimSpace(mustReadLine(t, errs)))
	expectLine(t, errs, "hello")
	if out, err := c.Output(ctx, "echo", "other"); err != nil || string(out) != "other\n" {
		t.Fatalf("another exec while one is held back: %q, %v", out, err)
	}
	// Wait until the writer stops making progress, then check how far it got.
	var written int64
	stable := 0
	poll.Until(t, "the writer to block", 20*time.Second, func() bool {
		w := bytesWritten(t, writer)
		if w == written && w > 0 {
			stable++
		} else {
			stable = 0
		}
		written = w
		return stable >= 10
	})
	// Client window + agent buffer + pipe, with slack.
	if limit := int64(protocol.DefaultWindow + 4<<20); written > limit {
		t.Errorf("writer got %d bytes out with nobody reading, want at most %d", written, limit)
	}
	if p.ExitCode() != -1 {
		t.Fatal("process exited with its output unread")
	}
	if rss := peakRSS(t, a.Pid()); rss > 64<<20 {
		t.Errorf("agent peak RSS %d MiB", rss>>20)
	}
	n, err := io.Copy(io.Discard, p.Stdout())
	if err != nil || n != 100<<20 {
		t.Fatalf("read %d, %v", n, err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestBackgroundChildDoesNotHoldExecOpen(t *testing.T) {
	c, _ := newTestClient(t, nil)
	start := time.Now()
	// The background sleep keeps stdout open; the exec still ends soon
	// after the shell exits, with the output written before.
	out, err := c.Output(testContext(t), "sh", "-c", "echo before; sleep 30 & exit 0")
	if err != nil || string(out) != "before\n" {
		t.Fatalf("%q, %v", out, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("exec held open %v by a background child", d)
	}
}

// readPid reads a line holding a pid.
func readPid(t *testing.T, r io.Reader) int {
	t.Helper()
	line := mustReadLine(t, bufio.NewReader(r))
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("want a pid, got %q", line)
	}
	return pid
}

func mustReadLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read line: %q, %v", line, err)
	}
	return strings.TrimRight(line, "\r\n")
}

func expectLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	if got := mustReadLine(t, r); got != want {
		t.Fatalf("line %q, want %q", got, want)
	}
}

// waitGone waits until pid no longer exists (not even as a zombie).
func waitGone(t testing.TB, pid int) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("process %d to be gone", pid), 20*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return errors.Is(err, fs.ErrNotExist)
	})
}

// procStat returns the fields of /proc/pid/stat after the command name.
func zombieChildren(parent int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f, ok := proctree.Stat(pid); ok && f[0] == "Z" && f[1] == strconv.Itoa(parent) {
			out = append(out, pid)
		}
	}
	return out
}

// peakRSS is the peak resident set size of pid (VmHWM).
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM for %d", pid)
	return 0
}

// bytesWritten is what pid has written so far (/proc/pid/io wchar).
func bytesWritten(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	t.Fatalf("no wchar for %d", pid)
	return 0
}
