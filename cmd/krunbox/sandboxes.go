package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/krunbox/krunbox/hostapi"
)

// getSandbox returns the sandbox called name, or an error with a hint.
func getSandbox(h *hostapi.Host, name string) (*hostapi.Sandbox, error) {
	sb, err := h.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, withHint(err, "'krunbox ls -a' lists the sandboxes")
	}
	return sb, err
}

// openSandbox returns the sandbox called name on the default directories.
func openSandbox(name string) (*hostapi.Sandbox, error) {
	h, err := hostapi.NewHost()
	if err != nil {
		return nil, err
	}
	return getSandbox(h, name)
}

// eachSandbox runs fn on the sandboxes called names, as eachName does,
// printing each name once done.
func eachSandbox(h *hostapi.Host, s *streams, names []string, fn func(*hostapi.Sandbox) error) error {
	return eachName(s, names, func(name string) error {
		sb, err := getSandbox(h, name)
		if err != nil {
			return err
		}
		if err := fn(sb); err != nil {
			return err
		}
		_, err = fmt.Fprintln(s.out, name)
		return err
	})
}

// eachName runs fn on each of names, in order, whatever happened to the
// others, as docker does. With one name, its error is returned as it is;
// with several, each error is reported on s.errOut as it comes, and the
// command exits with ExitKrunbox once all are done if any failed.
func eachName(s *streams, names []string, fn func(name string) error) error {
	if len(names) == 1 {
		return fn(names[0])
	}
	failed := false
	for _, name := range names {
		if err := fn(name); err != nil {
			report(s.errOut, err)
			failed = true
		}
	}
	if failed {
		return exitStatus(ExitKrunbox)
	}
	return nil
}

// createHint adds advice to the errors of creating a sandbox.
func createHint(err error, name string) error {
	switch {
	case errors.Is(err, hostapi.ErrExists):
		return withHint(err, "choose another --name, or remove the sandbox with 'krunbox rm "+name+"'")
	case errors.Is(err, hostapi.ErrInvalidMount) && !errors.As(err, new(hinter)):
		return withHint(err, "-v takes HOST[:GUEST][:ro] (or :cached, :ro,cached): HOST an existing directory, GUEST an absolute path outside /proc, /sys, /dev and /.krunbox")
	}
	return err
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stopForRemoval stops sb before it is removed and returns what its guest
// changed in git's hooks and config where they could not be read-only (a
// *hostapi.GitChangedError, with advice for a sandbox that is going): its
// record goes with the sandbox, so this is the last word on it. Other
// errors are left to the removal, which stops the sandbox too.
func stopForRemoval(ctx context.Context, sb *hostapi.Sandbox) error {
	var ge *hostapi.GitChangedError
	if err := sb.Stop(ctx); errors.As(err, &ge) {
		return withHint(ge, "review them before you run git on the host: the sandbox is removed, and krunbox will not say it again")
	}
	return nil
}
