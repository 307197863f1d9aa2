package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/hostapi"
)

// The tools of an isolated session (--isolate): the sandbox works on its
// own checkout of the project, and its work comes out through diff and
// land.

// diffBytes bounds the diff the diff tool answers with.
const diffBytes = 1 << 20

func (s *Server) addIsolateTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "diff",
		Title: "Show the sandbox's work",
		Description: "Show what the sandbox changed in its own checkout of the project, as a git diff against the commit it started from " +
			"(stat: a summary). It changes nothing.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.diff)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "land",
		Title: "Land the sandbox's work in the project",
		Description: "Bring the sandbox's work into the user's repository as the branch krunbox/<sandbox> (its commits, and one more for what is not committed; squash: one commit in all). " +
			"The user must confirm: the client asks them; a client that cannot ask is refused, with the command the user can run instead.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)},
	}, s.land)
}

// DiffInput are the diff tool's arguments.
type DiffInput struct {
	Stat  bool     `json:"stat,omitempty" jsonschema:"a summary of the changed files instead of the patch"`
	Paths []string `json:"paths,omitempty" jsonschema:"only these files or directories, relative to the project"`
}

// boundedBuffer keeps the first max bytes written and counts the rest.
type boundedBuffer struct {
	bytes.Buffer
	max   int
	total int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.total += len(p)
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (s *Server) diff(ctx context.Context, _ *mcp.CallToolRequest, in DiffInput) (*mcp.CallToolResult, any, error) {
	sb, err := s.core.Host().Get(s.name)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: %v", s.name, err)
	}
	out := &boundedBuffer{max: diffBytes}
	if err := sb.Diff(ctx, out, hostapi.DiffOptions{Paths: in.Paths, Stat: in.Stat}); err != nil {
		return nil, nil, fmt.Errorf("diff: %v", err)
	}
	if out.total == 0 {
		return result("no changes"), nil, nil
	}
	if out.total > out.max {
		return result("%s\n[cut at %d of %d bytes: ask for stat, or for fewer paths; the user can run krunbox diff %s]", text(out.Bytes()), out.max, out.total, s.name), nil, nil
	}
	return result("%s", text(out.Bytes())), nil, nil
}

// LandInput are the land tool's arguments.
type LandInput struct {
	Squash bool `json:"squash,omitempty" jsonschema:"make one commit of all the work"`
}

// confirmID names the land tool's request for the user's confirmation.
const confirmID = "confirm-land"

// errNoConfirm refuses a land the user could not confirm.
var errNoConfirm = errors.New("landing changes the user's project, so the user must confirm it, and this client cannot ask them")

func (s *Server) land(ctx context.Context, req *mcp.CallToolRequest, in LandInput) (*mcp.CallToolResult, any, error) {
	cli := "krunbox land " + s.name
	if in.Squash {
		cli = "krunbox land --squash " + s.name
	}
	p := req.Session.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return nil, nil, fmt.Errorf("%v: ask the user to run %q in a terminal (krunbox diff %s shows the work first)", errNoConfirm, cli, s.name)
	}
	// Asked as an input request: the SDK sends it as elicitation/create
	// to a client of an older protocol, and as a multi round-trip input
	// request to one of 2026-07-28 or later, then calls land again with
	// the answer.
	resp, asked := req.Params.InputResponses[confirmID]
	if !asked {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{confirmID: &mcp.ElicitParams{
			Message:         fmt.Sprintf("Land the work of sandbox %s in %s (as %q would)?", s.name, s.ws, cli),
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
		}}}, nil, nil
	}
	answer, _ := resp.(*mcp.ElicitResult)
	if answer == nil || answer.Action != "accept" {
		action := "no answer"
		if answer != nil {
			action = answer.Action
		}
		return nil, nil, fmt.Errorf("the user did not confirm (%s): nothing landed", action)
	}
	sb, err := s.core.Host().Get(s.name)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s: %v", s.name, err)
	}
	l, err := sb.Land(ctx, hostapi.LandOptions{Squash: in.Squash})
	if err != nil {
		return nil, nil, fmt.Errorf("land: %v", err)
	}
	if l.Unchanged {
		return result("nothing new to land: %s is at %s", l.Branch, l.Commit), nil, nil
	}
	return result("landed: branch %s is at %s, %d commit(s) over the base; the user merges it when they want", l.Branch, l.Commit, l.Commits), nil, nil
}
