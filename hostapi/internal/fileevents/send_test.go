package fileevents

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
)

// fakeAgent answers the hello with status and records each FileEvents
// request's events.
type fakeAgent struct {
	path     string
	status   *protocol.FileEventsStatus
	requests chan []protocol.FileEvent
	conns    chan struct{}
}

func newFakeAgent(t *testing.T, status *protocol.FileEventsStatus) *fakeAgent {
	t.Helper()
	a := &fakeAgent{path: filepath.Join(t.TempDir(), "agent.sock"), status: status, requests: make(chan []protocol.FileEvent, 100), conns: make(chan struct{}, 10)}
	l, err := net.Listen("unix", a.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			a.conns <- struct{}{}
			go a.serve(nc)
		}
	}()
	return a
}

func (a *fakeAgent) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	if _, err := protocol.ReadFrame(br); err != nil {
		return
	}
	reply := protocol.HelloReply{Version: protocol.Version, MinVersion: 1, MaxVersion: protocol.Version, FileEvents: a.status}
	nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHelloReply}, protocol.Encode(&reply)))
	for {
		f, err := protocol.ReadFrame(br)
		if err != nil {
			return
		}
		var r protocol.FileEventsRequest
		if f.Type != protocol.TypeFileEvents || protocol.Decode(f.Body, &r) != nil {
			return
		}
		a.requests <- r.Events
		res := protocol.FileEventsResult{Delivered: len(r.Events)}
		nc.Write(protocol.AppendFrame(nil, protocol.Header{Stream: f.Stream, Type: protocol.TypeReply, Flags: protocol.FlagEnd}, protocol.Encode(&res)))
	}
}

func TestServeDelivers(t *testing.T) {
	a := newFakeAgent(t, &protocol.FileEventsStatus{Delivered: true, Filtered: true})
	host := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	lb := &syncbuf.Buffer{}
	go func() {
		done <- Serve(ctx, a.path, []Share{{HostPath: host, GuestPath: "/w"}}, Limits{}, slog.New(slog.NewTextHandler(lb, nil)))
	}()
	// Serve logs once it watches.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(lb.String(), "file events: delivered") {
		if time.Now().After(deadline) {
			t.Fatalf("Serve never said it watches; log: %s", lb)
		}
		time.Sleep(5 * time.Millisecond)
	}
	write(t, filepath.Join(host, "f"), "x")
	select {
	case evs := <-a.requests:
		if len(evs) != 2 || evs[0] != (protocol.FileEvent{Op: protocol.FileCreate, Path: "/w/f"}) {
			t.Errorf("request %v, want a create and a modify of /w/f", evs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestServeWithoutInterface(t *testing.T) {
	a := newFakeAgent(t, &protocol.FileEventsStatus{Reason: protocol.ErrNoFileEvents.Error()})
	lb := &syncbuf.Buffer{}
	// A share that cannot be watched: Serve must not even try.
	err := Serve(context.Background(), a.path, []Share{{HostPath: "/nonexistent", GuestPath: "/w"}}, Limits{}, slog.New(slog.NewTextHandler(lb, nil)))
	if err != nil {
		t.Errorf("Serve: %v, want nil: no watcher runs", err)
	}
	if !strings.Contains(lb.String(), "not delivered: the guest kernel has no fsnotify injection") {
		t.Errorf("log: %s", lb)
	}
}

func TestServeWaitsForTheAgent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := Serve(ctx, path, nil, Limits{}, slog.New(slog.DiscardHandler)); err == nil || ctx.Err() == nil {
		t.Errorf("Serve without an agent: %v, want it to wait until ctx ends", err)
	}
}

func TestSendSplits(t *testing.T) {
	a := newFakeAgent(t, &protocol.FileEventsStatus{Delivered: true})
	s, err := Dial(context.Background(), a.path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := "/w/" + strings.Repeat("x", protocol.MaxPath-3)
	tests := []struct {
		name  string
		n     int
		path  string
		sizes []int
	}{
		{"count", protocol.MaxFileEvents + 1, "/w/f", []int{protocol.MaxFileEvents, 1}},
		{"bytes", 2 * maxRequestPathBytes / len(long), long, []int{maxRequestPathBytes / len(long), maxRequestPathBytes / len(long)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs := make([]protocol.FileEvent, tt.n)
			for i := range evs {
				evs[i] = protocol.FileEvent{Op: protocol.FileModify, Path: tt.path}
			}
			if err := s.Send(context.Background(), evs); err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.sizes {
				if got := len(<-a.requests); got != want {
					t.Errorf("request %d: %d events, want %d", i, got, want)
				}
			}
		})
	}
}
