package session

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
	err := (&Manager{}).guestError(context.Background(), "sb", &fs.PathError{Op: "readdir", Path: "/d", Err: le})
	var re *Error
	if !errors.As(err, &re) || re.Code != CodeTooLarge {
		t.Fatalf("guestError = %#v, want code %d", err, CodeTooLarge)
	}
}
