package fileevents

import (
	"github.com/krunbox/krunbox/guestagent/protocol"
)

// change is what one batch saw happen to one path, folded so that the last
// state wins.
type change struct {
	root     string // the guest path of the share's root
	existed  bool   // the path existed before the batch (its first event was not a create)
	exists   bool   // it exists now
	replaced bool   // it was created while it existed (a rename over it, an editor's save)
	dir      bool   // it is (or was) a directory
	modified bool
	attrib   bool
}

// batch accumulates changes between two deliveries: one entry per path, in
// the order paths first appeared, bounded by count and bytes. Past either
// bound the batch overflows: the per-path entries are dropped and what is
// delivered is a coarse "modify" of the root of each share that changed,
// so that the guest's watchers rescan.
type batch struct {
	maxPaths int
	maxBytes int

	order    []string
	changes  map[string]*change
	bytes    int
	overflow map[string]bool // share roots (guest paths) to report as modified
}

func newBatch(maxPaths, maxBytes int) *batch {
	return &batch{maxPaths: maxPaths, maxBytes: maxBytes, changes: make(map[string]*change)}
}

// empty reports whether the batch holds nothing to deliver.
func (b *batch) empty() bool { return len(b.order) == 0 && len(b.overflow) == 0 }

// add folds one event on path (a guest path within the share whose guest
// root is root) into the batch; dir says a created path is a directory. It
// reports false when the batch overflowed with this event (the first time
// only).
func (b *batch) add(root, path string, op protocol.FileEventOp, dir bool) bool {
	if b.overflow != nil {
		b.overflow[root] = true
		return true
	}
	c := b.changes[path]
	if c == nil {
		if len(b.order) >= b.maxPaths || b.bytes+len(path) > b.maxBytes {
			b.overflowTo(root)
			return false
		}
		c = &change{root: root, existed: op != protocol.FileCreate}
		c.exists = c.existed
		b.changes[path] = c
		b.order = append(b.order, path)
		b.bytes += len(path)
	}
	switch op {
	case protocol.FileCreate:
		c.replaced = c.existed
		c.exists, c.dir = true, dir
		c.modified, c.attrib = false, false
	case protocol.FileModify:
		c.modified = true
	case protocol.FileAttrib:
		c.attrib = true
	case protocol.FileDelete, protocol.FileDeleteDir:
		c.exists, c.modified, c.attrib = false, false, false
		c.dir = op == protocol.FileDeleteDir
	}
	return true
}

// overflowTo drops the per-path entries for a coarse modify of every share
// root they were in, and of root.
func (b *batch) overflowTo(root string) {
	b.overflow = map[string]bool{root: true}
	for _, c := range b.changes {
		b.overflow[c.root] = true
	}
	b.order, b.changes, b.bytes = nil, make(map[string]*change), 0
}

// take returns the batch's events and empties it.
func (b *batch) take() []protocol.FileEvent {
	var out []protocol.FileEvent
	if b.overflow != nil {
		for r := range b.overflow {
			out = append(out, protocol.FileEvent{Op: protocol.FileModify, Path: r})
		}
		b.overflow = nil
		return out
	}
	for _, p := range b.order {
		out = appendChange(out, p, b.changes[p])
	}
	b.order, b.changes, b.bytes = nil, make(map[string]*change), 0
	return out
}

// appendChange appends the events that bring a guest from the state before
// the batch to the state after it.
func appendChange(out []protocol.FileEvent, p string, c *change) []protocol.FileEvent {
	deleted := protocol.FileDelete
	if c.dir {
		deleted = protocol.FileDeleteDir
	}
	switch {
	case !c.existed && !c.exists:
		return out // created then deleted: nothing happened
	case !c.exists:
		return append(out, protocol.FileEvent{Op: deleted, Path: p})
	case !c.existed || c.replaced:
		out = append(out, protocol.FileEvent{Op: protocol.FileCreate, Path: p})
	}
	if c.modified {
		out = append(out, protocol.FileEvent{Op: protocol.FileModify, Path: p})
	}
	if c.attrib {
		out = append(out, protocol.FileEvent{Op: protocol.FileAttrib, Path: p})
	}
	return out
}
