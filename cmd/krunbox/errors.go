package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// Exit codes shared by every command. A command that ran in a sandbox exits
// with that command's own code instead.
const (
	// ExitKrunbox reports a failure of krunbox itself (bad usage, an image
	// that cannot be pulled, a VM that cannot start...).
	ExitKrunbox = 125
	// ExitCannotExec reports a command that was found but could not run.
	ExitCannotExec = 126
	// ExitNotFound reports a command that was not found.
	ExitNotFound = 127
)

// exitStatus is returned by a command whose work ran and finished with a
// status of its own: krunbox prints nothing more and exits with it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// codedError is reported like any error ("krunbox: ..." and its hint) but
// exits with its own code: a command the guest could not run (126, 127).
type codedError struct {
	err  error
	code int
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// hinter is implemented by errors that carry advice for the user. Any error
// in a wrapped chain may implement it; the outermost hint wins.
type hinter interface {
	Hint() string
}

// hintError attaches a hint to an error.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }
func (e *hintError) Hint() string  { return e.hint }

// withHint returns err with hint attached, or nil when err is nil.
func withHint(err error, hint string) error {
	if err == nil {
		return nil
	}
	return &hintError{err: err, hint: hint}
}

// usageError marks errors in how krunbox was called.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }
func (e *usageError) Hint() string  { return "see 'krunbox --help' or 'krunbox COMMAND --help'" }

// report prints err to w as one line, plus a hint line when the error has
// one, and returns the exit code to use.
func report(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(w, "krunbox: %s\n", msg)
	var h hinter
	if errors.As(err, &h) && h.Hint() != "" {
		fmt.Fprintf(w, "hint: %s\n", h.Hint())
	}
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code
	}
	return ExitKrunbox
}
