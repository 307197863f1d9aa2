package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriter(t *testing.T) {
	tests := []struct {
		name       string
		existing   string // the current file before
		writes     []string
		cur, prev  string
		wantWrites int // bytes Write reported in all
	}{
		{"under the bound", "", []string{"ab\n", "cd\n"}, "ab\ncd\n", "<none>", 6},
		{"a line that does not fit goes to a new file", "", []string{"abcd\n", "efgh\n"}, "efgh\n", "abcd\n", 10},
		{"exactly the bound", "", []string{"abcdefgh\n", "ij\n"}, "ij\n", "abcdefgh\n", 12},
		{"a write longer than the bound is cut at it", "", []string{"0123456789abcdefghij"}, "ij", "9abcdefgh", 20},
		{"the previous file is replaced", "", []string{"one\n", "two two\n", "three\n"}, "three\n", "two two\n", 18},
		{"an existing file counts", "12345678", []string{"x\n"}, "x\n", "12345678", 2},
		{"an existing file is appended to", "1234", []string{"x\n"}, "1234x\n", "<none>", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a.log")
			if tt.existing != "" {
				if err := os.WriteFile(p, []byte(tt.existing), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			w, err := NewWriter(p, 9)
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, s := range tt.writes {
				n, err := w.Write([]byte(s))
				if err != nil {
					t.Fatal(err)
				}
				total += n
			}
			w.Close()
			if total != tt.wantWrites {
				t.Errorf("wrote %d bytes, want %d", total, tt.wantWrites)
			}
			if got := read(t, p); got != tt.cur {
				t.Errorf("current file %q, want %q", got, tt.cur)
			}
			if got := read(t, Prev(p)); got != tt.prev {
				t.Errorf("previous file %q, want %q", got, tt.prev)
			}
		})
	}
}

// TestWriterBound writes a thousand times the bound: the log never holds
// more than twice it, and holds the latest lines.
func TestWriterBound(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.log")
	const bound = 4 << 10
	w, err := NewWriter(p, bound)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var last string
	for i := 0; i < 1000*bound/20; i++ {
		last = fmt.Sprintf("line %13d\n", i)
		if _, err := w.Write([]byte(last)); err != nil {
			t.Fatal(err)
		}
		if i%97 == 0 {
			for _, f := range []string{p, Prev(p)} {
				if fi, err := os.Stat(f); err == nil && fi.Size() > bound {
					t.Fatalf("%s holds %d bytes, over the bound of %d", f, fi.Size(), bound)
				}
			}
		}
	}
	if got := read(t, p); !strings.HasSuffix(got, last) {
		t.Errorf("the log does not end with the last line %q", last)
	}
}

func TestWriterRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep"), 0o600)
	os.Symlink(victim, filepath.Join(dir, "a.log"))
	if _, err := NewWriter(filepath.Join(dir, "a.log"), 100); err == nil {
		t.Fatal("NewWriter opened a symlink")
	}
	if got := read(t, victim); got != "keep" {
		t.Errorf("victim %q", got)
	}
}

