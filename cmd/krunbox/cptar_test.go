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
