//go:build linux

package guestagent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

const (
	// defaultPath is PATH when neither the config nor the request sets it.
	defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// outputChunk is the most read from a process's output at a time.
	outputChunk = 64 << 10
	// drainIdle is how long output is still awaited after the process
	// exited, while it comes: a background child that keeps stdout open but
	// quiet does not hold the exec open beyond it.
	drainIdle = 100 * time.Millisecond
	// eotByte is what closing the stdin of a terminal sends: VEOF (^D).
	eotByte = 0x04
)

// execSpec is an exec request resolved in the guest.
type execSpec struct {
	path string
	argv []string
	env  []string
	dir  string
	cred *syscall.Credential
}

// resolveExec resolves the user, environment, working directory and
// program of req, reporting what makes the process impossible to start.
func (a *Agent) resolveExec(req *protocol.ExecRequest) (*execSpec, *protocol.Error) {
	userSpec := req.User
	if userSpec == "" {
		userSpec = a.cfg.User
	}
	id, perr := lookupIdentity(userSpec)
	if perr != nil {
		return nil, perr
	}
	cred, perr := id.credential()
	if perr != nil {
		return nil, perr
	}
	defaults := []string{"PATH=" + defaultPath, "HOME=" + id.home}
	if id.name != "" {
		defaults = append(defaults, "USER="+id.name, "LOGNAME="+id.name)
	}
	if req.TTY != nil {
		defaults = append(defaults, "TERM=xterm-256color")
	}
	env := protocol.MergeEnv(defaults, a.trustEnv, a.cfg.Env, req.Env)

	dir := req.Dir
	if dir == "" {
		dir = a.cfg.Workdir
	}
	if dir == "" {
		dir = "/"
	}
	dir = a.abs(dir)
	if fi, err := os.Stat(dir); err != nil {
		return nil, errorFor("chdir", dir, err)
	} else if !fi.IsDir() {
		return nil, errorFor("chdir", dir, syscall.ENOTDIR)
	}
	path, perr := lookPath(req.Argv[0], envValue(env, "PATH"), dir)
	if perr != nil {
		return nil, perr
	}
	return &execSpec{path: path, argv: req.Argv, env: env, dir: dir, cred: cred}, nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v
		}
	}
	return ""
}

// lookPath finds the program file of a process: a name with a slash as it
// is (relative to dir), any other in the directories of path.
func lookPath(file, path, dir string) (string, *protocol.Error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	denied := false
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		q := p
		if !filepath.IsAbs(q) {
			q = filepath.Join(dir, q)
		}
		fi, err := os.Stat(q)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode()&0o111 == 0 {
			denied = true
			continue
		}
		return p, nil
	}
	if denied {
		return "", &protocol.Error{Code: "EACCES", Op: "exec", Path: file, Message: "found in $PATH but not executable"}
	}
	return "", &protocol.Error{Code: "ENOENT", Op: "exec", Path: file, Message: "executable file not found in $PATH"}
}

// stdio holds a process's standard streams: the child's ends and ours.
type stdio struct {
	child  [3]*os.File
	stdin  *os.File // ours: write end of stdin, or the terminal
	stdout *os.File // ours: read end of stdout, or the terminal
	stderr *os.File // ours: read end of stderr, nil with a terminal
	tty    *os.File // the terminal's master side, or nil
}

func newStdio(req *protocol.ExecRequest) (s *stdio, err error) {
	s = &stdio{}
	defer func() {
		if err != nil {
			s.closeChild()
			s.close()
		}
	}()
	if req.TTY != nil {
		master, slave, err := openPTY(req.TTY)
		if err != nil {
			return s, fmt.Errorf("open a terminal: %w", err)
		}
		s.tty, s.stdin, s.stdout = master, master, master
		s.child = [3]*os.File{slave, slave, slave}
		return s, nil
	}
	if req.Stdin {
		if s.child[0], s.stdin, err = os.Pipe(); err != nil {
			return s, err
		}
	} else if s.child[0], err = os.Open(os.DevNull); err != nil {
		return s, err
	}
	if s.stdout, s.child[1], err = os.Pipe(); err != nil {
		return s, err
	}
	if s.stderr, s.child[2], err = os.Pipe(); err != nil {
		return s, err
	}
	return s, nil
}

// openPTY opens a pseudo-terminal of size ws. Its master side is made
// non-blocking, so that reads honour deadlines and Close.
func openPTY(ws *protocol.WindowSize) (master, slave *os.File, err error) {
	m, slave, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	// pty.Open leaves the master in blocking mode; take a non-blocking
	// duplicate that the runtime poller manages.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		slave.Close()
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, ws); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func setWinsize(f *os.File, ws *protocol.WindowSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	})
	return errors.Join(err, ierr)
}

func (s *stdio) closeChild() {
	seen := map[*os.File]bool{}
	for _, f := range s.child {
		if f != nil && !seen[f] {
			seen[f] = true
			f.Close()
		}
	}
}

