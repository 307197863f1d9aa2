package vmm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// krunfwMarker is the name of the guest kernel's fsnotify injection file
// (/proc/fs/fsnotify_inject), which krunbox's libkrunfw adds: libkrunfw
// embeds its kernel uncompressed, so the name is in the library's bytes
// exactly when its kernel has the interface.
const krunfwMarker = "fsnotify_inject"

// maxKrunfwScan bounds the bytes of libkrunfw read for the marker (the
// library is about 21 MiB).
const maxKrunfwScan = 256 << 20

// KrunfwHasFileEvents reports whether the libkrunfw at path holds a guest
// kernel with the fsnotify injection, through which the agent wakes the
// guest's file watchers for host changes.
func KrunfwHasFileEvents(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	found, err := containsBounded(f, []byte(krunfwMarker), maxKrunfwScan)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return found, nil
}

// containsBounded reports whether r holds marker within its first max
// bytes, reading a chunk at a time.
func containsBounded(r io.Reader, marker []byte, max int64) (bool, error) {
	buf := make([]byte, 1<<20+len(marker))
	keep := 0 // the previous chunk's tail, for a marker across two chunks
	var total int64
	for total < max {
		n, err := r.Read(buf[keep:])
		total += int64(n)
		if bytes.Contains(buf[:keep+n], marker) {
			return true, nil
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		tail := min(len(marker)-1, keep+n)
		copy(buf, buf[keep+n-tail:keep+n])
		keep = tail
	}
	return false, nil
}
