//go:build !cgo

package krun

import (
	"errors"
	"testing"
)

// Run by TestBuiltWithoutCgo (krun_test.go) with CGO_ENABLED=0.
func TestNoCgo(t *testing.T) {
	if _, err := Open(""); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("Open without cgo: %v, want ErrNoCgo", err)
	}
	if _, _, err := KrunfwVersion(); !errors.Is(err, ErrNoCgo) {
		t.Fatalf("KrunfwVersion without cgo: %v, want ErrNoCgo", err)
	}
}
