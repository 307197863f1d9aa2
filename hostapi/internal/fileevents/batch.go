package fileevents

import (
	"github.com/krunbox/krunbox/guestagent/protocol"
)

// change is what one batch saw happen to one path, folded so that the last
// state wins.
type change struct {
	path     string
	root     string // the guest path of the share's root
	existed  bool   // the path existed before the batch (its first event was not a create)
	exists   bool   // it exists now
	replaced bool   // it was created while it existed (a rename over it, an editor's save)
	dir      bool   // it is (or was) a directory
	modified bool
	attrib   bool
	// renamed says the path's last event renamed it away: the rename's
	// other half may follow (renameTo).
	renamed bool
	// from is the change of the path the guest knew before the batch
	// whose file was renamed to this one, in one rename or several: the
	// path is delivered as a move from there as long as it exists and
	// from still names it (a create of the path clears from).
	from *change
	// movedTo is the change a rename took this path's file to. Once it is
	// set the change is closed: a later event on the path opens a change
	// of its own, delivered after the move.
	movedTo *change
}

// batch accumulates changes between two deliveries: one entry per path (one
// more each time a path renamed away is used again), in the order they first
// appeared, bounded by count and bytes. Past either bound the batch
// overflows: the per-path entries are dropped and what is delivered is a
// coarse "modify" of the root of each share that changed, so that the
// guest's watchers rescan.
type batch struct {
	maxPaths int
	maxBytes int

	order    []*change
	changes  map[string]*change // the open change of each path
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
	if c == nil || c.movedTo != nil {
		if len(b.order) >= b.maxPaths || b.bytes+len(path) > b.maxBytes {
			b.overflowTo(root)
			return false
		}
		c = &change{path: path, root: root, existed: op != protocol.FileCreate}
		c.exists = c.existed
		b.changes[path] = c
		b.order = append(b.order, c)
		b.bytes += len(path)
	}
	c.renamed = false
	switch op {
	case protocol.FileCreate:
		c.replaced = c.existed
		c.exists, c.dir = true, dir
		c.modified, c.attrib = false, false
		c.from = nil
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

// renameFrom folds the first half of a rename, path renamed away (op is
// FileDelete, or FileDeleteDir for a directory): a delete, unless
// renameTo follows with the other half.
func (b *batch) renameFrom(root, path string, op protocol.FileEventOp) bool {
	var modified, attrib bool
	if c := b.changes[path]; c != nil && c.movedTo == nil {
		modified, attrib = c.modified, c.attrib
	}
	if !b.add(root, path, op, false) {
		return false
	}
	if c := b.changes[path]; c != nil { // nil past an overflow
		// What changed in the file goes with it, to renameTo. A delete
		// delivers none of it.
		c.renamed, c.modified, c.attrib = true, modified, attrib
	}
	return true
}

// renameTo folds the second half of a rename, from renamed to to (dir says
// it is a directory). When the batch saw from renamed away by this rename
// (renameFrom, from's last event), to is delivered as a move from the path
// the guest knew the file by: from, or where an earlier move of this batch
// took it from. Otherwise it is a create of to: the first half was
// delivered in an earlier batch, or the file was created within this one.
func (b *batch) renameTo(root, from, to string, dir bool) bool {
	f := b.changes[from]
	if !b.add(root, to, protocol.FileCreate, dir) {
		return false
	}
	c := b.changes[to]
	if c == nil || f == nil || !f.renamed || f == c {
		return true
	}
	f.renamed = false
	src := f.from // the file came to from by a move this batch delivers: move it on
	if src == nil && f.existed {
		src = f
	}
	// A move from a path whose new file the batch already holds would be
	// delivered after that file's events (a swap through a third path):
	// deliver the source's delete and a create instead.
	if src == nil || (src != f && b.changes[src.path] != src) {
		return true
	}
	f.from, f.movedTo = nil, c
	src.movedTo, c.from = c, src
	// What changed in the file before it moved is news at its new path.
	c.modified = f.modified || (src == f && f.replaced)
	c.attrib = f.attrib
	return true
}

// overflowTo drops the per-path entries for a coarse modify of every share
// root they were in, and of root.
func (b *batch) overflowTo(root string) {
	b.overflow = map[string]bool{root: true}
	for _, c := range b.order {
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
	for _, c := range b.order {
		out = appendChange(out, c)
	}
	b.order, b.changes, b.bytes = nil, make(map[string]*change), 0
	return out
}

// appendChange appends the events that bring a guest from the state before
// the batch to the state after it.
func appendChange(out []protocol.FileEvent, c *change) []protocol.FileEvent {
	if to := c.movedTo; to != nil && to.from == c && to.exists {
		return out // delivered as to's move
	}
	deleted := protocol.FileDelete
	if c.dir {
		deleted = protocol.FileDeleteDir
	}
	switch {
	case c.from != nil && c.exists:
		out = append(out, protocol.FileEvent{Op: protocol.FileMove, Path: c.path, OldPath: c.from.path})
	case !c.existed && !c.exists:
		return out // created then deleted: nothing happened
	case !c.exists:
		return append(out, protocol.FileEvent{Op: deleted, Path: c.path})
	case !c.existed || c.replaced:
		out = append(out, protocol.FileEvent{Op: protocol.FileCreate, Path: c.path})
	}
	if c.modified {
		out = append(out, protocol.FileEvent{Op: protocol.FileModify, Path: c.path})
	}
	if c.attrib {
		out = append(out, protocol.FileEvent{Op: protocol.FileAttrib, Path: c.path})
	}
	return out
}
