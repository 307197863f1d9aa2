//go:build linux

package guestagent

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// Bounds of the record of the guest's own writes.
const (
	// maxGuestChanges bounds the paths recorded: past it the oldest are
	// forgotten (their host echo is then delivered: a duplicate event in
	// the guest, no harm).
	maxGuestChanges = 16384
	// maxGuestChangeBytes bounds the bytes of the paths recorded.
	maxGuestChangeBytes = 4 << 20
	// fanBatch bounds the fanotify events read at once: each holds a
	// descriptor of its file, open in the agent until it is handled.
	fanBatch = 128
)

// guestChanges records the files the guest wrote itself in the shares, for
// protocol.GuestChangeWindow: the host sees those writes too and reports
// them, but the guest kernel already fired their events. A write is keyed
// by the clean guest path of its file, as the descriptor fanotify opens
// for the event names it when it is read.
//
// What it covers is a file the guest opened for writing: its writes and
// its close (echo > f, a new file made by touch, an in-place save), whose
// host echoes (create, modify) are dropped. What it does not cover: the
// guest's mkdir, rename, chmod (or a touch of an existing file that only
// sets its times) and removal. fanotify reports those only to a group
// that marks the whole file system and names files by handle (FID mode),
// which virtio-fs refuses (ENODEV: it has no fsid), so their host echoes
// are fired in the guest again: a second event for its watchers, except
// for a removal, whose echo finds no file (counted as Gone). Nor a write
// whose file was renamed or removed before its event was read: the
// descriptor then names its new path, or none.
type guestChanges struct {
	now    func() time.Time
	mounts []string // the shares' mount points: paths elsewhere are not recorded

	mu     sync.Mutex
	last   map[string]time.Time
	order  []noted // in time order
	bytes  int
	window time.Duration
}

type noted struct {
	path string
	at   time.Time
}

func newGuestChanges(mounts []string, now func() time.Time) *guestChanges {
	return &guestChanges{now: now, mounts: mounts, last: make(map[string]time.Time), window: protocol.GuestChangeWindow}
}

// changed reports whether the guest wrote the file at p (a clean guest
// path) itself within the window.
func (g *guestChanges) changed(p string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.last[p]
	return ok && g.now().Sub(at) < g.window
}

// note records a write by the guest to the file at p now, if p lies in a
// share.
func (g *guestChanges) note(p string) {
	if !slices.ContainsFunc(g.mounts, func(m string) bool { return strings.HasPrefix(p, strings.TrimSuffix(m, "/")+"/") }) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.prune(now)
	for len(g.order) > 0 && (len(g.order) >= maxGuestChanges || g.bytes+len(p) > maxGuestChangeBytes) {
		g.drop()
	}
	g.last[p] = now
	g.order = append(g.order, noted{p, now})
	g.bytes += len(p)
}

// prune forgets the writes older than the window.
func (g *guestChanges) prune(now time.Time) {
	for len(g.order) > 0 && now.Sub(g.order[0].at) >= g.window {
		g.drop()
	}
	if len(g.order) == 0 {
		g.order = nil // let the array go
	}
}

// drop forgets the oldest write.
func (g *guestChanges) drop() {
	n := g.order[0]
	g.order = g.order[1:]
	g.bytes -= len(n.path)
	if g.last[n.path].Equal(n.at) {
		delete(g.last, n.path)
	}
}

// guestWriteMask are the fanotify events of a guest's write: a write(2)
// to a file, and the close of a file opened for writing (also when
// nothing was written: a new empty file). Events on names (create,
// rename, delete) and on attributes need FID mode, which virtio-fs
// refuses.
const guestWriteMask = unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE

