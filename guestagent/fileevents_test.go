//go:build linux

package guestagent

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// eventsAgent serves an agent whose share is a new directory and whose
// injection interface is a plain file, as under the test double.
type eventsAgent struct {
	share, inject string
	a             *Agent
	hello         protocol.HelloReply
	nc            net.Conn
	br            *bufio.Reader
	next          uint32
}

func startEventsAgent(t *testing.T, version int) *eventsAgent {
	t.Helper()
	e := &eventsAgent{share: t.TempDir(), inject: filepath.Join(t.TempDir(), "fsnotify_inject")}
	if err := os.WriteFile(e.inject, nil, 0o200); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Config: &protocol.Config{Mounts: []protocol.Mount{{Tag: "w", Path: e.share}}}, FileEvents: e.inject})
	if err != nil {
		t.Fatal(err)
	}
	e.a = a
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve(l)
	t.Cleanup(func() { a.Shutdown(time.Second) })
	if e.nc, err = net.Dial("unix", sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.nc.Close() })
	e.br = bufio.NewReader(e.nc)
	e.nc.SetDeadline(time.Now().Add(20 * time.Second))
	e.nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHello}, protocol.Encode(&protocol.Hello{MinVersion: 1, MaxVersion: version})))
	f, err := protocol.ReadFrame(e.br)
	if err != nil || f.Type != protocol.TypeHelloReply {
		t.Fatalf("hello: %v %v", f.Type, err)
	}
	if err := protocol.Decode(f.Body, &e.hello); err != nil {
		t.Fatal(err)
	}
	return e
}

