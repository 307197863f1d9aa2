package vmm

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

func TestContainsBounded(t *testing.T) {
	marker := []byte(krunfwMarker)
	chunk := 1 << 20
	tests := []struct {
		name string
		data []byte
		max  int64
		want bool
	}{
		{"absent", bytes.Repeat([]byte("x"), 3*chunk), 1 << 30, false},
		{"at the start", append(bytes.Clone(marker), bytes.Repeat([]byte("x"), chunk)...), 1 << 30, true},
		{"across two chunks", append(append(bytes.Repeat([]byte("x"), chunk-3), marker...), 'y'), 1 << 30, true},
		{"at the end", append(bytes.Repeat([]byte("x"), 2*chunk+17), marker...), 1 << 30, true},
		{"past the bound", append(bytes.Repeat([]byte("x"), 2*chunk), marker...), int64(chunk), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := containsBounded(bytes.NewReader(tt.data), marker, tt.max)
			if err != nil || got != tt.want {
				t.Errorf("%v, %v; want %v", got, err, tt.want)
			}
			// Short reads split the marker anywhere.
			got, err = containsBounded(iotest.HalfReader(bytes.NewReader(tt.data)), marker, tt.max)
			if err != nil || got != tt.want {
				t.Errorf("half reads: %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestKrunfwHasFileEvents(t *testing.T) {
	dir := t.TempDir()
	with, without := filepath.Join(dir, "with.so"), filepath.Join(dir, "without.so")
	os.WriteFile(with, []byte("\x7fELF...proc/fs/"+krunfwMarker+"\x00..."), 0o644)
	os.WriteFile(without, []byte("\x7fELF...proc/fs/"+strings.ToUpper(krunfwMarker)), 0o644)
	if ok, err := KrunfwHasFileEvents(with); !ok || err != nil {
		t.Errorf("with the marker: %v, %v", ok, err)
	}
	if ok, err := KrunfwHasFileEvents(without); ok || err != nil {
		t.Errorf("without: %v, %v", ok, err)
	}
	if _, err := KrunfwHasFileEvents(filepath.Join(dir, "absent")); err == nil {
		t.Error("no error for a missing file")
	}
}
