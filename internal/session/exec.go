package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi"
)

// The commands of a session (docs/serve-protocol.md §5), and what they
// share with the file calls: the agent clients and the mapping of their
// errors.

// client returns the agent client of a sandbox, or a not-ready error when
// there is no such sandbox or when git hooks or config that the guest
// could write changed (hostapi.Sandbox.CheckGit). A client is made once per sandbox and kept: it
// connects again by itself after its VM restarted.
func (m *Manager) client(ctx context.Context, name string) (*hostapi.Client, error) {
	sb, err := m.host.Get(name)
	if err != nil {
		return nil, m.notReady(ctx, name, err)
	}
	// Checked at every call: git's hooks and config changed where they
	// could not be read-only stop the sandbox's use until reviewed.
	var gc *hostapi.GitChangedError
	if err := sb.CheckGit(); errors.As(err, &gc) {
		return nil, NewError(CodeNotReady, map[string]any{"hint": gc.Hint()}, "%v", err)
	} else if err != nil {
		return nil, err
	}
	m.mu.Lock()
	c := m.clients[name]
	m.mu.Unlock()
	if c != nil {
		return c, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	if c := m.clients[name]; c != nil {
		return c, nil
	}
	c = sb.Client(hostapi.WithClientName(m.opts.ClientName), hostapi.WithClientLogger(m.log))
	m.clients[name] = c
	return c, nil
}

// notReady is the error of a call that could not reach a sandbox's agent.
func (m *Manager) notReady(ctx context.Context, name string, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st := m.status(ctx, name)
	msg := fmt.Sprintf("sandbox %s is not ready (%s)", name, st.State)
	switch {
	case st.State == StateAbsent:
		msg = fmt.Sprintf("sandbox %s does not exist", name)
	case st.State == StateReady:
		msg = fmt.Sprintf("sandbox %s: %v", name, cause)
	case st.Reason != "":
		msg += ": " + st.Reason
	}
	return NewError(CodeNotReady, map[string]any{"status": st, "hint": m.opts.StartHint}, "%s", msg)
}

// guestError maps an error of an agent call on sandbox name: the guest's
// own errors to their codes, what the guest sent over a bound to
// too-large, a connection that failed to not-ready.
func (m *Manager) guestError(ctx context.Context, name string, err error) error {
	errno, guest := guestErrno(err)
	if !guest {
		var pe *hostapi.ProtocolError
		var le *hostapi.LimitError
		switch {
		case errors.As(err, &le):
			return NewError(CodeTooLarge, nil, "%v", err)
		case errors.As(err, &pe):
			return NewError(CodeIO, nil, "%v", err)
		}
		return m.notReady(ctx, name, err)
	}
	code := CodeIO
	switch errno {
	case syscall.ENOENT:
		code = CodeNotFound
	case syscall.ENOTDIR:
		code = CodeNotDir
	case syscall.EISDIR:
		code = CodeIsDir
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		code = CodePermission
	case syscall.EFBIG:
		code = CodeTooLarge
	}
	return NewError(code, nil, "%v", err)
}

// guestErrno tells the errors the guest reported (guest) from those of the
// connection to it, and returns the guest's errno, if any. hostapi reports
// a guest errno as an *fs.PathError (or *os.LinkError) whose Err is the
// errno itself, and other guest errors as a *hostapi.RemoteError; a failed
// connection is neither.
func guestErrno(err error) (errno syscall.Errno, guest bool) {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		if e, ok := pe.Err.(syscall.Errno); ok {
			return e, true
		}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		if e, ok := le.Err.(syscall.Errno); ok {
			return e, true
		}
	}
	var re *hostapi.RemoteError
	if errors.As(err, &re) {
		errors.As(re.Err, &errno)
		return errno, true
	}
	return 0, false
}

// Exec is a command the session started. Its id is the client's; its
// output and end come through Pump.
type Exec struct {
	id      string
	sandbox string
	proc    *hostapi.Process // nil while it starts
	// done is closed once its end is reported (or dropped at the end).
	done chan struct{}
	// forget frees the id; it is idempotent.
	forget func()
}

// Pid returns the guest pid of the command (informational).
func (e *Exec) Pid() int { return e.proc.Pid }

// Exit is how a command ended: ExitCode when it exited, Signal (a name)
// when a signal killed it, TimedOut when its timeout passed (then Signal is
// SIGKILL), or Error when its end is unknown because the sandbox or the
// agent connection went away.
type Exit struct {
	ExitCode *int    `json:"exitCode"`
	Signal   *string `json:"signal"`
	TimedOut bool    `json:"timedOut"`
	Error    *Error  `json:"error,omitempty"`
}

// MaxExecID bounds the length of an exec id.
const MaxExecID = 64

