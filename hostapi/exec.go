package hostapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// Cmd describes a process to run in the guest.
type Cmd struct {
	// Args is the program and its arguments. A program without a slash is
	// looked up in the PATH of the process's environment.
	Args []string
	// Env entries (KEY=VALUE) override the guest's defaults: PATH, HOME,
	// USER, LOGNAME, TERM with a TTY, and the sandbox's configured env.
	// Nothing is taken from this process's environment.
	Env []string
	// Dir is the working directory; empty means the sandbox's default.
	Dir string
	// User is a user name or uid, with an optional ":group" (name or gid),
	// resolved in the guest's /etc/passwd; empty means the sandbox's default.
	User string
	// TTY, when set, runs the process on a pseudo-terminal of that size;
	// stderr then goes to the terminal too (Stdout).
	TTY *WindowSize
	// Timeout, when positive, makes the agent kill the process group that
	// long after start; Wait then returns an *ExitError with TimedOut set.
	Timeout time.Duration
	// Main makes the process the sandbox's main command, as "krunbox run"
	// does: the VM stops once it exits, whoever watches it. Losing the
	// connection (a killed program, Client.Close) leaves it running, its
	// stdin closed and its output going to the console log; cancelling
	// ctx or Process.Close still kills it.
	Main bool

	// Stdin, when set, is copied to the process's stdin, which is then
	// closed. When nil and OpenStdin is false, stdin is /dev/null.
	Stdin io.Reader
	// OpenStdin gives a started Process a stdin to write to
	// (Process.Stdin); closing it closes the process's stdin.
	OpenStdin bool
	// Stdout and Stderr, when set, receive the process's output. When nil,
	// Run collects it into the RunResult and Start leaves it to be read from
	// Process.Stdout and Process.Stderr. Passing the same writer for both
	// interleaves them, as a terminal would.
	Stdout io.Writer
	Stderr io.Writer
}

// Command is a Cmd running args with the defaults.
func Command(args ...string) Cmd { return Cmd{Args: args} }

// WindowSize is a terminal size.
type WindowSize = protocol.WindowSize

// RunResult is how a process that Run ran ended, and what it wrote.
type RunResult struct {
	// Stdout and Stderr are the output, unless Cmd.Stdout or Cmd.Stderr
	// took it (or, for Stderr, Cmd.TTY merged it into Stdout).
	Stdout, Stderr []byte
	// ExitCode is the exit status, or 128+N for a process killed by signal
	// N, as a shell reports it.
	ExitCode int
	// Signal is the name of the signal that killed the process
	// ("SIGKILL"), or "" when it exited.
	Signal string
	// CoreDumped is set when the kill dumped core.
	CoreDumped bool
	// TimedOut is set when the agent killed the process for Cmd.Timeout.
	TimedOut bool
}

// Success reports whether the process exited with status 0.
func (r *RunResult) Success() bool { return r.ExitCode == 0 && r.Signal == "" }

// Err returns nil when the process exited with status 0, and otherwise an
// *ExitError describing how it ended (with Stderr when Run collected it),
// for callers that want a failed command as an error, as os/exec's Run
// gives it.
func (r *RunResult) Err() error {
	if r.Success() {
		return nil
	}
	return &ExitError{Code: r.ExitCode, Signal: r.Signal, CoreDumped: r.CoreDumped, TimedOut: r.TimedOut, Stderr: r.Stderr}
}

// ExitError reports a process that ran but did not exit with status 0:
// Process.Wait and Client.Output return it, and RunResult.Err makes one.
type ExitError struct {
	// Code is the exit status, or 128+N when signal N killed the process.
	Code int
	// Signal is the name of the signal that killed it ("SIGKILL"), or "".
	Signal string
	// CoreDumped is set when the kill dumped core.
	CoreDumped bool
	// TimedOut is set when the agent killed it for Cmd.Timeout.
	TimedOut bool
	// SandboxStopped is set when the process ended while its sandbox was
	// stopping (stopped, removed, idle), which terminates every process.
	SandboxStopped bool
	// Stderr is the collected stderr, when Run collected it.
	Stderr []byte
}

