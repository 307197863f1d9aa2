package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/krunbox/krunbox/internal/session"
)

// The sandbox methods of the serve protocol (docs/serve-protocol.md §4):
// params decoded here, the work done by the session.

// The serve protocol's names of the session's status, its states and
// its logs.
type (
	sandboxStatus = session.Status
	logsResult    = session.LogsResult
)

const (
	stateAbsent       = session.StateAbsent
	stateStopped      = session.StateStopped
	stateReady        = session.StateReady
	stateUnresponsive = session.StateUnresponsive
	stateFailed       = session.StateFailed
)

// parseEnsure checks the params of sandbox.ensure and sandbox.restart and
// turns them into a sandbox configuration.
func parseEnsure(raw json.RawMessage) (*session.EnsureRequest, error) {
	var p session.EnsureParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	return session.ParseEnsure(&p)
}

func (s *server) sandboxEnsure(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	req, err := parseEnsure(raw)
	if err != nil {
		return nil, nil, err
	}
	st, err := s.core.Ensure(ctx, req)
	return st, nil, err
}

func (s *server) sandboxStatus(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name string `json:"name"`
		// TimeoutMs bounds the ping of the guest agent (default 2 s), so
		// that a client with a deadline of its own hears "unresponsive"
		// from the server rather than nothing.
		TimeoutMs int `json:"timeoutMs"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := session.CheckName("name", p.Name); err != nil {
		return nil, nil, err
	}
	if p.TimeoutMs < 0 {
		return nil, nil, &rpcError{Code: codeInvalidParams, Message: "timeoutMs: want 0 (the default) or more"}
	}
	st, err := s.core.Status(ctx, p.Name, time.Duration(p.TimeoutMs)*time.Millisecond)
	return st, nil, err
}

func (s *server) sandboxRestart(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	req, err := parseEnsure(raw)
	if err != nil {
		return nil, nil, err
	}
	st, err := s.core.Restart(ctx, req)
	return st, nil, err
}

func (s *server) sandboxStop(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name   string `json:"name"`
		Remove bool   `json:"remove"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	st, err := s.core.Stop(ctx, p.Name, p.Remove)
	return st, nil, err
}

// sandboxNetwork changes the rules of a running sandbox whose network is
// allow=...: {name, op: "allow"|"deny", rules: [RULE...]} → {network}.
func (s *server) sandboxNetwork(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name  string   `json:"name"`
		Op    string   `json:"op"`
		Rules []string `json:"rules"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	n, err := s.core.Network(ctx, p.Name, p.Op, p.Rules)
	if err != nil {
		return nil, nil, err
	}
	return map[string]string{"network": n}, nil, nil
}

func (s *server) sandboxLogs(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name     string `json:"name"`
		MaxBytes *int64 `json:"maxBytes"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := session.CheckName("name", p.Name); err != nil {
		return nil, nil, err
	}
	limit := int64(64 << 10)
	if p.MaxBytes != nil {
		if *p.MaxBytes < 0 || *p.MaxBytes > maxReadBytes {
			return nil, nil, invalidParams("maxBytes %d: want 0 to %d", *p.MaxBytes, maxReadBytes)
		}
		limit = *p.MaxBytes
	}
	r, err := s.core.Logs(p.Name, limit)
	return r, nil, err
}
