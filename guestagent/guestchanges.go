//go:build linux

package guestagent

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// Bounds of the record of the guest's own changes.
const (
	// maxGuestChanges bounds the paths recorded: past it the oldest are
	// forgotten (their host echo is then delivered: a duplicate event in
	// the guest, no harm).
	maxGuestChanges = 16384
	// maxGuestChangeBytes bounds the bytes of the paths recorded.
	maxGuestChangeBytes = 4 << 20
)

// guestChanges records what the guest changed itself in the shares, for
// protocol.GuestChangeWindow: the host sees those changes too and reports
// them, but the guest kernel already fired their events. A change is
// keyed by its share, its directory's file handle and its name, as
// fanotify reports it: handles are encoded, never decoded, so neither the
// path of the directory nor the file system's export support is needed.
type guestChanges struct {
	now    func() time.Time
	mounts []string // the shares' mount points; a key holds the index

	mu     sync.Mutex
	last   map[string]time.Time
	order  []noted // in time order
	bytes  int
	window time.Duration
}

type noted struct {
	key string
	at  time.Time
}

func newGuestChanges(mounts []string, now func() time.Time) *guestChanges {
	return &guestChanges{now: now, mounts: mounts, last: make(map[string]time.Time), window: protocol.GuestChangeWindow}
}

// changeKey is the key of a change of name in the directory whose handle
// is h, in the share of index mount.
func changeKey(mount int, h unix.FileHandle, name string) string {
	return fmt.Sprintf("%d %d %x/%s", mount, h.Type(), h.Bytes(), name)
}

// atHandleFID is the kernel's AT_HANDLE_FID (Linux 6.5): a handle that
// identifies a file, as fanotify's, also on file systems that cannot
// open files by handle (virtio-fs without export support).
const atHandleFID = 0x200

// changed reports whether the guest changed p (a clean guest path in a
// share) itself within the window.
func (g *guestChanges) changed(p string) bool {
	m := -1
	for i, mp := range g.mounts {
		if strings.HasPrefix(p, mp+"/") && (m < 0 || len(mp) > len(g.mounts[m])) {
			m = i
		}
	}
	if m < 0 {
		return false
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path.Dir(p), atHandleFID)
	if err == unix.EINVAL {
		h, _, err = unix.NameToHandleAt(unix.AT_FDCWD, path.Dir(p), 0)
	}
	return err == nil && g.recent(changeKey(m, h, path.Base(p)))
}

// note records a change with key by the guest now.
func (g *guestChanges) note(p string) {
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

// recent reports whether the guest made the change with key p within the
// window.
func (g *guestChanges) recent(p string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.last[p]
	return ok && g.now().Sub(at) < g.window
}

// prune forgets the changes older than the window.
func (g *guestChanges) prune(now time.Time) {
	for len(g.order) > 0 && now.Sub(g.order[0].at) >= g.window {
		g.drop()
	}
	if len(g.order) == 0 {
		g.order = nil // let the array go
	}
}

// drop forgets the oldest change.
func (g *guestChanges) drop() {
	n := g.order[0]
	g.order = g.order[1:]
	g.bytes -= len(n.key)
	if g.last[n.key].Equal(n.at) {
		delete(g.last, n.key)
	}
}

// maxHandleSize is the kernel's MAX_HANDLE_SZ, the largest file handle.
const maxHandleSize = 128

// The fanotify events that mean a change by the guest.
const guestChangeMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MODIFY | unix.FAN_ATTRIB |
	unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_CLOSE_WRITE | unix.FAN_ONDIR

// watchGuestChanges follows the guest's changes to the file systems of
// mounts with fanotify (FAN_MARK_FILESYSTEM, FAN_REPORT_DFID_NAME, which
// needs CAP_SYS_ADMIN and a kernel with fanotify), until ctx ends: one
// group per mount, since virtio-fs file systems may have no fsid to tell
// them apart in one. Each event names the thread that caused it
// (FAN_REPORT_TID): the injector's (the events the agent fires) and those
// outside the agent's PID namespace (0: the host's own, under the test
// double) are not the guest's changes.
func watchGuestChanges(ctx context.Context, mounts []string, injector int, log *slog.Logger) (*guestChanges, error) {
	g := newGuestChanges(mounts, time.Now)
	var groups []*os.File
	for _, m := range mounts {
		fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_DFID_NAME|unix.FAN_REPORT_TID, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
		if err == nil {
			if err = unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, guestChangeMask, unix.AT_FDCWD, m); err != nil {
				unix.Close(fd)
			}
		}
		if err != nil {
			for _, f := range groups {
				f.Close()
			}
			return nil, fmt.Errorf("fanotify on %s: %w", m, err)
		}
		// Non-blocking, so that the runtime's poller waits for it and
		// Close ends a read in progress (Fd would make it blocking again).
		groups = append(groups, os.NewFile(uintptr(fd), "fanotify"))
	}
	for i, f := range groups {
		r := &fanReader{f: f, mount: i, self: int32(injector), log: log, g: g}
		go r.run(ctx)
	}
	return g, nil
}

