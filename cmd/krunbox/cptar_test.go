package main

import "testing"

func TestTarName(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		ok         bool
	}{
		{"a/b", "a/b", true},
		{"./a//b/", "a/b", true},
		{"a/../b", "b", true},
		{"..a/b", "..a/b", true},
		{".", ".", true},
		{"/etc/passwd", "", false},
		{"..", "", false},
		{"../x", "", false},
		{"a/../../x", "", false},
		{"a/..", ".", true},
	} {
		got, err := tarName(tt.name)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("tarName(%q) = %q, %v; want %q (ok %v)", tt.name, got, err, tt.want, tt.ok)
		}
	}
}

func TestTarEntryName(t *testing.T) {
	for _, tt := range []struct{ src, base, p, want string }{
		{"/a/b", "b", "/a/b", "b"},
		{"/a/b", "b", "/a/b/c/d", "b/c/d"},
		{"/a/b/", "b", "/a/b/c", "b/c"},
		{"./b", "b", "./b", "b"},
		{"./b", "b", "b/c", "b/c"},
		{"/", ".", "/", "."},
		{"/", ".", "/etc", "etc"},
		{".", ".", "x", "x"},
	} {
		if got := tarEntryName(tt.src, tt.base, tt.p); got != tt.want {
			t.Errorf("tarEntryName(%q, %q, %q) = %q, want %q", tt.src, tt.base, tt.p, got, tt.want)
		}
	}
}