func (s *stdio) close() {
	for _, f := range []*os.File{s.stdin, s.stdout, s.stderr} {
		if f != nil {
			f.Close()
		}
	}
}

// exec runs a process for an exec stream.
func (c *conn) exec(st *stream, req *protocol.ExecRequest) {
	spec, perr := c.a.resolveExec(req)
	if perr != nil {
		c.replyError(st, perr)
		return
	}
	sio, err := newStdio(req)
	if err != nil {
		c.replyError(st, errorFor("exec", spec.argv[0], err))
		return
	}
	attr := &syscall.ProcAttr{
		Dir:   spec.dir,
		Env:   spec.env,
		Files: []uintptr{sio.child[0].Fd(), sio.child[1].Fd(), sio.child[2].Fd()},
		Sys: &syscall.SysProcAttr{
			Setpgid:    req.TTY == nil,
			Setsid:     req.TTY != nil,
			Setctty:    req.TTY != nil,
			Credential: spec.cred,
		},
	}
	pid, exited, err := c.a.reaper.start(func() (int, error) {
		return syscall.ForkExec(spec.path, spec.argv, attr)
	})
	sio.closeChild()
	if err != nil {
		sio.close()
		e := errorFor("exec", spec.argv[0], err)
		switch {
		case errors.Is(err, syscall.ENOEXEC):
			e.Message = "not an executable format"
		case errors.Is(err, syscall.ENOENT) && isFile(spec.path):
			// The program is there: what execve did not find is the
			// interpreter of its #! line or its dynamic loader.
			e.Message = "no such file or directory: " + missingInterpreter(spec.path)
		}
		c.replyError(st, e)
		return
	}
	c.log.Debug("started", "pid", pid, "argv", spec.argv)
	if req.Main {
		c.a.mainStarted.Store(true)
	}
	st.mu.Lock()
	st.pid, st.master = pid, sio.tty
	st.mu.Unlock()
	// A detached main command's stream ends here: the process is the VM's.
	if err := c.reply(st, protocol.TypeExecStarted, &protocol.ExecStarted{Pid: pid}, req.Detach); err != nil {
		st.abort(err)
	}

	// Output pumps. Once the process has exited, each keeps going only
	// while output comes (drainIdle).
	leaderGone := make(chan struct{})
	outputs := []struct {
		ch protocol.Channel
		f  *os.File
	}{{protocol.ChanOut, sio.stdout}}
	if sio.stderr != nil {
		outputs = append(outputs, struct {
			ch protocol.Channel
			f  *os.File
		}{protocol.ChanErr, sio.stderr})
	}
	var wg sync.WaitGroup
	for _, o := range outputs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.pumpOutput(st, o.ch, o.f, leaderGone, req)
		}()
	}
	if req.Stdin || sio.tty != nil {
		go c.pumpInput(st, sio.stdin, sio.tty != nil, req)
	}

	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var ws syscall.WaitStatus
	timedOut := false
	cancelled := st.ctx.Done()
wait:
	for {
		select {
		case ws = <-exited:
			break wait
		case <-cancelled:
			if c.detached(req) {
				c.log.Info("the main command's connection ended: it keeps running", "pid", pid)
				cancelled = nil
				continue
			}
			syscall.Kill(-pid, syscall.SIGKILL)
			ws = <-exited
			break wait
		case <-timeout:
			timedOut = true
			syscall.Kill(-pid, syscall.SIGKILL)
			ws = <-exited
			break wait
		}
	}
	st.mu.Lock()
	st.pid = 0 // the group may be gone and its id reused: no more signals
	st.mu.Unlock()
	close(leaderGone)
	// Output nobody will read is dropped at once, but a detached main
	// command's, which goes to the console.
	dropOn := st.ctx.Done()
	if c.detached(req) {
		dropOn = nil
	}
	drainBy := time.Now().Add(drainIdle)
	if st.ctx.Err() != nil && dropOn != nil {
		drainBy = time.Now()
	}
	for _, o := range outputs {
		o.f.SetReadDeadline(drainBy)
	}
	pumped := make(chan struct{})
	go func() { wg.Wait(); close(pumped) }()
	select {
	case <-pumped:
	case <-dropOn:
		for _, o := range outputs {
			o.f.SetReadDeadline(time.Now())
		}
		<-pumped
	}
	sio.close()
	if st.in != nil {
		st.in.CloseWithError(errStreamEnded, true)
	}
	exit := exitOf(ws, timedOut)
	exit.Shutdown = c.a.stopping.Load()
	if !req.Detach {
		c.reply(st, protocol.TypeExecExit, exit, true)
	}
	if req.Main {
		go c.a.mainExited(c, exit)
	}
}

// detached reports whether the process of an exec stream whose context
// ended lives on: a main command started detached, or whose connection
// ended (not one the host cancelled).
func (c *conn) detached(req *protocol.ExecRequest) bool {
	return req.Main && (req.Detach || c.ctx.Err() != nil)
}