// Start starts cmd in a sandbox under the client's id and returns as soon
// as it runs; Pump then reports its output and its end. The command belongs
// to the session, not to ctx: it is killed by Close, by Kill, or by a
// Restart of its sandbox. cmd.Args must name a program; cmd.Dir, when set,
// is an absolute guest path.
func (m *Manager) Start(ctx context.Context, sandbox, id string, cmd hostapi.Cmd) (*Exec, error) {
	if err := CheckName("sandbox", sandbox); err != nil {
		return nil, err
	}
	if len(id) < 1 || len(id) > MaxExecID {
		return nil, InvalidParams("execId %q: want 1 to %d characters", id, MaxExecID)
	}
	if len(cmd.Args) == 0 || cmd.Args[0] == "" {
		return nil, InvalidParams("argv: want a non-empty array whose first element names a program")
	}
	if cmd.Dir != "" && cmd.Dir[0] != '/' {
		return nil, InvalidParams("cwd %q: want an absolute guest path", cmd.Dir)
	}
	e := &Exec{id: id, sandbox: sandbox, done: make(chan struct{})}
	m.mu.Lock()
	if _, taken := m.execs[id]; taken {
		m.mu.Unlock()
		return nil, InvalidParams("execId %q is already running", id)
	}
	m.execs[id] = e
	m.mu.Unlock()
	e.forget = func() {
		m.mu.Lock()
		if m.execs[id] == e {
			delete(m.execs, id)
		}
		m.mu.Unlock()
	}
	c, err := m.client(ctx, sandbox)
	if err != nil {
		e.forget()
		close(e.done)
		return nil, err
	}
	// The command belongs to the session, not to this request: it is
	// killed when the session ends.
	proc, err := c.Start(m.life, cmd)
	if err != nil {
		e.forget()
		close(e.done)
		return nil, m.execStartError(ctx, sandbox, err)
	}
	m.mu.Lock()
	e.proc = proc
	m.mu.Unlock()
	return e, nil
}

// execStartError maps a failed Start: a command that could not start is
// exec-failed, with the reason.
func (m *Manager) execStartError(ctx context.Context, sandbox string, err error) error {
	var se *hostapi.StartError
	if !errors.As(err, &se) {
		return m.guestError(ctx, sandbox, err)
	}
	reason := "other"
	switch {
	case se.Op == "chdir":
		reason = "cwd"
	case se.Op == "exec" && errors.Is(err, fs.ErrNotExist):
		reason = "not-found"
	case se.Op == "exec" && errors.Is(err, fs.ErrPermission):
		reason = "permission"
	}
	return NewError(CodeExecFailed, map[string]string{"reason": reason}, "%v", err)
}

// OutputChunk bounds the data of one output call of Pump.
const OutputChunk = 64 << 10

// Pump reports the command's output to output (stream "stdout" or
// "stderr", at most OutputChunk bytes a call, from two goroutines), then
// its end to exit, after every output call; exit is not called when the
// session ended meanwhile. It returns once exit returned.
func (m *Manager) Pump(e *Exec, output func(stream string, data []byte), exit func(*Exit)) {
	defer close(e.done)
	defer e.forget()
	defer e.proc.Close()
	var wg sync.WaitGroup
	for _, o := range []struct {
		name string
		r    io.Reader
	}{{"stdout", e.proc.Stdout()}, {"stderr", e.proc.Stderr()}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, OutputChunk)
			for {
				n, err := o.r.Read(buf)
				if n > 0 {
					output(o.name, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	err := e.proc.Wait()
	end := &Exit{}
	var ee *hostapi.ExitError
	switch {
	case err == nil:
		end.ExitCode = new(int)
	case errors.As(err, &ee):
		if ee.Signal != "" {
			end.Signal = &ee.Signal
		} else {
			end.ExitCode = &ee.Code
		}
		end.TimedOut = ee.TimedOut
	case m.life.Err() != nil:
		return // killed because the session ends: nobody is listening
	default:
		end.Error = NewError(CodeNotReady, nil, "sandbox %s stopped while the command ran: %v", e.sandbox, err)
	}
	// The id is free before the end is reported: a client may reuse it as
	// soon as it sees the end.
	e.forget()
	exit(end)
}

// KillExecs kills the commands this session runs in a sandbox and waits
// (at most ShutdownWait) until their ends are reported.
func (m *Manager) KillExecs(sandbox string) {
	m.mu.Lock()
	var kill []*Exec
	for _, e := range m.execs {
		if e.sandbox == sandbox && e.proc != nil {
			kill = append(kill, e)
		}
	}
	m.mu.Unlock()
	killAll(kill)
}

// Kill kills the command id, if it runs, and waits (at most ShutdownWait)
// until its end is reported; past that its streams are closed, so that a
// guest that does not answer cannot hold its Pump.
func (m *Manager) Kill(id string) {
	m.mu.Lock()
	e := m.execs[id]
	running := e != nil && e.proc != nil
	m.mu.Unlock()
	if running {
		killAll([]*Exec{e})
	}
}

// killAll sends SIGKILL to each command and waits for their ends, closing
// the streams of those still running after ShutdownWait.
func killAll(execs []*Exec) {
	deadline := time.After(ShutdownWait)
	for _, e := range execs {
		e.proc.Signal(syscall.SIGKILL)
	}
	for _, e := range execs {
		select {
		case <-e.done:
		case <-deadline:
			e.proc.Close()
		}
	}
}

// Signal sends sig to the process group of the command id. It reports
// whether it was delivered: false when that command already exited or
// never existed (not an error: a cancel can race the exit).
func (m *Manager) Signal(id string, sig syscall.Signal) bool {
	m.mu.Lock()
	e := m.execs[id]
	var proc *hostapi.Process
	if e != nil {
		proc = e.proc
	}
	m.mu.Unlock()
	if proc == nil {
		return false
	}
	err := proc.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		m.log.Warn("signal", "execId", id, "signal", unix.SignalName(sig), "err", err)
	}
	return err == nil
}
