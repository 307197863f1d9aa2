package hostapi

import "time"

// Bounds of the delay between two attempts to reach a starting guest agent.
const (
	// readyPollFast is the longest delay while a start is young: a VM on
	// a KVM host boots in a fraction of a second, and the first answer
	// should be seen within a few milliseconds.
	readyPollFast = 5 * time.Millisecond
	// readyPollSlow is the longest delay of all, reached by starts that
	// take seconds (a nested VM, a loaded host): polling every few
	// milliseconds there only takes CPU from the booting VM.
	readyPollSlow = 100 * time.Millisecond
)

// nextReadyPoll returns the delay before the next attempt to reach a
// starting guest agent, after delay, elapsed into the start: doubling
// from 1 ms, up to readyPollFast or a twentieth of the time elapsed,
// whichever is longer, and never above readyPollSlow. The wait so costs
// a few hundred attempts per second only in its first second, and about
// ten a second after two, while adding at most 5 % to a start's time.
func nextReadyPoll(delay, elapsed time.Duration) time.Duration {
	return min(2*delay, max(readyPollFast, elapsed/20), readyPollSlow)
}