func (e *ExitError) Error() string {
	var s string
	if e.Signal != "" {
		s = "killed by " + e.Signal
		if e.CoreDumped {
			s += " (core dumped)"
		}
	} else {
		s = fmt.Sprintf("exit status %d", e.Code)
	}
	if e.TimedOut {
		s = "timed out: " + s
	}
	if e.SandboxStopped {
		s += " (its sandbox stopped)"
	}
	return s
}

// ExitCode returns the shell-style exit code: the status, or 128+N.
func (e *ExitError) ExitCode() int { return e.Code }

// StartError is returned when a process could not start at all, which is
// never confused with a process that ran and failed (*ExitError).
type StartError struct {
	// Op is what failed: "exec" (program not found or not executable),
	// "chdir" (bad working directory) or "user" (unknown or forbidden user).
	Op string
	// Path is the program, directory or user.
	Path string
	// Err is the cause: an errno (errors.Is(err, fs.ErrNotExist) for a
	// missing program or directory, fs.ErrPermission for one not
	// executable) or ErrUnknownUser.
	Err error
}

func (e *StartError) Error() string {
	msg := e.Err.Error()
	var re *RemoteError
	if errors.As(e.Err, &re) {
		msg = re.Message
	}
	switch e.Op {
	case "exec":
		return fmt.Sprintf("cannot run %s: %s", e.Path, msg)
	case "chdir":
		return fmt.Sprintf("cannot run in %s: %s", e.Path, msg)
	case "user":
		return fmt.Sprintf("cannot run as %s: %s", e.Path, msg)
	}
	return fmt.Sprintf("cannot start: %s %s: %s", e.Op, e.Path, msg)
}

func (e *StartError) Unwrap() error {
	var re *RemoteError
	if errors.As(e.Err, &re) && re.Err != nil {
		return re.Err
	}
	return e.Err
}

// Run runs cmd to completion and returns how it ended. A process that ran
// is a result, whatever its exit status: RunResult.ExitCode (and Signal,
// TimedOut) say how it ended, RunResult.Err turns a failure into an
// *ExitError. The error is for a process that did not run to its end: a
// *StartError when it could not start (program not found, bad working
// directory or user), the context's error (wrapped) when ctx ended first,
// or the sandbox's: an error matching ErrNotRunning when its VM does not
// run, ErrConnectionLost when it stopped meanwhile. Output not sent to
// Cmd.Stdout or Cmd.Stderr is collected in memory, up to
// AgentLimits.MaxOutput a stream: a process writing more is killed, and
// the error is a *LimitError (wrapped).
func (c *Client) Run(ctx context.Context, cmd Cmd) (*RunResult, error) {
	over := make(chan error, 1)
	var stdout, stderr *outputBuffer
	if cmd.Stdout == nil {
		stdout = &outputBuffer{max: c.opts.limits.MaxOutput, what: "bytes of stdout", over: over}
		cmd.Stdout = stdout
	}
	if cmd.Stderr == nil && cmd.TTY == nil {
		stderr = &outputBuffer{max: c.opts.limits.MaxOutput, what: "bytes of stderr", over: over}
		cmd.Stderr = stderr
	}
	p, err := c.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	go func() {
		select {
		case err := <-over:
			p.kill(err)
		case <-p.done:
		}
	}()
	err = p.Wait()
	var ee *ExitError
	if err != nil && !errors.As(err, &ee) {
		return nil, err
	}
	res := &RunResult{ExitCode: p.ExitCode()}
	if ee != nil {
		res.Signal, res.CoreDumped, res.TimedOut = ee.Signal, ee.CoreDumped, ee.TimedOut
	}
	if stdout != nil {
		res.Stdout = stdout.Bytes()
	}
	if stderr != nil {
		res.Stderr = stderr.Bytes()
	}
	return res, nil
}

// outputBuffer collects a stream of output up to max bytes. Past that it
// fails the write and sends a *LimitError on over, once for all the
// buffers sharing over, for the process to be killed.
type outputBuffer struct {
	bytes.Buffer
	max  int64
	what string
	over chan<- error
}

func (b *outputBuffer) Write(p []byte) (int, error) {
	if int64(b.Len())+int64(len(p)) > b.max {
		err := &LimitError{Limit: "MaxOutput", Max: b.max, What: b.what}
		select {
		case b.over <- err:
		default:
		}
		return 0, err
	}
	return b.Buffer.Write(p)
}

