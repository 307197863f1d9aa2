package isolate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// readIndex decodes the index r (.git/index of an isolated checkout) with
// go-git, which bounds neither the count of its entries nor the length
// of their names: a version-4 index compresses each name as the bytes
// to strip from the one before and the bytes to add, so that a file of
// a few hundred KB names gigabytes. r is read through an indexBounds,
// which refuses the index as soon as what it names crosses lim, before
// go-git has decoded (or allocated) it.
func readIndex(r io.Reader, lim Limits) (*index.Index, error) {
	b := &indexBounds{r: r, lim: lim, need: ixHeaderLen}
	idx := &index.Index{}
	err := index.NewDecoder(b).Decode(idx)
	if b.err != nil {
		return nil, b.err // what go-git made of it, if anything, says less
	}
	if err != nil {
		return nil, err
	}
	return idx, nil
}

// The parts of an index that indexBounds reads in turn.
const (
	ixHeader   = iota // signature, version, entry count
	ixStat            // an entry's stat data, hash and flags
	ixExtended        // its extended flags, when its flags say so
	ixStrip           // the bytes its name strips from the one before (version 4)
	ixName            // its name, ended by NUL (version 4, or a long name)
	ixNameLen         // its name, of the length its flags say
	ixPad             // the NULs after it (versions 2 and 3)
	ixRest            // extensions and checksum: not bounded here
)

// Sizes of the index format.
const (
	ixHeaderLen = 12
	ixStatLen   = 62 // stat data, hash, flags
	ixLongName  = 0xfff
	ixExtFlag   = 0x4000
)

// indexBounds reads an index from r and measures what it names as its
// bytes go by, in step with go-git's decoder: the entry count against
// lim.Files, each name against lim.PathBytes, all names against
// lim.PathsBytes. Names are measured, never kept, and each byte is
// looked at once. Past the entries (extensions, checksum) bytes pass
// unread; go-git checks the checksum.
type indexBounds struct {
	r   io.Reader
	lim Limits
	err error // the bound crossed, for good

	part    int
	need    int // bytes left of a fixed-length part
	header  [ixHeaderLen]byte
	version uint32
	count   uint32 // entries
	left    uint32 // entries not started
	flags   uint16
	fixed   int    // bytes of the entry before its name
	long    bool   // a version 2 or 3 name ended by NUL
	strip   uint64 // the version-4 strip length, as read so far
	varint  bool   // a byte of it was read
	name    int    // bytes of the current name, so far
	prev    int    // bytes of the previous name
	total   int64  // bytes of all names so far
}

func (b *indexBounds) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if cerr := b.check(p[:n]); cerr != nil {
		b.err = cerr
		return 0, cerr
	}
	return n, err
}

// check measures p, the next bytes of the index.
func (b *indexBounds) check(p []byte) error {
	for len(p) > 0 && b.part != ixRest {
		var err error
		switch b.part {
		case ixHeader:
			k := copy(b.header[ixHeaderLen-b.need:], p)
			p = p[k:]
			if b.need -= k; b.need == 0 {
				err = b.startEntries()
			}
		case ixStat:
			k := min(len(p), b.need)
			for j, c := range p[:k] {
				if ixStatLen-b.need+j >= ixStatLen-2 { // the flags end it
					b.flags = b.flags<<8 | uint16(c)
				}
			}
			p = p[k:]
			if b.need -= k; b.need == 0 {
				b.startName()
			}
		case ixExtended:
			k := min(len(p), b.need)
			p = p[k:]
			if b.need -= k; b.need == 0 {
				b.fixed += 2
				b.startName()
			}
		case ixStrip:
			// git's varint: 7 bits a byte, high bit set on all but the
			// last, each continuation adding one.
			c := p[0]
			p = p[1:]
			if b.varint {
				b.strip = (b.strip+1)<<7 | uint64(c&0x7f)
			} else {
				b.strip, b.varint = uint64(c&0x7f), true
			}
			switch {
			case b.strip > uint64(b.prev):
				err = fmt.Errorf("%w: entry %d strips more than the %d bytes of the name before", index.ErrMalformedIndexFile, b.entry(), b.prev)
			case c&0x80 == 0:
				b.part, b.name = ixName, b.prev-int(b.strip)
			}
		case ixName:
			end := bytes.IndexByte(p, 0)
			if end < 0 {
				b.name += len(p)
				p = nil
				err = b.checkName()
				break
			}
			b.name += end
			p = p[end+1:]
			err = b.endName()
		case ixNameLen:
			k := min(len(p), b.need)
			p = p[k:]
			b.name += k
			if b.need -= k; b.need == 0 {
				err = b.endName()
			}
		case ixPad:
			k := min(len(p), b.need)
			p = p[k:]
			if b.need -= k; b.need == 0 {
				b.nextEntry()
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startEntries reads the header: a count of entries over lim.Files is
// refused before any is read.
func (b *indexBounds) startEntries() error {
	b.version = binary.BigEndian.Uint32(b.header[4:8])
	b.count = binary.BigEndian.Uint32(b.header[8:12])
	if string(b.header[:4]) != "DIRC" || b.version < 2 || b.version > 4 {
		b.part = ixRest // go-git refuses it
		return nil
	}
	if int64(b.count) > int64(b.lim.Files) {
		return &LimitError{What: fmt.Sprintf("%d entries", b.count), Limit: "Files", Max: int64(b.lim.Files)}
	}
	b.left = b.count
	b.nextEntry()
	return nil
}

// nextEntry starts the next entry, or what follows the last.
func (b *indexBounds) nextEntry() {
	if b.left == 0 {
		b.part = ixRest
		return
	}
	b.left--
	b.part, b.need, b.flags, b.fixed = ixStat, ixStatLen, 0, ixStatLen
}

// startName follows the stat part with the extended flags, when its
// flags say so (go-git reads them in any version), or the name.
func (b *indexBounds) startName() {
	if b.part == ixStat && b.flags&ixExtFlag != 0 {
		b.part, b.need = ixExtended, 2
		return
	}
	b.name, b.strip, b.varint, b.long = 0, 0, false, false
	switch n := int(b.flags & ixLongName); {
	case b.version == 4:
		b.part = ixStrip
	case n == ixLongName:
		b.part, b.long = ixName, true
	default:
		b.part, b.need = ixNameLen, n
	}
}

// checkName checks the name read so far against lim.PathBytes.
func (b *indexBounds) checkName() error {
	if b.name > b.lim.PathBytes {
		return &LimitError{What: fmt.Sprintf("entry %d names a path of %d bytes or more", b.entry(), b.name), Limit: "PathBytes", Max: int64(b.lim.PathBytes)}
	}
	return nil
}

// endName counts the name just read and moves past it.
func (b *indexBounds) endName() error {
	if err := b.checkName(); err != nil {
		return err
	}
	if b.total += int64(b.name); b.total > b.lim.PathsBytes {
		return &LimitError{What: fmt.Sprintf("the paths of its first %d entries hold %d bytes", b.entry(), b.total), Limit: "PathsBytes", Max: b.lim.PathsBytes}
	}
	b.prev = b.name
	if b.version == 4 {
		b.nextEntry()
		return nil
	}
	// Versions 2 and 3 pad an entry with 1 to 8 NULs to a multiple of 8
	// bytes; a NUL-ended name has had the first.
	pad := 8 - (b.fixed+b.name)%8
	if b.long {
		pad--
	}
	if pad == 0 {
		b.nextEntry()
		return nil
	}
	b.part, b.need = ixPad, pad
	return nil
}

// entry returns the number, from 1, of the entry being read.
func (b *indexBounds) entry() uint32 { return b.count - b.left }
