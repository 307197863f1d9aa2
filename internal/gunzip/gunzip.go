// Package gunzip decompresses gzip streams (one or more members) for the
// image puller, with the fastest streaming inflater the build has.
//
// Built with cgo and the build tag krunbox_isal on linux/amd64 (the
// Makefile sets it once hack/setup/isal.sh has built Intel's ISA-L, as a
// static library, from Debian's source package), streams are inflated by
// ISA-L's igzip, more than twice as fast as klauspost/compress on one
// core, and faster than libdeflate, without holding a whole member in memory.
// Otherwise they are inflated by klauspost/compress. Either way the stream
// is inflated as it is read, into the reader's buffer: the memory it takes
// does not depend on the stream, so the consumer's own limits bound a gzip
// bomb, and a layer inflates while it downloads.
package gunzip

import "io"

// NewReader returns a reader of the decompressed content of r, a gzip
// stream of one or more members. The reader checks each member's CRC-32
// and length; a corrupt or truncated stream, or one followed by anything
// but another member, is an error, never a silently short result. Close
// releases its memory.
func NewReader(r io.Reader) (io.ReadCloser, error) { return newReader(r) }
