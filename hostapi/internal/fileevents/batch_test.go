package fileevents

import (
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

type step struct {
	op  protocol.FileEventOp
	dir bool
}

func TestBatchCoalesces(t *testing.T) {
	create, modify, attrib := step{op: protocol.FileCreate}, step{op: protocol.FileModify}, step{op: protocol.FileAttrib}
	del, mkdir, rmdir := step{op: protocol.FileDelete}, step{op: protocol.FileCreate, dir: true}, step{op: protocol.FileDeleteDir}
	ev := func(op protocol.FileEventOp) protocol.FileEvent { return protocol.FileEvent{Op: op, Path: "/w/f"} }
	tests := []struct {
		name  string
		steps []step
		want  []protocol.FileEvent
	}{
		{"modified many times", []step{modify, modify, modify}, []protocol.FileEvent{ev(protocol.FileModify)}},
		{"created then modified", []step{create, modify, modify}, []protocol.FileEvent{ev(protocol.FileCreate), ev(protocol.FileModify)}},
		{"created then deleted", []step{create, modify, del}, nil},
		{"deleted then created", []step{del, create}, []protocol.FileEvent{ev(protocol.FileCreate)}},
		{"modified then deleted", []step{modify, del}, []protocol.FileEvent{ev(protocol.FileDelete)}},
		{"replaced by a rename", []step{modify, create}, []protocol.FileEvent{ev(protocol.FileCreate)}},
		{"delete, create, delete", []step{del, create, del}, []protocol.FileEvent{ev(protocol.FileDelete)}},
		{"attrib and modify", []step{attrib, modify}, []protocol.FileEvent{ev(protocol.FileModify), ev(protocol.FileAttrib)}},
		{"directory made then removed", []step{mkdir, rmdir}, nil},
		{"directory removed", []step{rmdir}, []protocol.FileEvent{ev(protocol.FileDeleteDir)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBatch(10, 1<<10)
			for _, s := range tt.steps {
				if !b.add("/w", "/w/f", s.op, s.dir) {
					t.Fatal("overflow")
				}
			}
			if got := b.take(); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if !b.empty() {
				t.Error("batch not empty after take")
			}
		})
	}
}

func TestBatchKeepsOrder(t *testing.T) {
	b := newBatch(10, 1<<10)
	for _, p := range []string{"/w/d", "/w/d/a", "/w/d/b"} {
		b.add("/w", p, protocol.FileCreate, p == "/w/d")
	}
	b.add("/w", "/w/d/a", protocol.FileModify, false)
	var got []string
	for _, e := range b.take() {
		got = append(got, string(e.Op)+" "+e.Path)
	}
	want := []string{"create /w/d", "create /w/d/a", "modify /w/d/a", "create /w/d/b"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestBatchOverflow(t *testing.T) {
	tests := []struct {
		name               string
		maxPaths, maxBytes int
	}{
		{"paths", 3, 1 << 10},
		{"bytes", 100, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBatch(tt.maxPaths, tt.maxBytes)
			b.add("/v", "/v/x", protocol.FileModify, false)
			overflowed := 0
			for _, p := range []string{"/w/a", "/w/b", "/w/c", "/w/d", "/w/e"} {
				if !b.add("/w", p, protocol.FileCreate, false) {
					overflowed++
				}
			}
			if overflowed != 1 {
				t.Errorf("add reported the overflow %d times, want once", overflowed)
			}
			got := b.take()
			slices.SortFunc(got, func(a, b protocol.FileEvent) int { return strings.Compare(a.Path, b.Path) })
			want := []protocol.FileEvent{{Op: protocol.FileModify, Path: "/v"}, {Op: protocol.FileModify, Path: "/w"}}
			if !slices.Equal(got, want) {
				t.Errorf("got %v, want a modify of each share root %v", got, want)
			}
			if b.add("/w", "/w/a", protocol.FileCreate, false); len(b.take()) != 1 {
				t.Error("the batch after an overflow is not an ordinary one")
			}
		})
	}
}
