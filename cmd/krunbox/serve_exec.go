package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/session"
)

// The exec methods of the serve protocol (docs/serve-protocol.md §5):
// params decoded here, output and exits sent as notifications, the
// commands run by the session.

type execStartParams struct {
	Sandbox   string            `json:"sandbox"`
	ExecID    string            `json:"execId"`
	Argv      []string          `json:"argv"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TimeoutMs *int64            `json:"timeoutMs"`
	Stdin     *string           `json:"stdin"`
}

type execStartResult struct {
	ExecID string `json:"execId"`
	Pid    int    `json:"pid"`
}

type execOutput struct {
	ExecID string `json:"execId"`
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
}

type execExit struct {
	ExecID string `json:"execId"`
	session.Exit
}

func (s *server) execStart(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p execStartParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := session.CheckName("sandbox", p.Sandbox); err != nil {
		return nil, nil, err
	}
	cmd := hostapi.Cmd{Args: p.Argv, Dir: p.Cwd}
	env, err := session.EnvList(p.Env)
	if err != nil {
		return nil, nil, invalidParams("env: %v", err)
	}
	cmd.Env = env
	if p.TimeoutMs != nil {
		if *p.TimeoutMs <= 0 {
			return nil, nil, invalidParams("timeoutMs %d: want more than 0", *p.TimeoutMs)
		}
		cmd.Timeout = time.Duration(*p.TimeoutMs) * time.Millisecond
	}
	if p.Stdin != nil {
		data, err := base64.StdEncoding.DecodeString(*p.Stdin)
		if err != nil {
			return nil, nil, invalidParams("stdin: not base64: %v", err)
		}
		cmd.Stdin = bytes.NewReader(data)
	}
	e, err := s.core.Start(ctx, p.Sandbox, p.ExecID, cmd)
	if err != nil {
		return nil, nil, err
	}
	return &execStartResult{ExecID: p.ExecID, Pid: e.Pid()}, func() { go s.pump(p.ExecID, e) }, nil
}

// pump sends the command's output as exec.output, then its exec.exit.
func (s *server) pump(id string, e *session.Exec) {
	s.core.Pump(e, func(stream string, data []byte) {
		s.out.send(&message{Method: "exec.output", Params: &execOutput{ExecID: id, Stream: stream, Data: data}})
	}, func(end *session.Exit) {
		s.out.send(&message{Method: "exec.exit", Params: &execExit{ExecID: id, Exit: *end}})
	})
}

// serveSignals are the signals exec.signal sends.
var serveSignals = []string{"SIGHUP", "SIGINT", "SIGQUIT", "SIGKILL", "SIGUSR1", "SIGUSR2", "SIGTERM", "SIGCONT", "SIGSTOP"}

func (s *server) execSignal(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		ExecID string `json:"execId"`
		Signal string `json:"signal"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if !slices.Contains(serveSignals, p.Signal) {
		return nil, nil, invalidParams("signal %q: want one of %v", p.Signal, serveSignals)
	}
	return map[string]bool{"delivered": s.core.Signal(p.ExecID, unix.SignalNum(p.Signal))}, nil, nil
}