// Output runs args with the defaults and returns its stdout, like
// exec.Command(...).Output: a process that did not exit with status 0 is
// an *ExitError (with its Stderr), beside the output it wrote.
func (c *Client) Output(ctx context.Context, args ...string) ([]byte, error) {
	res, err := c.Run(ctx, Command(args...))
	if err != nil {
		return nil, err
	}
	return res.Stdout, res.Err()
}

// Process is a process started in the guest.
type Process struct {
	// Pid is the process id in the guest.
	Pid int

	st     *stream
	stdin  *stdinWriter
	stdout io.Reader
	stderr io.Reader
	copies sync.WaitGroup
	stop   func() bool // stops watching the Start context

	done   chan struct{}      // closed when watch has seen the end
	exit   *protocol.ExecExit // set by watch
	err    error              // set by watch
	closed sync.Once

	mu    sync.Mutex
	cause error // why this side killed the process
}

// Start starts cmd and returns its handle. Cancelling ctx kills the
// process group in the guest, as does closing the Client; so does Close.
// Unless Cmd.Stdout and Cmd.Stderr are set, the caller must read
// Process.Stdout and Process.Stderr: output not read holds the process
// back (a 1 MiB window per stream), it is never buffered without bound.
func (c *Client) Start(ctx context.Context, cmd Cmd) (*Process, error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("start: no command")
	}
	s, err := c.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	wantStdin := cmd.Stdin != nil || cmd.OpenStdin
	req := &protocol.ExecRequest{
		Argv: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, User: cmd.User, TTY: cmd.TTY,
		Stdin: wantStdin, Timeout: cmd.Timeout, Main: cmd.Main,
	}
	st, err := s.open(protocol.TypeExec, req, wantStdin)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	started, err := execStarted(ctx, s, st, cmd.Args[0])
	if err != nil {
		return nil, err
	}
	p := &Process{Pid: started.Pid, st: st, stdout: st.out, stderr: st.errout, done: make(chan struct{})}
	if cmd.TTY != nil {
		p.stderr = strings.NewReader("")
	}
	if wantStdin {
		p.stdin = &stdinWriter{st: st}
	}
	if cmd.Stdin != nil {
		go func() {
			if _, err := io.Copy(p.stdin, cmd.Stdin); err == nil {
				p.stdin.Close()
			}
		}()
	}
	out, errw := cmd.Stdout, cmd.Stderr
	if out != nil && out == errw {
		lw := &lockedWriter{w: out}
		out, errw = lw, lw
	}
	for _, c := range []struct {
		w io.Writer
		r *io.Reader
	}{{out, &p.stdout}, {errw, &p.stderr}} {
		if c.w == nil {
			continue
		}
		r := *c.r
		*c.r = strings.NewReader("")
		p.copies.Add(1)
		go func() {
			defer p.copies.Done()
			io.Copy(c.w, r)
		}()
	}
	p.stop = context.AfterFunc(ctx, func() { p.kill(ctx.Err()) })
	go p.watch()
	return p, nil
}

// watch waits for the exit.
func (p *Process) watch() {
	defer close(p.done)
	defer p.stop()
	for {
		f, err := p.st.next(context.Background())
		if err != nil {
			p.err = err
			return
		}
		switch f.Type {
		case protocol.TypeExecExit:
			var e protocol.ExecExit
			if err := protocol.Decode(f.Body, &e); err != nil {
				p.err = &ProtocolError{Msg: err.Error()}
				p.st.s.fail(p.err)
				return
			}
			p.exit = &e
			return
		case protocol.TypeError:
			p.err = remoteError(f.Body)
			return
		default:
			p.err = &ProtocolError{Msg: fmt.Sprintf("unexpected %s on an exec stream", f.Type)}
			p.st.s.fail(p.err)
			return
		}
	}
}

// killWait bounds how long a cancelled process's exit is awaited.
const killWait = 5 * time.Second

