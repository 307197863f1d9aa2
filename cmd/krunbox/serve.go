package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/session"
)

// The serve protocol (docs/serve-protocol.md): JSON-RPC 2.0 over
// newline-delimited JSON on stdin and stdout.
const (
	serveProtocolVersion = 1
	// maxLineBytes bounds one message.
	maxLineBytes = 64 << 20
	// maxReadBytes bounds one fs.readFile answer and sandbox.logs.
	maxReadBytes = 4 << 20
	// maxWriteBytes bounds one fs.writeFile.
	maxWriteBytes = 32 << 20
	// outputChunk bounds the data of one exec.output notification.
	outputChunk = session.OutputChunk
	// shutdownWait bounds how long an ending server waits for its
	// commands to be killed and its requests to return.
	shutdownWait = session.ShutdownWait
)

// Error codes of the serve protocol (docs/serve-protocol.md §3): those of
// the framing, and the session's.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = session.CodeInvalidParams
	codeInternal       = session.CodeInternal
	codeNotInitialized = -32002
	codeUnsupported    = 1001
	codeNotReady       = session.CodeNotReady
	codeStartFailed    = session.CodeStartFailed
	codeConfigMismatch = session.CodeConfigMismatch
	codeNotFound       = session.CodeNotFound
	codeNotDir         = session.CodeNotDir
	codeIsDir          = session.CodeIsDir
	codePermission     = session.CodePermission
	codeExecFailed     = session.CodeExecFailed
	codeTooLarge       = session.CodeTooLarge
	codeInvalidConfig  = session.CodeInvalidConfig
)