// watchGuestChanges follows the guest's writes to the shares mounted at
// mounts with fanotify, until ctx ends: one notification group (which
// needs CAP_SYS_ADMIN and a kernel with fanotify) marking each share's
// mount (FAN_MARK_MOUNT, which virtio-fs allows, unlike a file-system
// mark). Each event carries a descriptor of the file written, which names
// its path: the kernel opens the file as the event is read (on virtio-fs,
// an open and a release sent to the host, also for the events the
// injector fires for a host modify). Each names the thread that wrote
// (FAN_REPORT_TID): the injector's (the events the agent fires) and those
// outside the agent's PID namespace (0) are not the guest's writes.
func watchGuestChanges(ctx context.Context, mounts []string, injector int, log *slog.Logger) (*guestChanges, error) {
	// O_RDONLY: the descriptors are only named, never read.
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_TID, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fanotify: %w", err)
	}
	for _, m := range mounts {
		if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, guestWriteMask, unix.AT_FDCWD, m); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("fanotify on %s: %w", m, err)
		}
	}
	g := newGuestChanges(mounts, time.Now)
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a read in progress (Fd would make it blocking again).
	r := &fanReader{f: os.NewFile(uintptr(fd), "fanotify"), self: int32(injector), log: log, g: g}
	go r.run(ctx)
	return g, nil
}

// fanReader reads a fanotify group's events into a guestChanges.
type fanReader struct {
	f    *os.File
	self int32 // the injector's thread
	log  *slog.Logger
	g    *guestChanges

	overflowed, unopened bool // warned of
}

func (r *fanReader) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { r.f.Close() })
	defer stop()
	buf := make([]byte, fanBatch*unix.FAN_EVENT_METADATA_LEN)
	for {
		n, err := r.f.Read(buf)
		r.handle(parseFanotify(buf[:n]))
		var errno syscall.Errno
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.As(err, &errno):
			// The kernel could not open the file of the event it was
			// reading (a file the guest may write but not read, one
			// removed on the host): it dropped that event, the next read
			// goes on with the others.
			if !r.unopened {
				r.unopened = true
				r.log.Warn("file events: a file the guest wrote could not be opened to be named: its changes may be reported twice", "err", err)
			}
		default:
			r.log.Warn("file events: stopped following the guest's writes", "err", err)
			r.f.Close()
			return
		}
	}
}

// handle records the guest's writes among evs, and closes every
// descriptor they carry.
func (r *fanReader) handle(evs []fanEvent) {
	for _, ev := range evs {
		switch {
		case ev.mask&unix.FAN_Q_OVERFLOW != 0:
			if !r.overflowed {
				r.overflowed = true
				r.log.Warn("file events: the guest's own writes came too fast to follow: some may be reported twice")
			}
		case ev.fd < 0 || ev.mask&guestWriteMask == 0 || ev.pid == 0 || ev.pid == r.self:
		default:
			// A file removed since is named "PATH (deleted)": not a
			// path to record.
			if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(ev.fd))); err == nil && !strings.HasSuffix(p, " (deleted)") {
				r.g.note(p)
			}
		}
		if ev.fd >= 0 {
			unix.Close(int(ev.fd))
		}
	}
}

// fanEvent is what the agent uses of a fanotify event.
type fanEvent struct {
	mask uint64
	fd   int32 // the file's descriptor, open; FAN_NOFD without one (an overflow)
	pid  int32 // the thread that caused it (FAN_REPORT_TID), 0 outside the agent's PID namespace
}

// parseFanotify decodes the events in b (struct fanotify_event_metadata,
// any information records after it skipped). It stops at the first event
// whose header cannot be trusted (another version, lengths shorter than
// the metadata or past b): what follows cannot be found, and a descriptor
// number read from it could be another of the agent's.
func parseFanotify(b []byte) []fanEvent {
	var out []fanEvent
	const metaSize = unix.FAN_EVENT_METADATA_LEN
	for len(b) >= metaSize {
		l := int(binary.NativeEndian.Uint32(b[0:4]))
		ml := int(binary.NativeEndian.Uint16(b[6:8]))
		if b[4] != unix.FANOTIFY_METADATA_VERSION || l < metaSize || l > len(b) || ml < metaSize || ml > l {
			break
		}
		out = append(out, fanEvent{
			mask: binary.NativeEndian.Uint64(b[8:16]),
			fd:   int32(binary.NativeEndian.Uint32(b[16:20])),
			pid:  int32(binary.NativeEndian.Uint32(b[20:24])),
		})
		b = b[l:]
	}
	return out
}
