// Package poll waits in tests for a condition that something else makes
// true (a process ending, a file appearing, output arriving), checking it
// with a growing delay until a deadline instead of sleeping a fixed time.
//
// Every deadline is multiplied by KRUNBOX_E2E_TIME_SCALE (default 1), which
// slow machines set: the real-VM tier, whose nested VMs start in 10 to 30 s
// where the test double starts in milliseconds, sets 4.
package poll

import (
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// maxDelay bounds the delay between two checks of a condition.
const maxDelay = 50 * time.Millisecond

// ScaleEnv names the environment variable that multiplies every deadline.
const ScaleEnv = "KRUNBOX_E2E_TIME_SCALE"

// scale is ScaleEnv's value, read once: 1 when unset or not a number >= 1.
var scale = sync.OnceValue(func() float64 {
	f, err := strconv.ParseFloat(os.Getenv(ScaleEnv), 64)
	if err != nil || f < 1 {
		return 1
	}
	return f
})

// Scaled returns d multiplied by KRUNBOX_E2E_TIME_SCALE, for a deadline a
// test waits on by other means than Until (a select on a channel, a
// command's own timeout).
func Scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * scale())
}

// Until checks cond, with a delay growing from 1 ms to 50 ms between
// checks, until it holds. It fails the test, saying what it waited for, if
// cond does not hold within Scaled(timeout).
func Until(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	timeout = Scaled(timeout)
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; !cond(); delay = min(2*delay, maxDelay) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(delay)
	}
}
