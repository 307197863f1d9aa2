//go:build linux

package guestagent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
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

// guestChanges records the paths the guest changed itself, for
// protocol.GuestChangeWindow: the host sees those changes too and reports
// them, but the guest kernel already fired their events.
type guestChanges struct {
	now func() time.Time

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

func newGuestChanges(now func() time.Time) *guestChanges {
	return &guestChanges{now: now, last: make(map[string]time.Time), window: protocol.GuestChangeWindow}
}

// note records a change of p by the guest now.
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

// recent reports whether the guest changed p within the window.
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
	g.bytes -= len(n.path)
	if g.last[n.path].Equal(n.at) {
		delete(g.last, n.path)
	}
}

// maxHandleSize is the kernel's MAX_HANDLE_SZ, the largest file handle.
const maxHandleSize = 128

// The fanotify events that mean a change by the guest.
const guestChangeMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_MODIFY | unix.FAN_ATTRIB |
	unix.FAN_MOVED_FROM | unix.FAN_MOVED_TO | unix.FAN_CLOSE_WRITE | unix.FAN_ONDIR

// watchGuestChanges follows the guest's changes to the file systems of
// mounts with fanotify (FAN_MARK_FILESYSTEM, FAN_REPORT_DFID_NAME, which
// needs CAP_SYS_ADMIN and a kernel with fanotify), until ctx ends. Each
// event names the thread that caused it (FAN_REPORT_TID): the injector's
// (the events the agent fires) and those outside the agent's PID
// namespace (0: the host's own, under the test double) are not the
// guest's changes.
func watchGuestChanges(ctx context.Context, mounts []string, injector int, log *slog.Logger) (*guestChanges, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK|unix.FAN_REPORT_DFID_NAME|unix.FAN_REPORT_TID, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fanotify: %w", err)
	}
	// Non-blocking, so that the runtime's poller waits for it and Close
	// ends a read in progress (Fd would make it blocking again).
	r := &fanReader{f: os.NewFile(uintptr(fd), "fanotify"), mounts: make(map[[2]int32]int), self: int32(injector), log: log, g: newGuestChanges(time.Now)}
	if err := r.mark(fd, mounts); err != nil {
		r.close()
		return nil, err
	}
	go r.run(ctx)
	return r.g, nil
}

// mark adds the file system of each mount to the group fd, and opens a
// mount of each for resolving the events' handles.
func (r *fanReader) mark(fd int, mounts []string) error {
	for _, m := range mounts {
		if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, guestChangeMask, unix.AT_FDCWD, m); err != nil {
			return fmt.Errorf("fanotify mark %s: %w", m, err)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(m, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", m, err)
		}
		if _, ok := r.mounts[st.Fsid.Val]; ok {
			continue
		}
		mfd, err := unix.Open(m, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", m, err)
		}
		r.mounts[st.Fsid.Val] = mfd
	}
	return nil
}

// fanReader reads a fanotify group's events into a guestChanges.
type fanReader struct {
	f      *os.File
	mounts map[[2]int32]int // a descriptor of a mount of each file system, by fsid
	self   int32            // the injector's thread
	log    *slog.Logger
	g      *guestChanges
}

func (r *fanReader) close() {
	r.f.Close()
	for _, fd := range r.mounts {
		unix.Close(fd)
	}
}

func (r *fanReader) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { r.f.Close() })
	defer stop()
	defer r.close()
	buf := make([]byte, 64<<10)
	overflowed := false
	for {
		n, err := r.f.Read(buf)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("file events: stopped following the guest's changes", "err", err)
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
				if p, err := r.resolve(ev); err == nil {
					r.g.note(p)
				}
			}
		}
	}
}

// resolve returns the path of an event's directory and name.
func (r *fanReader) resolve(ev fanEvent) (string, error) {
	mfd, ok := r.mounts[ev.fsid]
	if !ok {
		return "", errors.New("unknown file system")
	}
	fd, err := unix.OpenByHandleAt(mfd, *ev.handle, unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	dir, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if ev.name == "" || ev.name == "." {
		return dir, nil
	}
	if dir == "/" {
		return "/" + ev.name, nil
	}
	return dir + "/" + ev.name, nil
}

// fanEvent is what the agent uses of a fanotify event.
type fanEvent struct {
	mask   uint64
	pid    int32
	fsid   [2]int32
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
		if l < metaSize || l > len(b) || meta.Vers != unix.FANOTIFY_METADATA_VERSION {
			break
		}
		ev := fanEvent{mask: meta.Mask, pid: meta.Pid}
		if meta.Fd >= 0 {
			unix.Close(int(meta.Fd)) // not with FAN_REPORT_*FID; never leak one
		}
		info := b[int(meta.Metadata_len):l]
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
// fsid, a struct file_handle and, for DFID_NAME, the name.
func parseFid(b []byte, ev *fanEvent) {
	if len(b) < 16 {
		return
	}
	ev.fsid = [2]int32{int32(binary.NativeEndian.Uint32(b[0:4])), int32(binary.NativeEndian.Uint32(b[4:8]))}
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
