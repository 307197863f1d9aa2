// Package mcpserver serves a project's sandbox to any coding agent over the
// Model Context Protocol (krunbox mcp): tools that run commands and read,
// write, edit, list and search files in the sandbox VM, all through its
// guest agent, and that report the sandbox's status and restart it. It is
// an adapter over package session, as krunbox serve is for pi.
//
// It fails closed: when the sandbox cannot start, every tool says so and
// nothing runs on the host.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/session"
)

// Limits bound what one tool call costs the host and what it hands the
// model. Every field has a default (DefaultLimits); a zero field takes it.
type Limits struct {
	// OutputBytes and OutputLines bound the text a tool answers with:
	// longer output is cut (a command's to its last lines, a listing's or
	// a search's to its first), as pi's tools do (50 KiB, 2000 lines).
	OutputBytes int
	OutputLines int
	// KeepBytes bounds the output of a command that is kept, per stream,
	// to be saved in the guest when the answer is cut (16 MiB); the rest
	// is counted, not kept.
	KeepBytes int
	// LineChars cuts a long line of a file the read tool shows (2000).
	LineChars int
	// ScanBytes bounds how far into a file the read tool reads to find
	// the lines asked for (64 MiB).
	ScanBytes int64
	// WriteBytes bounds the content of one write, and the file an edit
	// reads and writes (16 MiB).
	WriteBytes int
	// ArgBytes bounds a string argument that is not file content: a
	// command, a pattern, a path (256 KiB).
	ArgBytes int
	// RunTimeout is a command's timeout when the model gives none (10
	// minutes); MaxRunTimeout the longest it may ask for (1 hour).
	RunTimeout    time.Duration
	MaxRunTimeout time.Duration
	// ProgressEvery is how often a running command reports progress to
	// a client that asked for it (1 s).
	ProgressEvery time.Duration
}

// DefaultLimits are the limits of a Server whose Options leave them zero.
var DefaultLimits = Limits{
	OutputBytes:   50 << 10,
	OutputLines:   2000,
	KeepBytes:     16 << 20,
	LineChars:     2000,
	ScanBytes:     64 << 20,
	WriteBytes:    16 << 20,
	ArgBytes:      256 << 10,
	RunTimeout:    10 * time.Minute,
	MaxRunTimeout: time.Hour,
	ProgressEvery: time.Second,
}

// withDefaults returns l with its zero fields set to DefaultLimits'.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	pick := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	pick(&l.OutputBytes, d.OutputBytes)
	pick(&l.OutputLines, d.OutputLines)
	pick(&l.KeepBytes, d.KeepBytes)
	pick(&l.LineChars, d.LineChars)
	pick(&l.WriteBytes, d.WriteBytes)
	pick(&l.ArgBytes, d.ArgBytes)
	if l.ScanBytes <= 0 {
		l.ScanBytes = d.ScanBytes
	}
	if l.RunTimeout <= 0 {
		l.RunTimeout = d.RunTimeout
	}
	if l.MaxRunTimeout <= 0 {
		l.MaxRunTimeout = d.MaxRunTimeout
	}
	if l.ProgressEvery <= 0 {
		l.ProgressEvery = d.ProgressEvery
	}
	return l
}

// Options configure a Server.
type Options struct {
	// Sandbox is the sandbox to ensure: its name, the workspace (mounted
	// at the same path in the guest) and its configuration.
	Sandbox *session.EnsureRequest
	// Notes are said by sandbox_status: where the configuration came
	// from, what of the project's file was refused.
	Notes []string
	// Version is the server's version, told to clients.
	Version string
	// Limits bound the tools; zero fields take DefaultLimits'.
	Limits Limits
}

// Server is the MCP server of one project's sandbox. Its tools share one
// session; Close ends it.
type Server struct {
	mcp    *mcp.Server
	core   *session.Manager
	log    *slog.Logger
	opts   Options
	limits Limits
	name   string // the sandbox's
	ws     string // the workspace, a guest path as much as a host one
	seq    atomic.Uint64

	mu    sync.Mutex
	ready bool
	tools *guestTools // found once the sandbox is ready
	// startErr is why the last start failed, told by sandbox_status.
	startErr error
}

