package main

import (
	"context"
	"errors"
	"io/fs"
	"testing"

	"github.com/krunbox/krunbox/hostapi"
)

// TestGuestErrorTooLarge: a listing or a read over the agent client's
// bounds is too-large, not a sandbox that is not ready.
func TestGuestErrorTooLarge(t *testing.T) {
	le := &hostapi.LimitError{Limit: "MaxDirEntries", Max: 10, What: "directory entries"}
	err := (&server{}).guestError(context.Background(), "sb", &fs.PathError{Op: "readdir", Path: "/d", Err: le})
	var re *rpcError
	if !errors.As(err, &re) || re.Code != codeTooLarge {
		t.Fatalf("guestError = %#v, want code %d", err, codeTooLarge)
	}
}
