//go:build cgo && linux && krunbox_libdeflate

package gunzip

import (
	"bytes"
	"io"
	"testing"

	"golang.org/x/sync/semaphore"
)

// withBudget runs the test with a budget of n bytes, and checks that every
// byte of it is given back.
func withBudget(t *testing.T, n int64) {
	old := budget
	budget = semaphore.NewWeighted(n)
	t.Cleanup(func() {
		if !budget.TryAcquire(n) {
			t.Error("the budget was not all given back")
		}
		budget = old
	})
}

// A gzip bomb's output never takes more memory than the budget: the member
// that does not fit is inflated as it is read, and the consumer's limits
// apply to it as before.
func TestBombStreams(t *testing.T) {
	withBudget(t, 4<<20)
	data := make([]byte, 64<<20)
	bomb := gz(t, 9, data)
	zr, err := NewReader(bytes.NewReader(bomb), int64(len(bomb)))
	if err != nil {
		t.Fatal(err)
	}
	z, ok := zr.(*wholeReader)
	if !ok {
		t.Fatalf("reader %T, want the whole-buffer reader (%d compressed bytes fit the budget)", zr, len(bomb))
	}
	// The consumer stops at its limit, as the applier does.
	n, err := io.Copy(io.Discard, io.LimitReader(zr, 8<<20))
	if err != nil || n != 8<<20 {
		t.Fatalf("read %d, %v", n, err)
	}
	if z.rest == nil {
		t.Fatal("the bomb was not handed to the stream reader")
	}
	if int64(len(z.out)) > 4<<20 {
		t.Fatalf("output buffer of %d bytes, over the budget", len(z.out))
	}
	n, err = io.Copy(io.Discard, zr)
	if err != nil || n != int64(len(data))-8<<20 {
		t.Fatalf("read the rest: %d, %v", n, err)
	}
	zr.Close()
}

// With the budget taken by other readers, a stream is inflated as it is
// read.
func TestBudgetTaken(t *testing.T) {
	withBudget(t, 1<<20)
	if !budget.TryAcquire(1 << 20) {
		t.Fatal("budget")
	}
	data := content(2<<20, 6)
	in := gz(t, 6, data)
	zr, err := NewReader(bytes.NewReader(in), int64(len(in)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := zr.(*wholeReader); ok {
		t.Fatal("whole-buffer reader without a budget")
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	budget.Release(1 << 20)
}

// Each member is inflated by libdeflate when the budget allows.
func TestWholeBufferUsed(t *testing.T) {
	withBudget(t, Budget)
	data := content(3<<20, 7)
	in := cat(gz(t, 6, data), gz(t, 1, data))
	zr, err := NewReader(bytes.NewReader(in), int64(len(in)))
	if err != nil {
		t.Fatal(err)
	}
	z := zr.(*wholeReader)
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, cat(data, data)) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if z.members != 2 || z.rest != nil {
		t.Fatalf("members %d, stream reader %v: want 2 members from libdeflate", z.members, z.rest != nil)
	}
	zr.Close()
}
