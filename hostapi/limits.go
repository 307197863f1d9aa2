package hostapi

import (
	"cmp"
	"fmt"
	"io"
)

// AgentLimits bound what a Client takes in from the guest agent. The guest
// is root in its VM and may put any program in the agent's place, so
// everything the agent sends is the guest's to choose: a listing, a file
// or an output past its bound stops the operation with a *LimitError
// instead of growing the host's memory. A zero field means its default.
//
// A frame is bounded by the protocol (protocol.MaxBody; 256 KiB for any
// frame but data), and a data channel by its window: these bounds are for
// what a call gathers across frames.
type AgentLimits struct {
	// MaxDirEntries bounds the entries of one directory listing
	// (ReadDir), and of the listings a tree walk (WalkDir, CopyOut) holds
	// at once. Default: DefaultMaxDirEntries.
	MaxDirEntries int
	// MaxDirBytes bounds the bytes of the same listings as the agent sends
	// them (JSON, about 100 bytes an entry). Default: DefaultMaxDirBytes.
	MaxDirBytes int64
	// MaxReadFile bounds what ReadFile returns; Open streams a file of
	// any size. Default: DefaultMaxReadFile.
	MaxReadFile int64
	// MaxOutput bounds each of the stdout and the stderr that Run and
	// Output collect in memory: a process writing more is killed. Output
	// sent to Cmd.Stdout or Cmd.Stderr is not collected, and not bounded.
	// Default: DefaultMaxOutput.
	MaxOutput int64
}

// Defaults of AgentLimits: far above what a listing, a file read whole or
// a command's output holds in normal work, low enough that a hostile guest
// costs the host at most a few hundred MiB for one call.
const (
	// DefaultMaxDirEntries is 262144 entries: a decoded entry takes about
	// 200 bytes of the host's memory.
	DefaultMaxDirEntries = 1 << 18
	// DefaultMaxDirBytes is 64 MiB, 256 bytes for each of
	// DefaultMaxDirEntries.
	DefaultMaxDirBytes = 64 << 20
	// DefaultMaxReadFile is 256 MiB.
	DefaultMaxReadFile = 256 << 20
	// DefaultMaxOutput is 64 MiB for each stream.
	DefaultMaxOutput = 64 << 20
)

// WithAgentLimits sets the bounds of what the client takes in from the
// agent; zero fields keep their defaults.
func WithAgentLimits(l AgentLimits) ClientOption {
	return func(o *clientOptions) {
		d := defaultAgentLimits()
		o.limits = AgentLimits{
			MaxDirEntries: cmp.Or(l.MaxDirEntries, d.MaxDirEntries),
			MaxDirBytes:   cmp.Or(l.MaxDirBytes, d.MaxDirBytes),
			MaxReadFile:   cmp.Or(l.MaxReadFile, d.MaxReadFile),
			MaxOutput:     cmp.Or(l.MaxOutput, d.MaxOutput),
		}
	}
}

func defaultAgentLimits() AgentLimits {
	return AgentLimits{
		MaxDirEntries: DefaultMaxDirEntries,
		MaxDirBytes:   DefaultMaxDirBytes,
		MaxReadFile:   DefaultMaxReadFile,
		MaxOutput:     DefaultMaxOutput,
	}
}

// LimitError reports data from the guest over one of the AgentLimits: the
// operation stopped there.
type LimitError struct {
	// Limit is the AgentLimits field: "MaxDirBytes".
	Limit string
	// Max is its value.
	Max int64
	// What is what went over it: "bytes of directory listings".
	What string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("the guest sent more than %d %s (AgentLimits.%s)", e.Max, e.What, e.Limit)
}

// limitReader reads r, failing with err once it has read more than max
// bytes: unlike io.LimitReader, a stream longer than the limit is an
// error, not one cut short.
type limitReader struct {
	r    io.Reader
	left int64 // max+1 bytes less those read
	err  error
}

func newLimitReader(r io.Reader, max int64, err error) *limitReader {
	return &limitReader{r: r, left: max + 1, err: err}
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, l.err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left <= 0 {
		return n, l.err
	}
	return n, err
}