// fanReader reads a fanotify group's events into a guestChanges.
type fanReader struct {
	f     *os.File
	mount int   // the index of the share the group marks
	self  int32 // the injector's thread
	log   *slog.Logger
	g     *guestChanges
}

func (r *fanReader) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { r.f.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	overflowed := false
	for {
		n, err := r.f.Read(buf)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("file events: stopped following the guest's changes", "err", err)
				r.f.Close()
			}
			return
		}
		for _, ev := range parseFanotify(buf[:n]) {
			switch {
			case ev.mask&unix.FAN_Q_OVERFLOW != 0:
				if !overflowed {
					overflowed = true
					r.log.Warn("file events: the guest's own changes came too fast to follow: some may be reported twice")
				}
			case ev.pid == 0 || ev.pid == r.self || ev.handle == nil:
			default:
				r.g.note(changeKey(r.mount, *ev.handle, ev.name))
			}
		}
	}
}

// fanEvent is what the agent uses of a fanotify event.
type fanEvent struct {
	mask   uint64
	pid    int32
	handle *unix.FileHandle // the directory's, nil without one
	name   string
}

// parseFanotify decodes the events in b (FAN_REPORT_DFID_NAME), skipping
// anything malformed.
func parseFanotify(b []byte) []fanEvent {
	var out []fanEvent
	const metaSize = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	for len(b) >= metaSize {
		meta := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
		l := int(meta.Event_len)
		ml := int(meta.Metadata_len)
		if l < metaSize || l > len(b) || ml < metaSize || ml > l || meta.Vers != unix.FANOTIFY_METADATA_VERSION {
			break
		}
		// With FAN_REPORT_*FID an event carries no descriptor (FAN_NOFD).
		ev := fanEvent{mask: meta.Mask, pid: meta.Pid}
		info := b[ml:l]
		for len(info) >= 4 {
			typ, ilen := info[0], int(binary.NativeEndian.Uint16(info[2:4]))
			if ilen < 4 || ilen > len(info) {
				break
			}
			if typ == unix.FAN_EVENT_INFO_TYPE_DFID_NAME || typ == unix.FAN_EVENT_INFO_TYPE_DFID {
				parseFid(info[4:ilen], &ev)
			}
			info = info[ilen:]
		}
		out = append(out, ev)
		b = b[l:]
	}
	return out
}

// parseFid decodes a fanotify_event_info_fid body after its header: the
// fsid (unused: a group marks one share), a struct file_handle and, for
// DFID_NAME, the name.
func parseFid(b []byte, ev *fanEvent) {
	if len(b) < 16 {
		return
	}
	hb := int(binary.NativeEndian.Uint32(b[8:12]))
	ht := int32(binary.NativeEndian.Uint32(b[12:16]))
	if hb > len(b)-16 || hb > maxHandleSize {
		return
	}
	h := unix.NewFileHandle(ht, bytes.Clone(b[16:16+hb]))
	ev.handle = &h
	if name := b[16+hb:]; len(name) > 0 {
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		ev.name = string(name)
	}
}