// send sends one FileEvents request and returns the frame that ends it.
func (e *eventsAgent) send(t *testing.T, events ...protocol.FileEvent) protocol.Frame {
	t.Helper()
	e.next++
	body := protocol.Encode(&protocol.FileEventsRequest{Events: events})
	if _, err := e.nc.Write(protocol.AppendFrame(nil, protocol.Header{Stream: e.next, Type: protocol.TypeFileEvents}, body)); err != nil {
		t.Fatal(err)
	}
	f, err := protocol.ReadFrame(e.br)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (e *eventsAgent) result(t *testing.T, events ...protocol.FileEvent) protocol.FileEventsResult {
	t.Helper()
	f := e.send(t, events...)
	if f.Type != protocol.TypeReply || f.Flags != protocol.FlagEnd {
		t.Fatalf("got %s (flags %d): %s, want an ending reply", f.Type, f.Flags, f.Body)
	}
	var r protocol.FileEventsResult
	if err := protocol.Decode(f.Body, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *eventsAgent) requests(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(e.inject)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFileEventsInjects(t *testing.T) {
	e := startEventsAgent(t, protocol.Version)
	if s := e.hello.FileEvents; s == nil || !s.Delivered {
		t.Fatalf("hello says file events are %v, want delivered", s)
	}
	p := func(rel string) string { return filepath.Join(e.share, rel) }
	r := e.result(t,
		protocol.FileEvent{Op: protocol.FileCreate, Path: p("a")},
		protocol.FileEvent{Op: protocol.FileModify, Path: p("a")},
		protocol.FileEvent{Op: protocol.FileAttrib, Path: p("a")},
		protocol.FileEvent{Op: protocol.FileDeleteDir, Path: p("d")},
		protocol.FileEvent{Op: protocol.FileMove, OldPath: p("x"), Path: p("y")},
		protocol.FileEvent{Op: protocol.FileModify, Path: e.share},
	)
	if r.Delivered != 6 {
		t.Errorf("result %+v, want 6 delivered", r)
	}
	want := "create\x00" + p("a") + "\x00modify\x00" + p("a") + "\x00attrib\x00" + p("a") + "\x00delete_dir\x00" + p("d") +
		"\x00move\x00" + p("x") + "\x00" + p("y") + "\x00modify\x00" + e.share + "\x00"
	if got := e.requests(t); got != want {
		t.Errorf("requests written:\n%q\nwant\n%q", got, want)
	}
}

func TestFileEventsRefused(t *testing.T) {
	e := startEventsAgent(t, protocol.Version)
	long := filepath.Join(e.share, strings.Repeat("x", protocol.MaxPath))
	many := make([]protocol.FileEvent, protocol.MaxFileEvents+1)
	for i := range many {
		many[i] = protocol.FileEvent{Op: protocol.FileModify, Path: filepath.Join(e.share, "f")}
	}
	tests := []struct {
		name   string
		events []protocol.FileEvent
	}{
		{"none", nil},
		{"too many", many},
		{"outside the shares", []protocol.FileEvent{{Op: protocol.FileModify, Path: "/etc/passwd"}}},
		{"a sibling of a share", []protocol.FileEvent{{Op: protocol.FileModify, Path: e.share + "x/f"}}},
		{"dot-dot", []protocol.FileEvent{{Op: protocol.FileModify, Path: e.share + "/../etc"}}},
		{"relative", []protocol.FileEvent{{Op: protocol.FileModify, Path: "f"}}},
		{"the share's root created", []protocol.FileEvent{{Op: protocol.FileCreate, Path: e.share}}},
		{"a move out", []protocol.FileEvent{{Op: protocol.FileMove, OldPath: "/etc/x", Path: filepath.Join(e.share, "f")}}},
		{"a move without its old path", []protocol.FileEvent{{Op: protocol.FileMove, Path: filepath.Join(e.share, "f")}}},
		{"an unknown op", []protocol.FileEvent{{Op: "overflow", Path: filepath.Join(e.share, "f")}}},
		{"NUL", []protocol.FileEvent{{Op: protocol.FileModify, Path: e.share + "/a\x00b"}}},
		{"too long", []protocol.FileEvent{{Op: protocol.FileModify, Path: long}}},
		// One bad path refuses the whole request: nothing is fired.
		{"one bad among good", []protocol.FileEvent{{Op: protocol.FileModify, Path: filepath.Join(e.share, "ok")}, {Op: protocol.FileModify, Path: "/"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := e.send(t, tt.events...)
			var perr protocol.Error
			protocol.Decode(f.Body, &perr)
			if f.Type != protocol.TypeError || perr.Code != "EINVAL" {
				t.Errorf("got %s %+v, want EINVAL", f.Type, perr)
			}
		})
	}
	if got := e.requests(t); got != "" {
		t.Errorf("refused requests fired events: %q", got)
	}
}

func TestFileEventsNeedVersion2(t *testing.T) {
	e := startEventsAgent(t, 1)
	f := e.send(t, protocol.FileEvent{Op: protocol.FileModify, Path: filepath.Join(e.share, "f")})
	if f.Type != protocol.TypeError || !strings.Contains(string(f.Body), protocol.CodeProtocol) {
		t.Errorf("a version-1 connection's file events: %s %s, want a protocol error", f.Type, f.Body)
	}
}

func TestFileEventsWithoutInterface(t *testing.T) {
	a, err := New(Options{Config: &protocol.Config{Mounts: []protocol.Mount{{Tag: "w", Path: t.TempDir()}}}, FileEvents: filepath.Join(t.TempDir(), "absent")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(time.Second)
	s := a.helloReply(&protocol.Hello{MinVersion: 1, MaxVersion: protocol.Version}).FileEvents
	if s.Delivered || s.String() != "not delivered: "+protocol.ErrNoFileEvents.Error() {
		t.Errorf("status %q, want not delivered for want of the interface", s)
	}
}

// TestFileEventsFilterGuestChanges: host events for paths the guest
// changed itself are dropped, but not those for what the agent's
// injections touched.
func TestFileEventsFilterGuestChanges(t *testing.T) {
	e := startEventsAgent(t, protocol.Version)
	if s := e.hello.FileEvents; !s.Filtered {
		if unix.Geteuid() != 0 {
			t.Skipf("fanotify needs CAP_SYS_ADMIN: %s", s)
		}
		t.Fatalf("not filtered as root: %s", s)
	}
	guest := filepath.Join(e.share, "by-guest")
	run(t, "sh", "-c", "echo x > "+guest)
	// The agent's own file writes count as the guest's too.
	own := filepath.Join(e.share, "by-agent")
	if err := os.WriteFile(own, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The guest's changes are followed asynchronously: the host's echo
	// comes at least a coalescing window later.
	deadline := time.Now().Add(10 * time.Second)
	for !e.a.events.guest.changed(guest) || !e.a.events.guest.changed(own) {
		if time.Now().After(deadline) {
			t.Fatal("the guest's changes were never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := e.result(t,
		protocol.FileEvent{Op: protocol.FileModify, Path: guest},
		protocol.FileEvent{Op: protocol.FileModify, Path: own},
		protocol.FileEvent{Op: protocol.FileModify, Path: filepath.Join(e.share, "by-host")},
	)
	if r.Filtered != 2 || r.Delivered != 1 {
		t.Errorf("result %+v, want the guest's two changes filtered and the host's delivered", r)
	}
	if got, want := e.requests(t), "modify\x00"+filepath.Join(e.share, "by-host")+"\x00"; got != want {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// TestFileEventsInjectionsNotEchoed: what the injector's own writes touch
// is not taken for a change by the guest. The interface here is a file in
// the share, so that writing to it is a change fanotify sees.
func TestFileEventsInjectionsNotEchoed(t *testing.T) {
	share := t.TempDir()
	inject := filepath.Join(share, "fsnotify_inject")
	if err := os.WriteFile(inject, nil, 0o200); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Config: &protocol.Config{Mounts: []protocol.Mount{{Tag: "w", Path: share}}}, FileEvents: inject})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(time.Second)
	if !a.events.status.Filtered {
		t.Skipf("no fanotify: %s", &a.events.status)
	}
	req := &protocol.FileEventsRequest{Events: []protocol.FileEvent{{Op: protocol.FileModify, Path: filepath.Join(share, "f")}}}
	for range 3 {
		if r, perr := a.events.fire(req); perr != nil || r.Delivered != 1 {
			t.Fatalf("fire: %+v %v", r, perr)
		}
	}
	// A write by another thread is seen: once it is, the injector's three
	// earlier writes have been read too.
	marker := filepath.Join(share, "marker")
	run(t, "touch", marker)
	deadline := time.Now().Add(10 * time.Second)
	for !a.events.guest.changed(marker) {
		if time.Now().After(deadline) {
			t.Fatal("the marker was never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a.events.guest.changed(inject) {
		t.Error("the injector's writes were taken for the guest's changes")
	}
}

// run runs a command in another process. An agent of another test, a
// subreaper, may reap it first (ECHILD): what it did is checked by the
// caller.
func run(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil && !errors.Is(err, syscall.ECHILD) {
		t.Fatalf("%s: %v: %s", argv, err, out)
	}
}

func TestGuestChangesBounded(t *testing.T) {
	now := time.Unix(0, 0)
	g := newGuestChanges([]string{"/w"}, func() time.Time { return now })
	g.note("/w/a")
	if !g.changed("/w/a") || g.changed("/w/b") {
		t.Fatal("changed")
	}
	now = now.Add(protocol.GuestChangeWindow)
	if g.changed("/w/a") {
		t.Error("a change older than the window is still recent")
	}
	for i := range maxGuestChanges + 10 {
		g.note(filepath.Join("/w", strings.Repeat("p", i%7), string(rune('a'+i%26)), time.Duration(i).String()))
	}
	if len(g.order) > maxGuestChanges || len(g.last) > maxGuestChanges {
		t.Errorf("%d changes recorded (%d paths), want at most %d", len(g.order), len(g.last), maxGuestChanges)
	}
	g.note("/w/" + strings.Repeat("x", maxGuestChangeBytes-3))
	if g.bytes > maxGuestChangeBytes || len(g.order) != 1 {
		t.Errorf("%d bytes in %d changes, want at most %d", g.bytes, len(g.order), maxGuestChangeBytes)
	}
}

// TestGuestChangesInSharesOnly: a write outside the shares (a mount mark
// may cover more than a share, outside a VM) is not recorded.
func TestGuestChangesInSharesOnly(t *testing.T) {
	g := newGuestChanges([]string{"/w", "/v/x"}, time.Now)
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/w/a", true},
		{"/v/x/deep/b", true},
		{"/w", false},
		{"/wx/a", false},
		{"/v/y", false},
		{"/etc/passwd", false},
		{"pipe:[1234]", false},
	} {
		g.note(tt.path)
		if got := g.changed(tt.path); got != tt.want {
			t.Errorf("%s recorded: %v, want %v", tt.path, got, tt.want)
		}
	}
}

// TestFileEventsFilterPerShare: a change the guest made in one share does
// not hide the host's change of the same name in another.
func TestFileEventsFilterPerShare(t *testing.T) {
	one, two := t.TempDir(), t.TempDir()
	inject := filepath.Join(t.TempDir(), "fsnotify_inject")
	if err := os.WriteFile(inject, nil, 0o200); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{Config: &protocol.Config{Mounts: []protocol.Mount{{Tag: "a", Path: one}, {Tag: "b", Path: two}}}, FileEvents: inject})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(time.Second)
	if !a.events.status.Filtered {
		t.Skipf("no fanotify: %s", &a.events.status)
	}
	run(t, "sh", "-c", "echo x > "+filepath.Join(two, "f"))
	deadline := time.Now().Add(10 * time.Second)
	for !a.events.guest.changed(filepath.Join(two, "f")) {
		if time.Now().After(deadline) {
			t.Fatal("the guest's change was never recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r, perr := a.events.fire(&protocol.FileEventsRequest{Events: []protocol.FileEvent{
		{Op: protocol.FileModify, Path: filepath.Join(two, "f")},
		{Op: protocol.FileModify, Path: filepath.Join(one, "f")},
	}})
	if perr != nil || r.Filtered != 1 || r.Delivered != 1 {
		t.Errorf("result %+v %v, want the second share's change filtered, the first's delivered", r, perr)
	}
}

// kernelStandIn takes injection requests as the guest kernel does, with
// ENOENT for a move or an event whose paths are not all in paths.
type kernelStandIn struct {
	paths map[string]bool
	fired []string // as "op path..."
}

func (k *kernelStandIn) Write(b []byte) (int, error) {
	f := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	for _, p := range f[1:] {
		if !k.paths[p] {
			return 0, syscall.ENOENT
		}
	}
	k.fired = append(k.fired, strings.Join(f, " "))
	return len(b), nil
}

func TestInjectMoveFallsBack(t *testing.T) {
	old, moved := "/w/d/old", "/w/new"
	move := protocol.FileEvent{Op: protocol.FileMove, OldPath: old, Path: moved}
	tests := []struct {
		name    string
		ev      protocol.FileEvent
		paths   []string // what the stand-in finds
		want    []string
		wantErr error
	}{
		{"a move", move, []string{old, moved}, []string{"move " + old + " " + moved}, nil},
		// The old path's directory was removed since: the new path is
		// still told of.
		{"old directory gone", move, []string{moved}, []string{"create " + moved}, nil},
		{"new path gone", move, []string{old}, []string{"delete " + old}, nil},
		{"both gone", move, nil, nil, syscall.ENOENT},
		{"not a move", protocol.FileEvent{Op: protocol.FileModify, Path: moved}, nil, nil, syscall.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := &kernelStandIn{paths: make(map[string]bool)}
			for _, p := range tt.paths {
				k.paths[p] = true
			}
			if _, err := inject(k, nil, tt.ev); !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Errorf("inject: %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(k.fired, tt.want) {
				t.Errorf("fired %q, want %q", k.fired, tt.want)
			}
		})
	}
}
