// Package session is what krunbox serves to a coding agent, whatever the
// protocol: a client's sandboxes (created from a checked configuration,
// started, watched, restarted, stopped), the commands it runs in them and
// its file calls, all through each sandbox's guest agent. It fails closed: a
// sandbox that cannot start gives errors, never a host fallback.
//
// Two adapters speak it: `krunbox serve` (the pi extension's JSON-RPC,
// docs/serve-protocol.md) and `krunbox mcp` (the Model Context Protocol).
// Errors are *Error values whose codes are those of docs/serve-protocol.md
// §3, so that an adapter can map them once.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/krunbox/krunbox/hostapi"
)

// Error codes (docs/serve-protocol.md §3).
const (
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
	CodeNotReady       = 1002
	CodeStartFailed    = 1003
	CodeConfigMismatch = 1004
	CodeNotFound       = 1005
	CodeNotDir         = 1006
	CodeIsDir          = 1007
	CodePermission     = 1008
	CodeExecFailed     = 1009
	CodeTooLarge       = 1010
	CodeIO             = 1011
	CodeInvalidConfig  = 1012
)

// ShutdownWait bounds how long a closing Manager waits for its commands to
// be killed, and how long a restart waits for the commands it kills.
const ShutdownWait = 10 * time.Second

// Error is an error for the client: a code, a one-line message and data
// (a hint, a status...).
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// NewError returns an Error whose message is one line.
func NewError(code int, data any, format string, a ...any) *Error {
	return &Error{Code: code, Message: OneLine(fmt.Sprintf(format, a...)), Data: data}
}

// InvalidParams returns an Error with CodeInvalidParams.
func InvalidParams(format string, a ...any) *Error {
	return NewError(CodeInvalidParams, nil, format, a...)
}

// OneLine joins the lines of s.
func OneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ")), " ")
}

// Events receives what a Manager reports without being asked. Its methods
// are called from any goroutine and must not block for long.
type Events interface {
	// Progress reports a step of a start: phase is "create", "pull",
	// "unpack" or "boot".
	Progress(name, phase, message string)
	// StateChanged reports that a sandbox a request brought to ready is
	// no longer ready.
	StateChanged(name string, st *Status)
}

// Manager is one client's session: the agent clients of its sandboxes, the
// commands it started and what it knows of failed starts. Its methods are
// safe for concurrent use.
type Manager struct {
	host   *hostapi.Host
	log    *slog.Logger
	events Events
	opts   Options

	// life ends with Close: commands and watchers run under it.
	life context.Context
	stop context.CancelFunc
	// watchers counts the goroutines that watch a sandbox's VM.
	watchers sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	clients  map[string]*hostapi.Client // agent clients by sandbox name
	execs    map[string]*Exec           // by id, until their exit is reported
	watching map[string]int             // sandbox name → the runner pid watched
	failures map[string]*startFailure   // the last failed start, by sandbox name
}

// Options are what differs between the adapters of a session.
type Options struct {
	// ClientName names the session's agent connections in the guest's
	// logs.
	ClientName string
	// StartHint is the hint of a not-ready error: how the client starts
	// the sandbox.
	StartHint string
	// Events receives progress and state changes; nil drops them.
	Events Events
}

// New returns a session on host.
func New(host *hostapi.Host, log *slog.Logger, opts Options) *Manager {
	events := opts.Events
	if events == nil {
		events = noEvents{}
	}
	life, stop := context.WithCancel(context.Background())
	return &Manager{
		host:     host,
		log:      log,
		events:   events,
		opts:     opts,
		life:     life,
		stop:     stop,
		clients:  map[string]*hostapi.Client{},
		execs:    map[string]*Exec{},
		watching: map[string]int{},
		failures: map[string]*startFailure{},
	}
}

type noEvents struct{}

func (noEvents) Progress(string, string, string)    {}
func (noEvents) StateChanged(string, *Status)       {}
func (m *Manager) progress(name, phase, msg string) { m.events.Progress(name, phase, msg) }

// Host returns the host the session works on.
func (m *Manager) Host() *hostapi.Host { return m.host }

// errClosed is the error of a call on a closed Manager.
var errClosed = errors.New("the session is closed")

// Close ends the session: the commands it started are killed and their
// ends waited for (at most ShutdownWait), its watchers stop and its agent
// connections close. The sandboxes keep running.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	var execs []*Exec
	for _, e := range m.execs {
		execs = append(execs, e)
	}
	m.mu.Unlock()
	m.stop()
	done := make(chan struct{})
	go func() {
		m.watchers.Wait()
		for _, e := range execs {
			<-e.done
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(ShutdownWait):
		m.log.Warn("commands still running at exit")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, c := range m.clients {
		c.Close()
		delete(m.clients, name)
	}
}
