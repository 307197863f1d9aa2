package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi"
)

// The exec methods of the serve protocol (docs/serve-protocol.md §5), and
// what they share with the file methods: the agent clients and the mapping
// of their errors.

// client returns the agent client of a sandbox, or a not-ready error when
// there is no such sandbox or when git hooks or config that the guest
// could write changed (hostapi.Sandbox.CheckGit). A client is made once per sandbox and kept: it
// connects again by itself after its VM restarted.
func (s *server) client(ctx context.Context, name string) (*hostapi.Client, error) {
	sb, err := s.host.Get(name)
	if err != nil {
		return nil, s.notReady(ctx, name, err)
	}
	// Checked at every call: git's hooks and config changed where they
	// could not be read-only stop the sandbox's use until reviewed.
	var gc *hostapi.GitChangedError
	if err := sb.CheckGit(); errors.As(err, &gc) {
		return nil, newError(codeNotReady, map[string]any{"hint": gc.Hint()}, "%v", err)
	} else if err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := s.clients[name]
	s.mu.Unlock()
	if c != nil {
		return c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[name]; c != nil {
		return c, nil
	}
	c = sb.Client(hostapi.WithClientName("krunbox-serve"), hostapi.WithClientLogger(s.log))
	s.clients[name] = c
	return c, nil
}

// notReady is the error of a call that could not reach a sandbox's agent.
func (s *server) notReady(ctx context.Context, name string, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st := s.status(ctx, name)
	msg := fmt.Sprintf("sandbox %s is not ready (%s)", name, st.State)
	switch {
	case st.State == stateAbsent:
		msg = fmt.Sprintf("sandbox %s does not exist", name)
	case st.State == stateReady:
		msg = fmt.Sprintf("sandbox %s: %v", name, cause)
	case st.Reason != "":
		msg += ": " + st.Reason
	}
	return newError(codeNotReady, map[string]any{"status": st, "hint": "start it with sandbox.ensure"}, "%s", msg)
}

// guestError maps an error of an agent call on sandbox name: the guest's
// own errors to their codes, what the guest sent over a bound to
// too-large, a connection that failed to not-ready.
func (s *server) guestError(ctx context.Context, name string, err error) error {
	errno, guest := guestErrno(err)
	if !guest {
		var pe *hostapi.ProtocolError
		var le *hostapi.LimitError
		switch {
		case errors.As(err, &le):
			return newError(codeTooLarge, nil, "%v", err)
		case errors.As(err, &pe):
			return newError(codeIO, nil, "%v", err)
		}
		return s.notReady(ctx, name, err)
	}
	code := codeIO
	switch errno {
	case syscall.ENOENT:
		code = codeNotFound
	case syscall.ENOTDIR:
		code = codeNotDir
	case syscall.EISDIR:
		code = codeIsDir
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		code = codePermission
	case syscall.EFBIG:
		code = codeTooLarge
	}
	return newError(code, nil, "%v", err)
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

// execEntry is a command this connection started.
type execEntry struct {
	sandbox string
	proc    *hostapi.Process // nil while it starts
	// done is closed once its exec.exit is sent (or dropped at the end).
	done chan struct{}
}

type execStartParams struct {
	Sandbox   string            `json:"sandbox"`
	ExecID    string            `json:"execId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TimeoutMs *int64            `json:"timeoutMs"`
	Stdin     *string           `json:"stdin"`
}

type execStartResult struct {
	ExecID string `json:"execId"`
	Pid    int    `json:"pid"`
}

type execOutput struct {
	ExecID string `json:"execId"`
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
}

type execExit struct {
	ExecID   string    `json:"execId"`
	ExitCode *int      `json:"exitCode"`
	Signal   *string   `json:"signal"`
	TimedOut bool      `json:"timedOut"`
	Error    *rpcError `json:"error,omitempty"`
}

func (s *server) execStart(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p execStartParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkName("sandbox", p.Sandbox); err != nil {
		return nil, nil, err
	}
	if len(p.ExecID) < 1 || len(p.ExecID) > 64 {
		return nil, nil, invalidParams("execId %q: want 1 to 64 characters", p.ExecID)
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return nil, nil, invalidParams("argv: want a non-empty array whose first element names a program")
	}
	if p.Cwd != "" && p.Cwd[0] != '/' {
		return nil, nil, invalidParams("cwd %q: want an absolute guest path", p.Cwd)
	}
	cmd := hostapi.Cmd{Args: p.Argv, Dir: p.Cwd}
	env, err := envList(p.Env)
	if err != nil {
		return nil, nil, invalidParams("env: %v", err)
	}
	cmd.Env = env
	if p.TimeoutMs != nil {
		if *p.TimeoutMs <= 0 {
			return nil, nil, invalidParams("timeoutMs %d: want more than 0", *p.TimeoutMs)
		}
		cmd.Timeout = time.Duration(*p.TimeoutMs) * time.Millisecond
	}
	if p.Stdin != nil {
		data, err := base64.StdEncoding.DecodeString(*p.Stdin)
		if err != nil {
			return nil, nil, invalidParams("stdin: not base64: %v", err)
		}
		cmd.Stdin = bytes.NewReader(data)
	}
	e := &execEntry{sandbox: p.Sandbox, done: make(chan struct{})}
	s.mu.Lock()
	if _, taken := s.execs[p.ExecID]; taken {
		s.mu.Unlock()
		return nil, nil, invalidParams("execId %q is already running", p.ExecID)
	}
	s.execs[p.ExecID] = e
	s.mu.Unlock()
	// forget frees the id; it is idempotent.
	forget := func() {
		s.mu.Lock()
		if s.execs[p.ExecID] == e {
			delete(s.execs, p.ExecID)
		}
		s.mu.Unlock()
	}
	c, err := s.client(ctx, p.Sandbox)
	if err != nil {
		forget()
		close(e.done)
		return nil, nil, err
	}
	// The command belongs to the connection, not to this request: it is
	// killed when the server ends.
	proc, err := c.Start(s.life, cmd)
	if err != nil {
		forget()
		close(e.done)
		return nil, nil, s.execStartError(ctx, p.Sandbox, err)
	}
	s.mu.Lock()
	e.proc = proc
	s.mu.Unlock()
	return &execStartResult{ExecID: p.ExecID, Pid: proc.Pid}, func() { go s.pump(p.ExecID, e, forget) }, nil
}

// execStartError maps a failed Start: a command that could not start is
// exec-failed, with the reason.
func (s *server) execStartError(ctx context.Context, sandbox string, err error) error {
	var se *hostapi.StartError
	if !errors.As(err, &se) {
		return s.guestError(ctx, sandbox, err)
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
	return newError(codeExecFailed, map[string]string{"reason": reason}, "%v", err)
}

// pump sends the command's output, then its exit; e.done closes once the
// exit is sent (or will not be).
func (s *server) pump(id string, e *execEntry, forget func()) {
	defer close(e.done)
	defer forget()
	defer e.proc.Close()
	var wg sync.WaitGroup
	for _, o := range []struct {
		name string
		r    io.Reader
	}{{"stdout", e.proc.Stdout()}, {"stderr", e.proc.Stderr()}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, outputChunk)
			for {
				n, err := o.r.Read(buf)
				if n > 0 {
					s.out.send(&message{Method: "exec.output", Params: &execOutput{ExecID: id, Stream: o.name, Data: buf[:n]}})
				}
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	err := e.proc.Wait()
	exit := &execExit{ExecID: id}
	var ee *hostapi.ExitError
	switch {
	case err == nil:
		exit.ExitCode = new(int)
	case errors.As(err, &ee):
		if ee.Signal != "" {
			exit.Signal = &ee.Signal
		} else {
			exit.ExitCode = &ee.Code
		}
		exit.TimedOut = ee.TimedOut
	case s.life.Err() != nil:
		return // killed because the server ends: nobody is listening
	default:
		exit.Error = newError(codeNotReady, nil, "sandbox %s stopped while the command ran: %v", e.sandbox, err)
	}
	// The id is free before the exit is sent: a client may reuse it as soon
	// as it sees the exit.
	forget()
	s.out.send(&message{Method: "exec.exit", Params: exit})
}

// killExecs kills the commands this connection runs in a sandbox and waits
// (a bounded time) until their exec.exit is sent.
func (s *server) killExecs(sandbox string) {
	s.mu.Lock()
	var kill []*execEntry
	for _, e := range s.execs {
		if e.sandbox == sandbox && e.proc != nil {
			kill = append(kill, e)
		}
	}
	s.mu.Unlock()
	deadline := time.After(shutdownWait)
	for _, e := range kill {
		e.proc.Signal(syscall.SIGKILL)
	}
	for _, e := range kill {
		select {
		case <-e.done:
		case <-deadline:
			e.proc.Close()
		}
	}
}

// serveSignals are the signals exec.signal sends.
var serveSignals = []string{"SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT", "SIGSTOP"}

func (s *server) execSignal(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		ExecID string `json:"execId"`
		Signal string `json:"signal"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if !slices.Contains(serveSignals, p.Signal) {
		return nil, nil, invalidParams("signal %q: want one of %v", p.Signal, serveSignals)
	}
	s.mu.Lock()
	e := s.execs[p.ExecID]
	var proc *hostapi.Process
	if e != nil {
		proc = e.proc
	}
	s.mu.Unlock()
	delivered := false
	if proc != nil {
		err := proc.Signal(unix.SignalNum(p.Signal))
		delivered = err == nil
		if err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.log.Warn("exec.signal", "execId", p.ExecID, "signal", p.Signal, "err", err)
		}
	}
	return map[string]bool{"delivered": delivered}, nil, nil
}
