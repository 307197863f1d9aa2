// Package poll waits in tests for a condition that something else makes
// true (a process ending, a file appearing, output arriving), checking it
// with a growing delay until a deadline instead of sleeping a fixed time.
package poll

import (
	"testing"
	"time"
)

// maxDelay bounds the delay between two checks of a condition.
const maxDelay = 50 * time.Millisecond

// Until checks cond, with a delay growing from 1 ms to 50 ms between
// checks, until it holds. It fails the test, saying what it waited for, if
// cond does not hold within timeout.
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, maxDelay) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(delay)
	}
}