// New returns the server of opts.Sandbox on host.
func New(host *hostapi.Host, log *slog.Logger, opts Options) *Server {
	s := &Server{
		log:    log,
		opts:   opts,
		limits: opts.Limits.withDefaults(),
		name:   opts.Sandbox.Config.Name,
		ws:     opts.Sandbox.Config.Workspace,
	}
	s.core = session.New(host, log, session.Options{
		ClientName: "krunbox-mcp",
		StartHint:  "call sandbox_restart to start it again",
		Events:     s,
	})
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "krunbox", Title: "krunbox sandbox", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: s.instructions(),
		Logger:       log,
	})
	s.addTools()
	return s
}

// MCP returns the protocol server, for a transport to run.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Close ends the session: the commands still running are killed. The
// sandbox keeps running, until its idle timeout.
func (s *Server) Close() { s.core.Close() }

// Progress logs a step of the sandbox's start (MCP has no place for it
// outside a request).
func (s *Server) Progress(name, phase, msg string) {
	s.log.Info("sandbox", "name", name, "phase", phase, "message", msg)
}

// StateChanged forgets that the sandbox was ready: the next tool call
// checks it again.
func (s *Server) StateChanged(name string, st *session.Status) {
	s.log.Warn("sandbox no longer ready", "name", name, "state", st.State, "reason", st.Reason)
	s.mu.Lock()
	s.ready = false
	s.mu.Unlock()
}

func (s *Server) instructions() string {
	return fmt.Sprintf(`These tools work inside a sandbox: a virtual machine with its own Linux kernel, `+
		`not the user's computer. The project %s is mounted in it, live, at the same path: changes there are the user's files. `+
		`Every other path (/etc, /tmp, the home directory) is the VM's own, not the host's. `+
		`Use run for shell commands and read, write, edit, list, find and grep for files. `+
		`When a tool says the sandbox is not running, nothing ran anywhere: sandbox_status says why.`, s.ws)
}

// ensure makes sure the sandbox runs, starting it when it does not, and
// returns the guest's programs. It fails closed: an error means nothing
// may run.
func (s *Server) ensure(ctx context.Context) (*guestTools, error) {
	s.mu.Lock()
	ready, tools := s.ready, s.tools
	s.mu.Unlock()
	if ready {
		return tools, nil
	}
	_, err := s.core.Ensure(ctx, s.opts.Sandbox)
	if err == nil {
		tools, err = s.findGuestTools(ctx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startErr = err
	if err != nil {
		return nil, err
	}
	s.ready, s.tools = true, tools
	return tools, nil
}

// notReady marks the sandbox as to be checked again when err says it is
// not ready.
func (s *Server) notReady(err error) {
	var se *session.Error
	if errors.As(err, &se) && se.Code == session.CodeNotReady {
		s.mu.Lock()
		s.ready = false
		s.mu.Unlock()
	}
}

// toolError turns an error into what the model reads: the message, and
// what to do about it.
func (s *Server) toolError(err error) error {
	s.notReady(err)
	var se *session.Error
	if !errors.As(err, &se) {
		return err
	}
	msg := se.Message
	switch se.Code {
	case session.CodeStartFailed, session.CodeNotReady, session.CodeConfigMismatch, session.CodeInvalidConfig:
		msg = "the sandbox is not running, so nothing ran (krunbox never runs tools on the host): " + msg
	}
	if data, ok := se.Data.(map[string]any); ok {
		if hint, ok := data["hint"].(string); ok && hint != "" {
			msg += "\nhint: " + hint
		}
	}
	return errors.New(msg)
}

// guestPath makes a tool's path absolute: a relative one is taken from the
// workspace. It refuses one too long to be a path.
func (s *Server) guestPath(p string) (string, error) {
	if p == "" {
		return s.ws, nil
	}
	if len(p) > 4096 || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path: not a path (more than 4096 bytes, or a NUL)")
	}
	if !strings.HasPrefix(p, "/") {
		p = s.ws + "/" + p
	}
	return p, nil
}

// checkArg refuses a string argument longer than Limits.ArgBytes.
func (s *Server) checkArg(name, v string) error {
	if len(v) > s.limits.ArgBytes {
		return fmt.Errorf("%s: %d bytes is more than the %d this tool takes", name, len(v), s.limits.ArgBytes)
	}
	return nil
}

// nextID returns a new exec id.
func (s *Server) nextID() string { return fmt.Sprintf("mcp-%d", s.seq.Add(1)) }
