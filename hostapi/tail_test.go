package hostapi

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestTail(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, content string
		limit         int64
		want          string
	}{
		{"short", "one\ntwo\n", 1024, "one | two"},
		{"cut at a line", "first line\nsecond\nthird\n", 14, "second | third"},
		{"empty", "", 1024, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tail(write(tt.name, tt.content), tt.limit); got != tt.want {
				t.Errorf("tail = %q, want %q", got, tt.want)
			}
		})
	}
	if got := tail(filepath.Join(dir, "absent"), 1024); got != "" {
		t.Errorf("tail of a missing file = %q", got)
	}
}

// TestTailOfAHugeConsole: the console log holds what the guest printed,
// as much as it likes; its tail costs the host the tail only, not the
// file's size.
func TestTailOfAHugeConsole(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console.log")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil { // 2 GiB, sparse
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("\nthe guest's last words\n"), 2<<30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := tail(p, 1024)
	runtime.ReadMemStats(&after)
	if got != "the guest's last words" {
		t.Errorf("tail = %q", got)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("tail of a 2 GiB console allocated %d bytes, want at most 1 MiB", n)
	}
}