func newServeCmd(s *streams) *cobra.Command {
	var stdio bool
	cmd := &cobra.Command{
		Use:   "serve --stdio",
		Short: "Serve sandboxes to a tool (the pi extension) over JSON-RPC on stdin and stdout",
		Long: `serve is for tools, not people: it speaks JSON-RPC 2.0, one message a line,
on stdin and stdout, and logs to stderr. A client (the pi extension) starts it
once per session and, through it, makes sure a sandbox runs, runs commands in it
with streamed output, and reads and writes its files. The protocol is
docs/serve-protocol.md. It ends when stdin closes, killing the commands it
started; the sandboxes keep running.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !stdio {
				return &usageError{err: errors.New("serve needs --stdio (the only transport)")}
			}
			host, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			srv := newServer(host, s.out, slog.Default())
			return srv.serve(cmd.Context(), s.in)
		},
	}
	cmd.Flags().BoolVar(&stdio, "stdio", false, "speak the protocol on stdin and stdout")
	return cmd
}

// rpcError is an error answered to the client: the session's errors are
// the protocol's.
type rpcError = session.Error

var (
	newError      = session.NewError
	invalidParams = session.InvalidParams
)

// message is any message on the wire; which fields are set says what it is.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  any             `json:"params,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// nullID is the id of answers to requests whose id could not be read.
var nullID = json.RawMessage("null")

// lineWriter writes whole messages, one a line, from any goroutine. It
// blocks while the client does not read: that holds back the output pumps
// instead of buffering without bound.
type lineWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
	err    error
}

func (w *lineWriter) send(m *message) {
	m.JSONRPC = "2.0"
	b, err := json.Marshal(m)
	if err != nil {
		// Only a bug can get here: say so instead of the result.
		b, _ = json.Marshal(&message{JSONRPC: "2.0", ID: m.ID, Error: newError(codeInternal, nil, "encode the answer: %v", err)})
	}
	b = append(b, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.err != nil {
		return
	}
	_, w.err = w.w.Write(b)
}

// close drops every later message: nobody is listening.
func (w *lineWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// handler answers one method. after, when not nil, runs once the answer is
// written (exec.start starts its output there, so that the answer comes
// first).
type handler func(ctx context.Context, params json.RawMessage) (result any, after func(), err error)

// server is one serve connection: its client and its session (the
// sandboxes' agent clients and the commands it started).
type server struct {
	host *hostapi.Host
	out  *lineWriter
	log  *slog.Logger
	core *session.Manager

	methods     map[string]handler
	initialized atomic.Bool
	requests    sync.WaitGroup
}

func newServer(host *hostapi.Host, out io.Writer, log *slog.Logger) *server {
	s := &server{
		host: host,
		out:  &lineWriter{w: out},
		log:  log,
	}
	s.core = session.New(host, log, session.Options{ClientName: "krunbox-serve", StartHint: "start it with sandbox.ensure", Events: s})
	s.methods = map[string]handler{
		"initialize":      s.initialize,
		"sandbox.ensure":  s.sandboxEnsure,
		"sandbox.status":  s.sandboxStatus,
		"sandbox.restart": s.sandboxRestart,
		"sandbox.stop":    s.sandboxStop,
		"sandbox.logs":    s.sandboxLogs,
		"sandbox.network": s.sandboxNetwork,
		"exec.start":      s.execStart,
		"exec.signal":     s.execSignal,
		"fs.readFile":     s.fsReadFile,
		"fs.writeFile":    s.fsWriteFile,
		"fs.stat":         s.fsStat,
		"fs.readDir":      s.fsReadDir,
		"fs.mkdirAll":     s.fsMkdirAll,
	}
	return s
}

// serve reads requests from in until EOF or until ctx ends, then kills the
// commands it started, closes its agent connections and returns nil.
func (s *server) serve(ctx context.Context, in io.Reader) error {
	// A client that went away must not kill the server with SIGPIPE before
	// it cleaned up; handled (not ignored) so that the VM runners this
	// process starts get the default disposition.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		readErr <- readLines(ctx, in, lines, func() {
			s.out.send(&message{ID: nullID, Error: newError(codeInvalidRequest, nil, "line longer than %d bytes: discarded", maxLineBytes)})
		})
	}()
	s.log.Info("serving", "protocol", serveProtocolVersion, "state", s.host.Dirs().State, "pid", os.Getpid())
loop:
	for {
		select {
		case line := <-lines:
			if !s.initialized.Load() {
				// In order until initialize succeeded, so that requests
				// sent right behind it find it done.
				s.handle(ctx, line)
				continue
			}
			s.requests.Add(1)
			go func() {
				defer s.requests.Done()
				s.handle(ctx, line)
			}()
		case err := <-readErr:
			if err != nil {
				s.log.Warn("reading stdin", "err", err)
			}
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	s.shutdown(cancel)
	return nil
}

// readLines sends each line of in (without its newline) to lines until EOF
// or an error. A line longer than maxLineBytes is discarded up to its
// newline and reported with tooLong.
func readLines(ctx context.Context, in io.Reader, lines chan<- []byte, tooLong func()) error {
	br := bufio.NewReaderSize(in, 64<<10)
	var long []byte
	discarding := false
	for {
		chunk, err := br.ReadSlice('\n')
		complete := err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			return err
		}
		switch {
		case discarding:
		case len(long)+len(chunk) > maxLineBytes+1: // +1: the newline
			discarding, long = true, nil
		default:
			long = append(long, chunk...)
		}
		if complete || (errors.Is(err, io.EOF) && (len(long) > 0 || discarding)) {
			if discarding {
				tooLong()
			} else if line := bytes.TrimSpace(long); len(line) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return nil
				}
			}
			long, discarding = nil, false
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// shutdown ends the connection: no more answers, its requests cancelled
// and its session closed (the commands it started killed, its agent
// connections closed), then its requests waited for.
func (s *server) shutdown(cancel context.CancelFunc) {
	s.out.close()
	cancel()
	s.core.Close()
	done := make(chan struct{})
	go func() {
		s.requests.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(shutdownWait):
		s.log.Warn("requests still running at exit")
	}
	s.log.Info("stdin closed: exiting")
}

// Progress sends sandbox.progress.
func (s *server) Progress(name, phase, msg string) {
	s.out.send(&message{Method: "sandbox.progress", Params: map[string]string{"name": name, "phase": phase, "message": msg}})
}

// StateChanged sends sandbox.state.
func (s *server) StateChanged(name string, st *session.Status) {
	s.out.send(&message{Method: "sandbox.state", Params: map[string]any{"name": name, "status": st}})
}

// request is a request as read, before its method is known to exist.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// handle answers one line.
func (s *server) handle(ctx context.Context, line []byte) {
	if !json.Valid(line) {
		s.out.send(&message{ID: nullID, Error: newError(codeParseError, nil, "parse error: the line is not JSON")})
		return
	}
	var req request
	if line[0] != '{' || json.Unmarshal(line, &req) != nil {
		what := "not a JSON-RPC request object"
		if line[0] == '[' {
			what = "batches are not supported"
		}
		s.out.send(&message{ID: nullID, Error: newError(codeInvalidRequest, nil, "invalid request: %s", what)})
		return
	}
	if req.ID == nil {
		return // a notification: the client sends none in version 1
	}
	id := req.ID
	if !validID(id) {
		s.out.send(&message{ID: nullID, Error: newError(codeInvalidRequest, nil, "invalid request: the id must be an integer or a string")})
		return
	}
	if req.JSONRPC != "2.0" || req.Method == nil {
		s.out.send(&message{ID: id, Error: newError(codeInvalidRequest, nil, `invalid request: want "jsonrpc": "2.0" and a method`)})
		return
	}
	method := *req.Method
	h, ok := s.methods[method]
	if !ok {
		s.out.send(&message{ID: id, Error: newError(codeMethodNotFound, nil, "method %q not found", method)})
		return
	}
	if method != "initialize" && !s.initialized.Load() {
		s.out.send(&message{ID: id, Error: newError(codeNotInitialized, nil, "not initialized: send initialize first")})
		return
	}
	result, after, err := s.call(ctx, method, h, req.Params)
	if ctx.Err() != nil {
		return // the server is ending: nobody is listening
	}
	if err != nil {
		var re *rpcError
		if !errors.As(err, &re) {
			s.log.Error("internal error", "method", method, "err", err)
			re = newError(codeInternal, nil, "%s: %v", method, err)
		}
		s.out.send(&message{ID: id, Error: re})
		return
	}
	if result == nil {
		result = struct{}{}
	}
	s.out.send(&message{ID: id, Result: result})
	if after != nil {
		after()
	}
}

// call runs a handler; a panic, a bug, fails this request only.
func (s *server) call(ctx context.Context, method string, h handler, params json.RawMessage) (result any, after func(), err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic", "method", method, "panic", p, "stack", string(debug.Stack()))
			result, after, err = nil, nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return h(ctx, params)
}

// validID reports whether id is an integer or a string.
func validID(id json.RawMessage) bool {
	var v any
	if json.Unmarshal(id, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case string:
		return true
	case float64:
		return v == float64(int64(v)) && !bytes.ContainsAny(id, ".eE")
	}
	return false
}

// decodeParams decodes params (an object, or absent) into v.
func decodeParams(raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	if raw[0] != '{' {
		return invalidParams("params: want an object")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return invalidParams("params.%s: want %s, got %s", te.Field, jsonType(te.Type.Kind().String()), te.Value)
		}
		return invalidParams("params: %v", err)
	}
	return nil
}

// jsonType names a Go kind as JSON would.
func jsonType(kind string) string {
	switch {
	case strings.HasPrefix(kind, "int"), strings.HasPrefix(kind, "uint"):
		return "an integer"
	case kind == "float64":
		return "a number"
	case kind == "map", kind == "struct":
		return "an object"
	case kind == "slice":
		return "an array"
	case kind == "bool":
		return "a boolean"
	}
	return "a " + kind
}

type initializeParams struct {
	ProtocolVersion *int `json:"protocolVersion"`
	Client          struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"client"`
}

type serverInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type serveLimits struct {
	MaxLineBytes  int `json:"maxLineBytes"`
	MaxReadBytes  int `json:"maxReadBytes"`
	MaxWriteBytes int `json:"maxWriteBytes"`
}

type initializeResult struct {
	ProtocolVersion int         `json:"protocolVersion"`
	Server          serverInfo  `json:"server"`
	Limits          serveLimits `json:"limits"`
}

func (s *server) initialize(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p initializeParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if p.ProtocolVersion == nil {
		return nil, nil, invalidParams("protocolVersion: required")
	}
	if *p.ProtocolVersion != serveProtocolVersion {
		return nil, nil, newError(codeUnsupported, map[string][]int{"supported": {serveProtocolVersion}},
			"protocol version %d is not supported: this krunbox speaks %d", *p.ProtocolVersion, serveProtocolVersion)
	}
	s.initialized.Store(true)
	s.log.Info("client", "name", p.Client.Name, "version", p.Client.Version)
	return &initializeResult{
		ProtocolVersion: serveProtocolVersion,
		Server:          serverInfo{Name: "krunbox", Version: Version()},
		Limits:          serveLimits{MaxLineBytes: maxLineBytes, MaxReadBytes: maxReadBytes, MaxWriteBytes: maxWriteBytes},
	}, nil, nil
}
