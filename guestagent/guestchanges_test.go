//go:build linux

package guestagent

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/poll"
	"golang.org/x/sys/unix"
)

// fanMeta encodes a struct fanotify_event_metadata.
func fanMeta(eventLen uint32, vers uint8, metaLen uint16, mask uint64, fd, pid int32) []byte {
	b := binary.NativeEndian.AppendUint32(nil, eventLen)
	b = append(b, vers, 0)
	b = binary.NativeEndian.AppendUint16(b, metaLen)
	b = binary.NativeEndian.AppendUint64(b, mask)
	b = binary.NativeEndian.AppendUint32(b, uint32(fd))
	return binary.NativeEndian.AppendUint32(b, uint32(pid))
}

// fanOK encodes a well-formed event of the classic format.
func fanOK(mask uint64, fd, pid int32) []byte {
	return fanMeta(unix.FAN_EVENT_METADATA_LEN, unix.FANOTIFY_METADATA_VERSION, unix.FAN_EVENT_METADATA_LEN, mask, fd, pid)
}

func TestParseFanotify(t *testing.T) {
	const size, vers = unix.FAN_EVENT_METADATA_LEN, unix.FANOTIFY_METADATA_VERSION
	modify := fanEvent{mask: unix.FAN_MODIFY, fd: 7, pid: 42}
	closeWrite := fanEvent{mask: unix.FAN_CLOSE_WRITE, fd: 8, pid: 43}
	// An event followed by an information record (FAN_REPORT_PIDFD's,
	// say): skipped by its length.
	withInfo := append(fanMeta(size+12, vers, size, unix.FAN_MODIFY, 7, 42), make([]byte, 12)...)
	tests := []struct {
		name string
		b    []byte
		want []fanEvent
	}{
		{"empty", nil, nil},
		{"one", fanOK(unix.FAN_MODIFY, 7, 42), []fanEvent{modify}},
		{"two", append(fanOK(unix.FAN_MODIFY, 7, 42), fanOK(unix.FAN_CLOSE_WRITE, 8, 43)...), []fanEvent{modify, closeWrite}},
		{"both bits", fanOK(unix.FAN_MODIFY|unix.FAN_CLOSE_WRITE, 7, 42), []fanEvent{{mask: unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE, fd: 7, pid: 42}}},
		{"overflow", fanOK(unix.FAN_Q_OVERFLOW, unix.FAN_NOFD, 0), []fanEvent{{mask: unix.FAN_Q_OVERFLOW, fd: unix.FAN_NOFD}}},
		{"an information record", append(withInfo, fanOK(unix.FAN_CLOSE_WRITE, 8, 43)...), []fanEvent{modify, closeWrite}},
		{"truncated", fanOK(unix.FAN_MODIFY, 7, 42)[:size-1], nil},
		{"a trailing fragment", append(fanOK(unix.FAN_MODIFY, 7, 42), 1, 2, 3), []fanEvent{modify}},
		{"another version", fanMeta(size, vers+1, size, unix.FAN_MODIFY, 7, 42), nil},
		{"event shorter than its metadata", fanMeta(size-1, vers, size, unix.FAN_MODIFY, 7, 42), nil},
		{"event longer than the buffer", fanMeta(size+1, vers, size, unix.FAN_MODIFY, 7, 42), nil},
		{"event of length zero", fanMeta(0, vers, size, unix.FAN_MODIFY, 7, 42), nil},
		{"metadata too short", fanMeta(size, vers, size-1, unix.FAN_MODIFY, 7, 42), nil},
		{"metadata past the event", fanMeta(size, vers, size+1, unix.FAN_MODIFY, 7, 42), nil},
		{"good then malformed", append(fanOK(unix.FAN_MODIFY, 7, 42), fanMeta(size, vers+1, size, unix.FAN_CLOSE_WRITE, 8, 43)...), []fanEvent{modify}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseFanotify(tt.b); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseFanotify: %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseFanotify(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, unix.FAN_EVENT_METADATA_LEN))
	f.Add(append(fanOK(unix.FAN_MODIFY, 7, 42), fanOK(unix.FAN_Q_OVERFLOW, unix.FAN_NOFD, 0)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if evs := parseFanotify(b); len(evs)*unix.FAN_EVENT_METADATA_LEN > len(b) {
			t.Fatalf("%d events from %d bytes", len(evs), len(b))
		}
	})
}

// openFile is what a test knows of a descriptor it opened: its number and
// its file, to tell whether that descriptor is still open.
type openFile struct {
	fd  int32
	dev uint64
	ino uint64
}

func openAt(t *testing.T, p string) openFile {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if (openFile{int32(fd), st.Dev, st.Ino}).open() {
			unix.Close(fd)
		}
	})
	return openFile{int32(fd), st.Dev, st.Ino}
}

