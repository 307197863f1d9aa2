//go:build linux

package guestagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"runtime"
	"syscall"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// injector fires the host's changes to the shares in the guest kernel,
// through its fsnotify injection interface (vmdev.FsnotifyInjectPath): one
// write(2) per event, "EVENT\0PATH\0" or "move\0OLDPATH\0NEWPATH\0" (but
// see inject). It skips the files the guest wrote itself lately
// (guestChanges), whose events the guest kernel already fired. The writes
// are made by one thread of their own, so that the events they fire, which
// name that thread, are told apart from the guest's writes, the agent's
// file requests included.
type injector struct {
	log    *slog.Logger
	mounts []string      // the shares' guest mount points
	guest  *guestChanges // nil when the guest's own writes cannot be told apart
	status protocol.FileEventsStatus
	f      *os.File // the interface, nil without one
	reqs   chan injectRequest
	done   <-chan struct{}
}

type injectRequest struct {
	events []protocol.FileEvent
	result chan<- protocol.FileEventsResult
}

// newInjector opens the injection interface at inject for the shares
// mounted at mounts and starts following the guest's own writes to them,
// until ctx ends. Without the interface, the status says why and nothing
// is delivered.
func newInjector(ctx context.Context, inject string, mounts []string, log *slog.Logger) *injector {
	in := &injector{log: log, mounts: mounts, reqs: make(chan injectRequest), done: ctx.Done()}
	if len(mounts) == 0 {
		in.status.Reason = "no shares"
		return in
	}
	f, err := os.OpenFile(inject, os.O_WRONLY|os.O_APPEND, 0)
	switch {
	case inject == "" || errors.Is(err, os.ErrNotExist):
		in.status.Reason = protocol.ErrNoFileEvents.Error()
		return in
	case err != nil:
		in.status.Reason = fmt.Sprintf("open %s: %v", inject, err)
		return in
	}
	in.f = f
	in.status.Delivered = true
	tid := make(chan int)
	go in.serve(ctx, tid)
	g, err := watchGuestChanges(ctx, mounts, <-tid, log)
	if err != nil {
		in.status.Reason = err.Error()
		return in
	}
	in.guest, in.status.Filtered = g, true
	return in
}

// serve makes the writes, on a thread of its own, until ctx ends.
func (in *injector) serve(ctx context.Context, tid chan<- int) {
	runtime.LockOSThread() // for good: the thread goes when serve returns
	tid <- unix.Gettid()
	defer in.f.Close()
	warned := make(map[syscall.Errno]bool)
	var buf []byte
	for {
		var req injectRequest
		select {
		case <-ctx.Done():
			return
		case req = <-in.reqs:
		}
		var res protocol.FileEventsResult
		for _, e := range req.events {
			if in.guest != nil && (in.guest.changed(e.Path) || (e.OldPath != "" && in.guest.changed(e.OldPath))) {
				res.Filtered++
				continue
			}
			var err error
			buf, err = inject(in.f, buf, e)
			var errno syscall.Errno
			errors.As(err, &errno)
			switch {
			case err == nil:
				res.Delivered++
			case errno == syscall.ENOENT:
				res.Gone++ // changed again since: normal
			default:
				res.Failed++
				if !warned[errno] {
					warned[errno] = true
					in.log.Warn("file events: the guest kernel refused an event", "op", e.Op, "path", e.Path, "err", err)
				}
			}
		}
		req.result <- res
	}
}

// inject writes e's request to f, in buf (returned for the next). A move
// the kernel cannot fire (ENOENT: a directory of one of its paths changed
// again since, later in the host's batch or after it, as a temporary
// directory a file was moved out of and then removed) is fired as what is
// left of it: a delete of the old path and a create of the new one, each
// if it can be, so that a watcher still learns of the path it can see.
// (Whether the old path was a directory is not known then: the new one is
// gone, or the delete cannot be fired either.)
func inject(f io.Writer, buf []byte, e protocol.FileEvent) ([]byte, error) {
	buf = appendInjectRequest(buf[:0], e)
	_, err := f.Write(buf)
	if e.Op != protocol.FileMove || !errors.Is(err, syscall.ENOENT) {
		return buf, err
	}
	buf = appendInjectRequest(buf[:0], protocol.FileEvent{Op: protocol.FileDelete, Path: e.OldPath})
	_, errDel := f.Write(buf)
	buf = appendInjectRequest(buf[:0], protocol.FileEvent{Op: protocol.FileCreate, Path: e.Path})
	if _, err = f.Write(buf); errDel == nil {
		return buf, nil
	}
	return buf, err
}

// appendInjectRequest appends e's request, "EVENT\0PATH\0" or
// "move\0OLDPATH\0NEWPATH\0", to buf.
func appendInjectRequest(buf []byte, e protocol.FileEvent) []byte {
	buf = append(append(buf, e.Op...), 0)
	if e.Op == protocol.FileMove {
		buf = append(append(buf, e.OldPath...), 0)
	}
	return append(append(buf, e.Path...), 0)
}

// fire delivers one request's events, once its paths are found to lie in
// the shares.
func (in *injector) fire(r *protocol.FileEventsRequest) (protocol.FileEventsResult, *protocol.Error) {
	if in.f == nil {
		return protocol.FileEventsResult{}, &protocol.Error{Code: "ENOTSUP", Op: "file-events", Message: "file events: " + in.status.Reason}
	}
	if err := r.CheckWithin(in.mounts); err != nil {
		return protocol.FileEventsResult{}, &protocol.Error{Code: "EINVAL", Op: "file-events", Message: err.Error()}
	}
	result := make(chan protocol.FileEventsResult, 1)
	select {
	case in.reqs <- injectRequest{events: r.Events, result: result}:
	case <-in.done:
		return protocol.FileEventsResult{}, &protocol.Error{Code: protocol.CodeShutdown, Op: "file-events", Message: "the agent is shutting down"}
	}
	return <-result, nil
}

// mountPaths returns the clean guest paths of the mounts that succeeded.
func mountPaths(ms []protocol.MountStatus) []string {
	var out []string
	for _, m := range ms {
		if m.Error == "" {
			out = append(out, path.Clean(m.Path))
		}
	}
	return out
}
