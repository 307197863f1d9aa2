package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/session"
)

// guestTools are the guest's programs that the tools use.
type guestTools struct {
	// shell runs the run tool's commands: bash when the image has it,
	// else /bin/sh.
	shell string
	// rg is ripgrep's path, or "" when the image has none (grep then).
	rg string
}

// findGuestTools looks for bash and rg in the guest.
func (s *Server) findGuestTools(ctx context.Context) (*guestTools, error) {
	r, err := s.exec(ctx, execRequest{argv: []string{"/bin/sh", "-c", "command -v bash; command -v rg; true"}, keep: 4096})
	if err != nil {
		return nil, err
	}
	t := &guestTools{shell: "/bin/sh"}
	for line := range strings.Lines(string(r.stdout.kept)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "/") {
			continue // a builtin, or nothing
		}
		switch path.Base(line) {
		case "bash":
			t.shell = line
		case "rg":
			t.rg = line
		}
	}
	return t, nil
}

// capture holds what a command wrote on one stream: its first bytes, up to
// keep, and its last, up to tail, so that a flood costs the host at most
// keep+tail bytes.
type capture struct {
	keep, tailMax int
	kept          []byte
	tail          []byte
	total         int64
}

func newCapture(keep, tail int) *capture { return &capture{keep: keep, tailMax: tail} }

func (c *capture) write(p []byte) {
	c.total += int64(len(p))
	if room := c.keep - len(c.kept); room > 0 {
		c.kept = append(c.kept, p[:min(room, len(p))]...)
	}
	c.tail = append(c.tail, p...)
	if over := len(c.tail) - c.tailMax; over > 0 {
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
}

// complete reports whether kept holds everything written.
func (c *capture) complete() bool { return c.total == int64(len(c.kept)) }

// last returns the end of the output: all of it when it was kept whole.
func (c *capture) last() []byte {
	if c.complete() {
		return c.kept
	}
	return c.tail
}

// execRequest is a command a tool runs in the guest.
type execRequest struct {
	argv    []string
	dir     string
	env     []string
	timeout time.Duration
	stdin   []byte
	// keep bounds each stream's kept bytes (capture).
	keep int
	// progress, when set, is called every Limits.ProgressEvery with the
	// time the command has run and the bytes it wrote.
	progress func(elapsed time.Duration, written int64)
}

// execResult is how a command ended and what it wrote.
type execResult struct {
	stdout, stderr *capture
	exit           *session.Exit
	elapsed        time.Duration
}

// errCancelled is the error of a command stopped because its call was
// cancelled.
var errCancelled = errors.New("cancelled: the command was killed in the sandbox")

// exec runs a command in the sandbox to its end. Cancelling ctx kills it
// (its whole process group) in the VM.
func (s *Server) exec(ctx context.Context, r execRequest) (*execResult, error) {
	id := s.nextID()
	cmd := hostapi.Cmd{Args: r.argv, Dir: r.dir, Env: r.env, Timeout: r.timeout}
	if r.stdin != nil {
		cmd.Stdin = bytes.NewReader(r.stdin)
	}
	t0 := time.Now()
	e, err := s.core.Start(ctx, s.name, id, cmd)
	if err != nil {
		return nil, err
	}
	// Killed when the call is cancelled, or when the command outlives its
	// timeout by ShutdownWait (the guest enforces the timeout; a guest
	// that does not is not waited for).
	killCtx, cancel := context.WithCancel(ctx)
	if r.timeout > 0 {
		killCtx, cancel = context.WithTimeout(ctx, r.timeout+session.ShutdownWait)
	}
	defer cancel()
	stop := context.AfterFunc(killCtx, func() { s.core.Kill(id) })
	defer stop()
	res := &execResult{stdout: newCapture(r.keep, s.limits.OutputBytes), stderr: newCapture(r.keep, s.limits.OutputBytes)}
	var mu sync.Mutex
	done := make(chan struct{})
	if r.progress != nil {
		go func() {
			tick := time.NewTicker(s.limits.ProgressEvery)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					mu.Lock()
					n := res.stdout.total + res.stderr.total
					mu.Unlock()
					r.progress(time.Since(t0), n)
				}
			}
		}()
	}
	s.core.Pump(e, func(stream string, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		if stream == "stdout" {
			res.stdout.write(data)
		} else {
			res.stderr.write(data)
		}
	}, func(end *session.Exit) { res.exit = end })
	close(done)
	res.elapsed = time.Since(t0)
	switch {
	case ctx.Err() != nil:
		return nil, errCancelled
	case killCtx.Err() != nil:
		return nil, fmt.Errorf("the command did not end %v after its timeout of %v: killed", session.ShutdownWait, r.timeout)
	case res.exit == nil:
		return nil, errors.New("the server is ending: the command was killed")
	case res.exit.Error != nil:
		return nil, res.exit.Error
	}
	return res, nil
}

// tailLines returns the end of b: at most maxLines lines and maxBytes
// bytes, cut at a line's start when it can be, and whether it cut.
func tailLines(b []byte, maxLines, maxBytes int) ([]byte, bool) {
	cut := false
	if len(b) > maxBytes {
		b, cut = b[len(b)-maxBytes:], true
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	body := bytes.TrimSuffix(b, []byte("\n"))
	if n := bytes.Count(body, []byte("\n")) + 1; n > maxLines {
		for i := 0; i < n-maxLines; i++ {
			body = body[bytes.IndexByte(body, '\n')+1:]
		}
		b, cut = body, true
	}
	return b, cut
}

// headLines returns the start of b: at most maxLines lines and maxBytes
// bytes, cut at a line's end when it can be, and whether it cut.
func headLines(b []byte, maxLines, maxBytes int) ([]byte, bool) {
	cut := false
	if len(b) > maxBytes {
		b, cut = b[:maxBytes], true
		if i := bytes.LastIndexByte(b, '\n'); i > 0 {
			b = b[:i+1]
		}
	}
	n, i := 0, 0
	for n < maxLines {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return b, cut
		}
		i += j + 1
		n++
	}
	if i < len(b) {
		return b[:i], true
	}
	return b, cut
}

// text makes guest output printable: invalid UTF-8 replaced.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
