// Package flatten applies OCI layer changesets, in order, to a directory.
//
// It implements the layer semantics of the OCI image specification
// (whiteouts, opaque directories, hard links to lower layers, type changes)
// and treats every layer as hostile: all file system operations go through
// directory handles resolved with openat2(RESOLVE_IN_ROOT), so no entry,
// link target or whiteout can reach outside the root, and symbolic links in
// the tree are never followed out of it. Device nodes are skipped; an entry
// of a type it does not know is an error, not silently dropped.
//
// Without root privileges (or with Options.Rootless), ownership is not
// applied: the tree stays usable by the current user and the true owner and
// mode of every regular file and directory are recorded in the
// user.containers.override_stat extended attribute, in the format of
// containers/storage ("uid:gid:mode:type", mode in octal).
package flatten

import (
	"errors"
	"fmt"
)

// OverrideStatXattr is the extended attribute that records the true owner,
// mode and type of a file in rootless mode (containers/storage format, also
// read by fuse-overlayfs and by libkrun's virtio-fs on macOS).
const OverrideStatXattr = "user.containers.override_stat"

// Default limits, generous enough for the largest real images.
const (
	DefaultMaxBytes   int64 = 64 << 30
	DefaultMaxEntries int64 = 4 << 20
)

// Options controls how layers are applied.
type Options struct {
	// Rootless skips chown and records ownership and special mode bits in
	// OverrideStatXattr instead; see the package documentation.
	Rootless bool
	// DropSetID clears the setuid and setgid bits of every file and
	// directory written, as Rootless does, for a tree that leaves krunbox's
	// private cache (an export into a directory other users may enter).
	DropSetID bool
	// MaxBytes bounds the uncompressed size of all layers together (tar
	// headers and contents); 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds the number of tar entries of all layers together;
	// 0 means DefaultMaxEntries.
	MaxEntries int64
}

// Stats counts what an Applier did.
type Stats struct {
	Entries   int64 // tar entries read
	Bytes     int64 // uncompressed tar bytes read
	Files     int64 // regular files written
	FileBytes int64 // bytes of regular file content written
	Dirs      int64
	Symlinks  int64
	Hardlinks int64
	Whiteouts int64 // whiteout and opaque markers applied
	// Devices counts character and block devices skipped.
	Devices int64
	// XattrsSkipped counts extended attributes not applied (not allowed in
	// this mode, or not supported by the file system).
	XattrsSkipped int64
}

// LimitError reports an image that exceeds one of Options' limits.
type LimitError struct {
	What  string // "size" or "entries"
	Limit int64
}

func (e *LimitError) Error() string {
	if e.What == "entries" {
		return fmt.Sprintf("image has more than %d tar entries (limit)", e.Limit)
	}
	return fmt.Sprintf("image is larger than %d bytes uncompressed (limit)", e.Limit)
}

// ErrUnsupported is returned on systems where layers cannot be applied
// safely (openat2 is needed).
var ErrUnsupported = errors.New("flattening image layers is not supported on this system (needs Linux 5.6 or later)")

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	return o
}
