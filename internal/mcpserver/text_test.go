package mcpserver

import (
	"strings"
	"testing"
)

func TestTailAndHeadLines(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		lines, bytes int
		wantTail     string
		wantTailCut  bool
		wantHead     string
		wantHeadCut  bool
	}{
		{"short", "a\nb\n", 10, 100, "a\nb\n", false, "a\nb\n", false},
		{"no final newline", "a\nb", 10, 100, "a\nb", false, "a\nb", false},
		{"too many lines", "1\n2\n3\n4\n", 2, 100, "3\n4", true, "1\n2\n", true},
		{"too many bytes: cut at a line", "aaaa\nbbbb\ncccc\n", 10, 7, "cccc\n", true, "aaaa\n", true},
		{"one long line", strings.Repeat("x", 20), 10, 5, "xxxxx", true, "xxxxx", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tail, tcut := tailLines([]byte(tt.in), tt.lines, tt.bytes)
			if string(tail) != tt.wantTail || tcut != tt.wantTailCut {
				t.Errorf("tailLines = %q, %v; want %q, %v", tail, tcut, tt.wantTail, tt.wantTailCut)
			}
			head, hcut := headLines([]byte(tt.in), tt.lines, tt.bytes)
			if string(head) != tt.wantHead || hcut != tt.wantHeadCut {
				t.Errorf("headLines = %q, %v; want %q, %v", head, hcut, tt.wantHead, tt.wantHeadCut)
			}
		})
	}
}

func TestGlobRegexp(t *testing.T) {
	tests := []struct {
		glob  string
		match []string
		not   []string
	}{
		{"*.go", []string{"a.go", "src/a.go", "x/y/z.go"}, []string{"a.gox", "a.go/b"}},
		{"src/*.ts", []string{"src/a.ts"}, []string{"src/x/a.ts", "lib/src/a.ts"}},
		{"src/**/*.ts", []string{"src/a.ts", "src/x/y/a.ts"}, []string{"a.ts", "lib/a.ts"}},
		{"src/**", []string{"src/a", "src/x/y"}, []string{"srcx/a"}},
		{"a?c.[ch]", []string{"abc.[ch]"}, []string{"abc.c"}}, // brackets are literal
	}
	for _, tt := range tests {
		re, err := globRegexp(tt.glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range tt.match {
			if !re.MatchString(p) {
				t.Errorf("%s does not match %s", tt.glob, p)
			}
		}
		for _, p := range tt.not {
			if re.MatchString(p) {
				t.Errorf("%s matches %s", tt.glob, p)
			}
		}
	}
}

// A flood costs at most keep+tail bytes, whatever its size.
func TestCaptureBounded(t *testing.T) {
	c := newCapture(10, 4)
	for range 1000 {
		c.write([]byte("0123456789abcdef"))
	}
	if c.total != 16000 || string(c.kept) != "0123456789" || string(c.last()) != "cdef" || c.complete() || cap(c.tail) > 64 {
		t.Errorf("capture: total %d, kept %q, last %q, tail cap %d", c.total, c.kept, c.last(), cap(c.tail))
	}
	small := newCapture(10, 4)
	small.write([]byte("abc"))
	if !small.complete() || string(small.last()) != "abc" {
		t.Errorf("a small output: %q", small.last())
	}
}