// open reports whether the descriptor still refers to its file (a number
// reused since for another file does not count).
func (o openFile) open() bool {
	var st unix.Stat_t
	return unix.Fstat(int(o.fd), &st) == nil && st.Dev == o.dev && st.Ino == o.ino
}

// TestFanReaderHandle: the writes of other threads to the shares are
// recorded by path, nothing else is, and every descriptor an event carries
// is closed, whatever the event.
func TestFanReaderHandle(t *testing.T) {
	share, outside := t.TempDir(), t.TempDir()
	p := func(name string) string {
		p := filepath.Join(share, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	removed := p("removed")
	removedFile := openAt(t, removed)
	if err := os.Remove(removed); err != nil {
		t.Fatal(err)
	}
	const self = 1000
	tests := []struct {
		name   string
		path   string // the file of the event's descriptor
		file   *openFile
		mask   uint64
		pid    int32
		record bool
	}{
		{"a write", p("written"), nil, unix.FAN_MODIFY, 42, true},
		{"a close after writing", p("closed"), nil, unix.FAN_CLOSE_WRITE, 42, true},
		{"by the injector", p("injected"), nil, unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE, self, false},
		{"outside the PID namespace", p("host"), nil, unix.FAN_MODIFY, 0, false},
		{"not a write", p("read"), nil, unix.FAN_ACCESS, 42, false},
		{"an overflow with a descriptor", p("overflow"), nil, unix.FAN_Q_OVERFLOW | unix.FAN_MODIFY, 42, false},
		{"outside the shares", filepath.Join(outside, "f"), nil, unix.FAN_MODIFY, 42, false},
		{"removed since", removed, &removedFile, unix.FAN_MODIFY, 42, false},
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := &fanReader{self: self, log: slog.New(slog.NewTextHandler(&log, nil)), g: newGuestChanges([]string{share}, time.Now)}
	var evs []fanEvent
	var files []openFile
	for _, tt := range tests {
		f := tt.file
		if f == nil {
			o := openAt(t, tt.path)
			f = &o
		}
		files = append(files, *f)
		evs = append(evs, fanEvent{mask: tt.mask, fd: f.fd, pid: tt.pid})
	}
	// An overflow again, without a descriptor: one warning in all.
	r.handle(append(evs, fanEvent{mask: unix.FAN_Q_OVERFLOW, fd: unix.FAN_NOFD}))
	for i, tt := range tests {
		if files[i].open() {
			t.Errorf("%s: the event's descriptor is still open", tt.name)
		}
		if got := r.g.changed(tt.path); got != tt.record {
			t.Errorf("%s: recorded %v, want %v", tt.name, got, tt.record)
		}
	}
	if len(r.g.last) != 2 {
		t.Errorf("recorded %v, want the two writes only", r.g.last)
	}
	if n := strings.Count(log.String(), "too fast"); n != 1 {
		t.Errorf("%d overflow warnings, want 1:\n%s", n, &log)
	}
}

// TestWatchGuestChangesMountMark follows the writes to a tmpfs mounted for
// the test with a real fanotify group: another thread's and another
// process's writes are recorded, the excluded thread's are not, and no
// descriptor of the events is left open.
func TestWatchGuestChangesMountMark(t *testing.T) {
	if unix.Geteuid() != 0 {
		t.Skip("fanotify's notification groups and mounting need root")
	}
	share := t.TempDir()
	if err := unix.Mount("krunbox-test", share, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount a tmpfs (no CAP_SYS_ADMIN?): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(share, unix.MNT_DETACH) })
	p := func(name string) string { return filepath.Join(share, name) }

	// The injector: a thread of its own, which goes with its goroutine.
	tid, write, wrote := make(chan int), make(chan struct{}), make(chan error)
	go func() {
		runtime.LockOSThread()
		tid <- unix.Gettid()
		<-write
		wrote <- os.WriteFile(p("by-injector"), []byte("x"), 0o644)
	}()
	g, err := watchGuestChanges(t.Context(), []string{share}, <-tid, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("fanotify as root: %v", err)
	}
	close(write)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	// Written after the injector's: once they are recorded, its write's
	// events have been read too.
	if err := os.WriteFile(p("by-thread"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "sh", "-c", "echo x > "+p("by-process"))
	poll.Until(t, "the other thread's and process's writes recorded", 10*time.Second, func() bool {
		return g.changed(p("by-thread")) && g.changed(p("by-process"))
	})
	if g.changed(p("by-injector")) {
		t.Error("the injector's write was taken for the guest's")
	}
	poll.Until(t, "no descriptor of the share's files left open", 10*time.Second, func() bool {
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); strings.HasPrefix(l, share+"/") {
				return false
			}
		}
		return true
	})
}