// logWith makes the log a.log in a new directory from its previous and
// current files' content ("<none>": absent).
func logWith(t *testing.T, prev, cur string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "a.log")
	for f, s := range map[string]string{p: cur, Prev(p): prev} {
		if s == "<none>" {
			continue
		}
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestTailLines(t *testing.T) {
	tests := []struct {
		name, prev, cur string
		limit           int64
		want            string
	}{
		{"current only", "<none>", "one\ntwo\n", 100, "one\ntwo\n"},
		{"current cut at a line", "<none>", "first\nsecond\nthird\n", 10, "third\n"},
		{"current starting at a line", "<none>", "first\nsecond\nthird\n", 13, "second\nthird\n"},
		{"one long line", "<none>", "abcdef", 3, "def"},
		{"across the rotation", "p1\np2\n", "c1\n", 100, "p1\np2\nc1\n"},
		{"across the rotation, cut at a line", "p1\np2\n", "c1\n", 7, "p2\nc1\n"},
		{"a line split by the rotation", "aa\nbb", "bb\ncc\n", 8, "bbbb\ncc\n"},
		{"the current file holds enough", "p1\n", "c1\nc2\n", 4, "c2\n"},
		{"previous only (mid-rotation)", "p1\n", "<none>", 100, "p1\n"},
		{"an empty previous file", "", "c1\n", 3, "c1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TailLines(logWith(t, tt.prev, tt.cur), tt.limit)
			if err != nil || string(got) != tt.want {
				t.Errorf("TailLines = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := TailLines(filepath.Join(t.TempDir(), "absent"), 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("TailLines of no log: %v", err)
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		name, prev, cur string
		limit           int64
		want            string
		more            bool
	}{
		{"all of it", "p\n", "c\n", 4, "p\nc\n", false},
		{"within the current file", "p\n", "c1\nc2\n", 5, "1\nc2\n", true},
		{"the current file exactly", "p\n", "c\n", 2, "c\n", true},
		{"the current file exactly, nothing before", "", "c\n", 2, "c\n", false},
		{"into the previous file", "p1\np2\n", "c\n", 5, "p2\nc\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, more, err := Tail(logWith(t, tt.prev, tt.cur), tt.limit)
			if err != nil || string(got) != tt.want || more != tt.more {
				t.Errorf("Tail = %q, %v, %v; want %q, %v", got, more, err, tt.want, tt.more)
			}
		})
	}
}

// TestTailOfAHugeLog reads the tail of a 2 GiB file, sparse: only the tail.
func TestTailOfAHugeLog(t *testing.T) {
	p := logWith(t, "<none>", "")
	if err := os.Truncate(p, 2<<30); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("\nlast words\n")
	f.Close()
	got, err := TailLines(p, 1024)
	if err != nil || string(got) != "last words\n" {
		t.Errorf("TailLines = %q, %v", got, err)
	}
}

func TestOpen(t *testing.T) {
	for _, tt := range []struct{ prev, cur, want string }{
		{"<none>", "c\n", "c\n"},
		{"p\n", "c\n", "p\nc\n"},
		{"p\n", "<none>", "p\n"},
	} {
		r, err := Open(logWith(t, tt.prev, tt.cur))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil || string(b) != tt.want {
			t.Errorf("Open(%q, %q) read %q, %v; want %q", tt.prev, tt.cur, b, err, tt.want)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of no log: %v", err)
	}
}

// TestFollower follows a log written by a Writer that rotates it between
// copies: what it copies is exactly what was written.
func TestFollower(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.log")
	w, err := NewWriter(p, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fl := NewFollower(p)
	defer fl.Close()
	var written, copied bytes.Buffer
	for i := range 200 {
		line := fmt.Sprintf("line %d\n", i)
		w.Write([]byte(line))
		written.WriteString(line)
		// Copies at every line, then every few lines: never more than
		// one rotation between two copies.
		if i < 20 || i%5 == 0 {
			if err := fl.Copy(&copied); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fl.Copy(&copied); err != nil {
		t.Fatal(err)
	}
	if copied.String() != written.String() {
		t.Errorf("copied %q\nwant   %q", copied.String(), written.String())
	}
}

// TestFollowerFromTheStart: the first copy takes the previous file too,
// and a new current file (a new boot), or one truncated, is copied from
// its start.
func TestFollowerFromTheStart(t *testing.T) {
	p := logWith(t, "p\n", "c\n")
	fl := NewFollower(p)
	defer fl.Close()
	var out bytes.Buffer
	if err := fl.Copy(&out); err != nil || out.String() != "p\nc\n" {
		t.Fatalf("first copy %q, %v", out.String(), err)
	}
	// A new boot: a new current file.
	out.Reset()
	os.Remove(Prev(p))
	os.Remove(p)
	if err := os.WriteFile(p, []byte("n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fl.Copy(&out); err != nil || out.String() != "n\n" {
		t.Fatalf("after a new boot %q, %v", out.String(), err)
	}
	// Truncated: copied from its start.
	out.Reset()
	if err := os.WriteFile(p, []byte("m"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fl.Copy(&out); err != nil || out.String() != "m" {
		t.Fatalf("after a truncation %q, %v", out.String(), err)
	}
}
