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

// applySteps folds steps into b, each "VERB PATH [PATH]" with paths below
// the share /w: create, mkdir, modify, attrib, rm, rmdir; mv and mvdir (a
// rename whose two halves the watcher paired), renamed (a first half
// alone: renamed out of the shares) and moved (a second half alone: its
// first half was delivered before). "|" delivers the batch: the events
// returned are those of every delivery, as "op [oldpath] path".
func applySteps(t *testing.T, b *batch, steps []string) []string {
	t.Helper()
	var out []string
	take := func() {
		for _, e := range b.take() {
			s := string(e.Op) + " "
			if e.OldPath != "" {
				s += e.OldPath + " "
			}
			out = append(out, s+e.Path)
		}
	}
	for _, s := range steps {
		f := strings.Fields(s)
		p := func(i int) string { return "/w/" + f[i] }
		ok := true
		switch f[0] {
		case "|":
			take()
			continue
		case "create", "mkdir":
			ok = b.add("/w", p(1), protocol.FileCreate, f[0] == "mkdir")
		case "modify":
			ok = b.add("/w", p(1), protocol.FileModify, false)
		case "attrib":
			ok = b.add("/w", p(1), protocol.FileAttrib, false)
		case "rm":
			ok = b.add("/w", p(1), protocol.FileDelete, false)
		case "rmdir":
			ok = b.add("/w", p(1), protocol.FileDeleteDir, false)
		case "renamed":
			ok = b.renameFrom("/w", p(1), protocol.FileDelete)
		case "moved":
			ok = b.renameTo("/w", p(1), p(2), false)
		case "mv", "mvdir":
			op := protocol.FileDelete
			if f[0] == "mvdir" {
				op = protocol.FileDeleteDir
			}
			ok = b.renameFrom("/w", p(1), op) && b.renameTo("/w", p(1), p(2), f[0] == "mvdir")
		default:
			t.Fatalf("unknown step %q", s)
		}
		if !ok {
			out = append(out, "overflow at "+s)
		}
	}
	take()
	return out
}

func TestBatchMoves(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
		want  []string
	}{
		{"plain move", []string{"mv a b"}, []string{"move /w/a /w/b"}},
		{"move then modify", []string{"mv a b", "modify b", "attrib b"}, []string{"move /w/a /w/b", "modify /w/b", "attrib /w/b"}},
		// What changed before the move is news at the new path.
		{"modify then move", []string{"modify a", "mv a b"}, []string{"move /w/a /w/b", "modify /w/b"}},
		{"replaced then moved", []string{"rm a", "create a", "mv a b"}, []string{"move /w/a /w/b", "modify /w/b"}},
		// As a local rename over a path: the move alone, whatever the
		// replaced file went through.
		{"move over an existing path", []string{"modify b", "mv a b"}, []string{"move /w/a /w/b"}},
		{"move over a deleted path", []string{"rm b", "mv a b"}, []string{"move /w/a /w/b"}},
		{"move of a directory", []string{"mvdir d e", "create e/f"}, []string{"move /w/d /w/e", "create /w/e/f"}},
		{"old path recreated", []string{"mv a b", "create a", "modify a"}, []string{"move /w/a /w/b", "create /w/a", "modify /w/a"}},
		{"old path's new file moved too", []string{"mv a b", "create a", "mv a c"}, []string{"move /w/a /w/b", "create /w/c"}},
		{"old directory recreated", []string{"mvdir d e", "mkdir d"}, []string{"move /w/d /w/e", "create /w/d"}},
		{"created then moved", []string{"create a", "modify a", "mv a b"}, []string{"create /w/b"}},
		{"first half delivered before", []string{"renamed a", "|", "moved a b"}, []string{"delete /w/a", "create /w/b"}},
		{"renamed out", []string{"renamed d"}, []string{"delete /w/d"}},
		{"second half alone", []string{"moved a b"}, []string{"create /w/b"}},
		{"old path changed between the halves", []string{"renamed a", "create a", "moved a b"}, []string{"create /w/a", "create /w/b"}},
		{"moved then deleted", []string{"mv a b", "rm b"}, []string{"delete /w/a"}},
		{"moved, deleted, created", []string{"mv a b", "rm b", "create b"}, []string{"delete /w/a", "create /w/b"}},
		{"moved then renamed out", []string{"mv a b", "renamed b"}, []string{"delete /w/a"}},
		{"moved twice", []string{"mv a b", "modify b", "mv b c"}, []string{"move /w/a /w/c", "modify /w/c"}},
		{"moved over a known path, then on", []string{"modify b", "mv a b", "mv b c"}, []string{"delete /w/b", "move /w/a /w/c"}},
		{"moved back", []string{"mv a b", "mv b a"}, []string{"delete /w/a", "create /w/a"}},
		{"rotated", []string{"mv a b", "mv c a"}, []string{"move /w/a /w/b", "move /w/c /w/a"}},
		// A swap through a third path cannot be told as moves in order:
		// the first path's file reaches the second after the second's
		// reached the first.
		{"swapped", []string{"mv a t", "mv b a", "mv t b"}, []string{"delete /w/a", "move /w/b /w/a", "create /w/b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBatch(10, 1<<10)
			if got := applySteps(t, b, tt.steps); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if !b.empty() {
				t.Error("batch not empty after take")
			}
		})
	}
}

func TestBatchMovesOverflow(t *testing.T) {
	tests := []struct {
		name     string
		maxPaths int
		steps    []string
		want     []string
	}{
		{"moves within the bound", 4, []string{"mv a b", "mv c d"}, []string{"move /w/a /w/b", "move /w/c /w/d"}},
		{"a move past the bound", 3, []string{"mv a b", "mv c d"}, []string{"overflow at mv c d", "modify /w"}},
		// A path renamed away and created again holds two entries.
		{"a recreated path counts twice", 2, []string{"mv a b", "create a"}, []string{"overflow at create a", "modify /w"}},
		{"moves after an overflow", 3, []string{"mv a b", "mv c d", "mv e f", "|", "mv g h"}, []string{"overflow at mv c d", "modify /w", "move /w/g /w/h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := applySteps(t, newBatch(tt.maxPaths, 1<<10), tt.steps); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
