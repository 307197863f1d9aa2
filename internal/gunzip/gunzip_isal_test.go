//go:build cgo && linux && amd64 && krunbox_isal

package gunzip

import (
	"bytes"
	"crypto/sha256"
	"runtime"
	"slices"
	"testing"
	"time"
)

// ISA-L's AVX-512 inflate returns with the upper halves of the vector
// registers dirty, and until a vzeroupper every legacy-SSE instruction the
// thread runs pays for it: Go's SHA-256 (SHA-NI) of the layer's diff_id,
// run right after each inflate on the same thread, was 40 times slower.
// The reader clears them after each call.
func TestNoSSEPenaltyAfterInflate(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	in := gz(t, 6, content(16<<20, 13))
	zr, err := NewReader(bytes.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	block := make([]byte, 64<<10)
	hash := func() time.Duration {
		start := time.Now()
		sha256.Sum256(block)
		return time.Since(start)
	}
	// The same thread hashes before any inflate, then right after each.
	var clean, after []time.Duration
	for range 40 {
		clean = append(clean, hash())
	}
	out := make([]byte, 256<<10)
	for range 40 {
		if _, err := zr.Read(out); err != nil {
			t.Fatal(err)
		}
		after = append(after, hash()) // the first instructions after the cgo call
	}
	c, a := slices.Min(clean), median(after)
	t.Logf("SHA-256 of 64 KiB: %v on a clean thread, %v right after an inflate", c, a)
	if a > 4*c {
		t.Fatalf("SHA-256 right after an inflate takes %v, %.0f times as long as on a clean thread (%v): the vector state is left dirty", a, float64(a)/float64(c), c)
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
