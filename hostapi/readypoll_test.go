package hostapi

import (
	"testing"
	"time"
)

func TestNextReadyPoll(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		delay, elapsed, want time.Duration
	}{
		{ms, 0, 2 * ms},                       // doubling from 1 ms
		{4 * ms, 10 * ms, 5 * ms},             // a young start: at most 5 ms
		{5 * ms, 90 * ms, 5 * ms},             // still young
		{5 * ms, time.Second, 10 * ms},        // a slow start: grows with it...
		{40 * ms, time.Second, 50 * ms},       // ...up to a twentieth of it
		{50 * ms, 10 * time.Second, 100 * ms}, // never above 100 ms
		{100 * ms, time.Minute, 100 * ms},
	} {
		if got := nextReadyPoll(tt.delay, tt.elapsed); got != tt.want {
			t.Errorf("nextReadyPoll(%v, %v) = %v, want %v", tt.delay, tt.elapsed, got, tt.want)
		}
	}
	// Attempts in the first minute of a start that never answers: a few
	// hundred in its first second, then at most about ten a second.
	var n int
	for d, at := time.Millisecond, time.Duration(0); at < time.Minute; at += d {
		d = nextReadyPoll(d, at)
		n++
	}
	if n > 1000 {
		t.Errorf("%d attempts in a minute; want about 200 in the first second and 10 a second after", n)
	}
}