// kill asks the agent to kill the process group, and waits (a bounded
// time) for it to be dead; Wait then returns cause.
func (p *Process) kill(cause error) {
	select {
	case <-p.done:
		return
	default:
	}
	p.mu.Lock()
	if p.cause == nil {
		p.cause = cause
	}
	p.mu.Unlock()
	p.st.s.send(protocol.Header{Stream: p.st.id, Type: protocol.TypeCancel}, nil)
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.st.s.forget(p.st)
		p.st.finish(cause, true)
		<-p.done
	}
}

// Stdin is the process's stdin, with Cmd.OpenStdin; Close closes it (a
// terminal gets ^D). It is nil otherwise.
func (p *Process) Stdin() io.WriteCloser {
	if p.stdin == nil {
		return nil
	}
	return p.stdin
}

// Stdout is the process's stdout (or terminal) unless Cmd.Stdout took it.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr is the process's stderr unless Cmd.Stderr took it; empty with a TTY.
func (p *Process) Stderr() io.Reader { return p.stderr }

// Wait waits for the process to exit and its output to be copied to
// Cmd.Stdout and Cmd.Stderr. It returns nil for exit status 0, an
// *ExitError otherwise, and the context's error (wrapped) when the Start
// context ended first.
func (p *Process) Wait() error {
	<-p.done
	p.copies.Wait()
	p.mu.Lock()
	cause := p.cause
	p.mu.Unlock()
	if cause != nil {
		return fmt.Errorf("process %d killed: %w", p.Pid, cause)
	}
	if p.exit != nil && p.err == nil {
		if p.exit.Code == 0 {
			return nil
		}
		return &ExitError{Code: p.exit.Code, Signal: p.exit.Signal, CoreDumped: p.exit.CoreDumped, TimedOut: p.exit.TimedOut, SandboxStopped: p.exit.Shutdown}
	}
	if p.err != nil {
		return p.err
	}
	return errors.New("process ended without an exit status")
}

// ExitCode is the exit status (128+N for signal N) once Wait returned, or
// -1 while it runs or when it never reported one.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
	default:
		return -1
	}
	if p.exit == nil {
		return -1
	}
	return p.exit.Code
}

// Signal sends sig to the process group (in the guest, by name: SIGTERM
// is SIGTERM whatever this host numbers it). It does not wait.
func (p *Process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	name := ""
	if ok {
		name = unix.SignalName(s)
	}
	if name == "" {
		return fmt.Errorf("signal %v: not a signal the guest knows", sig)
	}
	return p.control(protocol.TypeSignal, &protocol.SignalRequest{Signal: name})
}

// Resize changes the size of the process's terminal (Cmd.TTY); the
// process gets SIGWINCH. It does not wait.
func (p *Process) Resize(rows, cols uint16) error {
	ws := &WindowSize{Rows: rows, Cols: cols}
	if err := ws.Validate(); err != nil {
		return err
	}
	return p.control(protocol.TypeResize, ws)
}

func (p *Process) control(t protocol.Type, body any) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	return p.st.s.send(protocol.Header{Stream: p.st.id, Type: t}, protocol.Encode(body))
}

// Close kills the process group if it still runs, and releases the
// handle. It is safe to call after Wait, and more than once.
func (p *Process) Close() error {
	p.closed.Do(func() {
		select {
		case <-p.done:
		default:
			p.kill(errors.New("process handle closed"))
		}
		p.stop()
		p.st.s.forget(p.st)
		p.st.finish(os.ErrClosed, true)
	})
	return nil
}

// stdinWriter writes a process's stdin within the agent's credit.
type stdinWriter struct {
	st     *stream
	mu     sync.Mutex
	closed bool
}

func (w *stdinWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return 0, os.ErrClosed
	}
	return writeChannel(w.st, p)
}

// Close sends EOF.
func (w *stdinWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	return w.st.s.send(protocol.Header{Stream: w.st.id, Type: protocol.TypeEOF, Channel: protocol.ChanIn}, nil)
}

// writeChannel sends p on a stream's ChanIn, in chunks within the credit.
func writeChannel(st *stream, p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n, err := st.in.Take(st.s.done, min(len(p), protocol.MaxChunk))
		if err != nil {
			if err == io.ErrClosedPipe {
				err = st.s.err
			}
			return total, err
		}
		if err := st.s.sendData(st, protocol.ChanIn, p[:n]); err != nil {
			return total, err
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// lockedWriter serialises writes from stdout and stderr to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