// mainLinger bounds how long the agent waits, after the main command
// exited, for the host that watched it to close its connection.
const mainLinger = 5 * time.Second

// mainExited shuts the agent down, which stops the VM, once the main
// command has exited and the host that watched it on c has closed its
// connection (having read the exit status), or after mainLinger.
func (a *Agent) mainExited(c *conn, exit *protocol.ExecExit) {
	t := time.NewTimer(mainLinger)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
	case <-t.C:
	}
	fmt.Fprintf(a.console, "krunbox-agent: the main command exited with status %d: stopping the VM\n", exit.Code)
	a.log.Info("main command exited, shutting down", "code", exit.Code)
	a.Shutdown(protocol.DefaultShutdownGrace)
}

// exitOf describes how a process ended.
func exitOf(ws syscall.WaitStatus, timedOut bool) *protocol.ExecExit {
	e := &protocol.ExecExit{Code: ws.ExitStatus(), TimedOut: timedOut}
	if ws.Signaled() {
		e.Code = 128 + int(ws.Signal())
		e.Signal = unix.SignalName(ws.Signal())
		e.CoreDumped = ws.CoreDump()
	}
	return e
}

// pumpOutput sends a process's output channel to the host; that of a
// main command whose connection ended goes to the agent's console.
func (c *conn) pumpOutput(st *stream, ch protocol.Channel, f *os.File, leaderGone <-chan struct{}, req *protocol.ExecRequest) {
	if req.Detach {
		io.Copy(c.a.console, f)
		return
	}
	_, err := c.sendFrom(st, ch, f, 0, outputChunk, func() {
		select {
		case <-leaderGone:
			f.SetReadDeadline(time.Now().Add(drainIdle))
		default:
		}
	})
	if err != nil && req.Main && !errors.Is(err, os.ErrDeadlineExceeded) {
		// A failed send: the connection is ending, or the process is gone.
		select {
		case <-st.ctx.Done():
		case <-leaderGone:
		}
		if c.detached(req) {
			var se *sendError
			if errors.As(err, &se) {
				c.a.console.Write(se.unsent)
			}
			_, err = io.Copy(c.a.console, f)
		}
	}
	if st.ctx.Err() == nil {
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, syscall.EIO) {
			c.log.Debug("output ended", "stream", st.id, "channel", ch, "err", err)
		}
		c.sendEOF(st, ch, false)
	}
}

// pumpInput copies the host's stdin to the process. The host's EOF closes
// a pipe, or sends ^D to a terminal; so does the end of the connection of
// a main command.
func (c *conn) pumpInput(st *stream, w *os.File, tty bool, req *protocol.ExecRequest) {
	if st.in == nil {
		return
	}
	_, err := st.in.WriteTo(w)
	if err != nil && c.detached(req) {
		err = nil
	}
	switch {
	case err == nil && tty:
		w.Write([]byte{eotByte})
	case err == nil:
		w.Close()
	default:
		// The process closed its stdin or exited: drop what else comes.
		st.in.CloseWithError(err, true)
	}
}

// control handles a Signal or Resize frame on an exec stream.
func (st *stream) control(c *conn, f protocol.Frame) error {
	st.mu.Lock()
	pid, master := st.pid, st.master
	st.mu.Unlock()
	switch f.Type {
	case protocol.TypeSignal:
		var r protocol.SignalRequest
		if err := protocol.Decode(f.Body, &r); errors.Is(err, protocol.ErrMalformed) {
			return err
		}
		sig := signalNum(r.Signal)
		if sig == 0 {
			c.log.Warn("ignoring unknown signal", "signal", r.Signal)
			return nil
		}
		if pid > 0 {
			syscall.Kill(-pid, sig)
		}
	case protocol.TypeResize:
		var ws protocol.WindowSize
		if err := protocol.Decode(f.Body, &ws); errors.Is(err, protocol.ErrMalformed) {
			return err
		} else if err != nil {
			c.log.Warn("ignoring bad window size", "err", err)
			return nil
		}
		if master != nil && pid > 0 {
			setWinsize(master, &ws)
		}
	}
	return nil
}

// signalNum maps "SIGTERM" or "TERM" to its number; 0 when unknown.
func signalNum(name string) syscall.Signal {
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return unix.SignalNum(name)
}

// isFile reports whether path is a regular file.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// missingInterpreter says what an existing program that execve reports as
// not found lacks: the interpreter its #! line names, or the dynamic loader
// of an ELF binary.
func missingInterpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "its interpreter or dynamic loader is missing"
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 256)).ReadString('\n')
	if rest, ok := strings.CutPrefix(line, "#!"); ok {
		if fields := strings.Fields(rest); len(fields) > 0 {
			return fmt.Sprintf("its interpreter %s is missing", fields[0])
		}
	}
	return "its interpreter or dynamic loader is missing (a dynamically linked program without its libc?)"
}
