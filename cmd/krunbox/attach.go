package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/krunbox/krunbox/hostapi"
)

// attachFlags are the flags of the commands that run a process with the
// user's terminal (run, exec).
type attachFlags struct {
	stdin bool // -i: stream stdin
	tty   bool // -t: a pseudo-terminal in the guest
}

// forcedKill is how many forwarded interrupts make krunbox stop waiting for
// a guest process that ignores them.
const forcedKill = 3

// attach runs cmd in the guest with the user's standard streams and
// returns the process's exit code. SIGINT, SIGTERM and SIGHUP are
// forwarded to the guest process group (with -t, the guest's shell, which
// may ignore them): the third SIGINT or SIGTERM kills it. With -t and -i
// on a terminal, the terminal is put in raw mode, so keys, Ctrl-C
// included, reach the guest's terminal as bytes; its size follows
// SIGWINCH. The process is not tied to ctx: signals are its user's to give.
func attach(ctx context.Context, c *hostapi.Client, cmd hostapi.Cmd, s *streams, f attachFlags) (int, error) {
	cmd.Stdout = s.out
	if f.stdin {
		cmd.Stdin = s.in
	}
	if f.tty {
		ws := terminalSize(s)
		cmd.TTY = &ws
		if f.stdin {
			fd, ok := terminalFd(s.in)
			if !ok {
				return 0, &usageError{err: errors.New("-t with -i needs a terminal on stdin (drop -t to pipe input)")}
			}
			state, err := term.MakeRaw(fd)
			if err != nil {
				return 0, fmt.Errorf("terminal raw mode: %w", err)
			}
			defer term.Restore(fd, state)
		}
	} else {
		cmd.Stderr = s.errOut
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGWINCH)
	defer signal.Stop(sigs)

	pctx, kill := context.WithCancel(context.WithoutCancel(ctx))
	defer kill()
	p, err := c.Start(pctx, cmd)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- p.Wait() }()
	interrupts := 0
	for {
		select {
		case err := <-done:
			return exitCode(err)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGWINCH:
				if f.tty {
					ws := terminalSize(s)
					p.Resize(ws.Rows, ws.Cols)
				}
				continue
			case syscall.SIGINT, syscall.SIGTERM:
				if interrupts++; interrupts >= forcedKill {
					// The signal first: a main command outlives a
					// cancel that does not reach the agent.
					p.Signal(syscall.SIGKILL)
					kill()
					continue
				}
			}
			p.Signal(sig)
		}
	}
}

// exitCode turns the end of a guest process into krunbox's exit code: the
// process's own (128+N for signal N), or an error for krunbox to report.
func exitCode(err error) (int, error) {
	var ee *hostapi.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &ee) && !ee.SandboxStopped:
		return ee.Code, nil
	case errors.Is(err, context.Canceled):
		return 0, &codedError{err: fmt.Errorf("killed the guest process after %d interrupts or terminations", forcedKill), code: 128 + int(syscall.SIGKILL)}
	}
	return 0, err
}

// notStartedError gives a command the guest could not start the exit code a
// shell gives it: 127 for a program not found, 126 otherwise (not
// executable, bad working directory or user).
func notStartedError(err error) error {
	var se *hostapi.StartError
	if !errors.As(err, &se) {
		return err
	}
	code := ExitCannotExec
	if se.Op == "exec" && errors.Is(err, fs.ErrNotExist) {
		code = ExitNotFound
	}
	return &codedError{err: err, code: code}
}

// terminalFd returns the descriptor of r when it is a terminal.
func terminalFd(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// terminalSize is the size of the user's terminal (stdout's, else stdin's),
// or 24x80.
func terminalSize(s *streams) hostapi.WindowSize {
	for _, r := range []any{s.out, s.in} {
		if fd, ok := terminalFd(r); ok {
			if cols, rows, err := term.GetSize(fd); err == nil && rows > 0 && cols > 0 {
				return hostapi.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}
			}
		}
	}
	return hostapi.WindowSize{Rows: 24, Cols: 80}
}
