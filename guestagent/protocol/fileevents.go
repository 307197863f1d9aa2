package protocol

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"time"
)

// FileEventOp is a change made on the host to a shared file, as the guest
// kernel's fsnotify injection interface (/proc/fs/fsnotify_inject) names it.
type FileEventOp string

// File event operations.
const (
	FileCreate    FileEventOp = "create"     // Path was created (a file or a directory)
	FileModify    FileEventOp = "modify"     // Path's content changed (a write and close)
	FileAttrib    FileEventOp = "attrib"     // Path's metadata changed
	FileDelete    FileEventOp = "delete"     // Path, not a directory, was removed
	FileDeleteDir FileEventOp = "delete_dir" // Path, a directory, was removed
	FileMove      FileEventOp = "move"       // OldPath was renamed to Path
)

func (op FileEventOp) valid() bool {
	switch op {
	case FileCreate, FileModify, FileAttrib, FileDelete, FileDeleteDir, FileMove:
		return true
	}
	return false
}

// GuestChangeWindow is how long after the guest wrote a file itself the
// agent drops host events for it: the host sees the guest's writes to a
// share too (within its coalescing window and the delivery's time), and the
// guest kernel already fired those events.
const GuestChangeWindow = 2 * time.Second

// MaxFileEvents bounds the events of one FileEventsRequest.
const MaxFileEvents = 4096

// FileEvent is one host change, named by guest paths: a share's guest
// mount point and the path below it.
type FileEvent struct {
	Op   FileEventOp `json:"op"`
	Path string      `json:"path"`
	// OldPath is the path a FileMove renamed; empty for the other ops.
	OldPath string `json:"old_path,omitempty"`
}

// FileEventsRequest carries one batch of host changes to the shares, for
// the agent to fire in the guest kernel (TypeFileEvents, protocol version
// 2). The agent answers Reply{FileEventsResult}.
type FileEventsRequest struct {
	Events []FileEvent `json:"events"`
}

// Validate implements Request: 1 to MaxFileEvents events, each with a
// known op and absolute, clean paths of at most MaxPath bytes.
func (r *FileEventsRequest) Validate() error {
	if len(r.Events) == 0 || len(r.Events) > MaxFileEvents {
		return fmt.Errorf("file events: %d events, want 1 to %d", len(r.Events), MaxFileEvents)
	}
	for i, e := range r.Events {
		if !e.Op.valid() {
			return fmt.Errorf("file event %d: unknown op %q", i, e.Op)
		}
		if err := checkEventPath("path", e.Path); err != nil {
			return fmt.Errorf("file event %d: %w", i, err)
		}
		if (e.Op == FileMove) != (e.OldPath != "") {
			return fmt.Errorf("file event %d: old_path is for a move, and a move needs one", i)
		}
		if e.Op == FileMove {
			if err := checkEventPath("old_path", e.OldPath); err != nil {
				return fmt.Errorf("file event %d: %w", i, err)
			}
		}
	}
	return nil
}

// CheckWithin checks that every path of the request names something in one
// of the shares mounted at mounts (clean absolute guest paths): below a
// mount point, or the mount point itself for a modify or attrib, which is
// how a batch that overflowed tells the guest to rescan.
func (r *FileEventsRequest) CheckWithin(mounts []string) error {
	for i, e := range r.Events {
		self := e.Op == FileModify || e.Op == FileAttrib
		if !within(mounts, e.Path, self) || (e.OldPath != "" && !within(mounts, e.OldPath, false)) {
			return fmt.Errorf("file event %d (%s %s): not in a share", i, e.Op, e.Path)
		}
	}
	return nil
}

func within(mounts []string, p string, self bool) bool {
	for _, m := range mounts {
		if (self && p == m) || strings.HasPrefix(p, strings.TrimSuffix(m, "/")+"/") && p != m {
			return true
		}
	}
	return false
}

func checkEventPath(field, p string) error {
	if err := checkPath(field, p); err != nil {
		return err
	}
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%s %q is not a clean absolute path", field, p)
	}
	return nil
}

// FileEventsResult answers a FileEventsRequest.
type FileEventsResult struct {
	// Delivered counts the events fired in the guest kernel.
	Delivered int `json:"delivered"`
	// Gone counts the events skipped because their path was no longer
	// there (changed again since): normal.
	Gone int `json:"gone,omitempty"`
	// Filtered counts the events dropped because the guest itself had
	// written the file within GuestChangeWindow: its kernel already fired
	// them.
	Filtered int `json:"filtered,omitempty"`
	// Failed counts the events the guest kernel refused otherwise.
	Failed int `json:"failed,omitempty"`
}

// FileEventsStatus is the agent's report of file events (HelloReply):
// whether host changes reach the guest's watchers.
type FileEventsStatus struct {
	// Delivered says the guest kernel can fire injected events: the host
	// may send FileEventsRequest.
	Delivered bool `json:"delivered"`
	// Filtered says the agent can tell the guest's own file writes apart
	// (fanotify), and drops host events for the files written. The
	// guest's own mkdir, rename, chmod and removal are not told apart:
	// their host events are fired again (a removal's finds no file).
	Filtered bool `json:"filtered,omitempty"`
	// Reason says why Delivered or Filtered is false.
	Reason string `json:"reason,omitempty"`
}

// String describes the status for a user ("delivered", "not delivered:
// ...").
func (s *FileEventsStatus) String() string {
	switch {
	case s == nil:
		return "not delivered: the guest agent predates file events"
	case !s.Delivered:
		return "not delivered: " + s.Reason
	case !s.Filtered:
		return "delivered (the guest's own changes may be reported twice: " + s.Reason + ")"
	}
	return "delivered"
}

// ErrNoFileEvents is the reason reported when the guest kernel has no
// fsnotify injection.
var ErrNoFileEvents = errors.New("the guest kernel has no fsnotify injection (a stock libkrunfw)")
