package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// mcpSession connects a client of the Go SDK to krunbox mcp on stdio, run
// in the workspace ws.
func mcpSession(t *testing.T, e *env, ws string) (*mcp.ClientSession, *exec.Cmd) {
	t.Helper()
	cmd := e.command("mcp", "--image", image)
	cmd.Dir = ws
	cmd.Stderr = &strings.Builder{}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("connect to krunbox mcp: %v (stderr %s)", err, cmd.Stderr)
	}
	return cs, cmd
}

// mcpCall calls a tool, which must succeed, and returns its text.
func mcpCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s %v: error result %q", tool, args, b.String())
	}
	return b.String()
}

// testMCPSession runs one MCP session against the built krunbox: every
// tool in the VM, then a client that goes away in the middle of a
// never-ending command, which must be stopped in the VM, and the server
// with it.
func testMCPSession(t *testing.T, e *env) {
	e.pull()
	ws := t.TempDir()
	cs, server := mcpSession(t, e, ws)
	if out := mcpCall(t, cs, "run", map[string]any{"command": "echo in-vm; uname -n"}); !strings.Contains(out, "[stdout]\nin-vm\n") || !strings.Contains(out, "exit code: 0") {
		t.Fatalf("run: %q", out)
	}
	st := mcpCall(t, cs, "sandbox_status", nil)
	name := strings.TrimPrefix(strings.SplitN(st, ":", 2)[0], "sandbox ")
	if !strings.Contains(st, name+": ready") {
		t.Fatalf("status: %q", st)
	}
	mcpCall(t, cs, "write", map[string]any{"path": "a.txt", "content": "alpha\nbeta\n"})
	if b, err := os.ReadFile(filepath.Join(ws, "a.txt")); err != nil || string(b) != "alpha\nbeta\n" {
		t.Errorf("the write on the host: %q, %v", b, err)
	}
	mcpCall(t, cs, "edit", map[string]any{"path": "a.txt", "old_string": "beta", "new_string": "gamma"})
	if out := mcpCall(t, cs, "read", map[string]any{"path": "a.txt"}); out != "     1\talpha\n     2\tgamma\n" {
		t.Errorf("read after edit: %q", out)
	}
	if out := mcpCall(t, cs, "list", nil); out != "a.txt\n" {
		t.Errorf("list: %q", out)
	}
	if out := mcpCall(t, cs, "find", map[string]any{"pattern": "*.txt"}); out != "a.txt\n" {
		t.Errorf("find: %q", out)
	}
	if out := mcpCall(t, cs, "grep", map[string]any{"pattern": "gam+a"}); !strings.Contains(out, "a.txt:2:gamma") {
		t.Errorf("grep: %q", out)
	}

	cs.Close()
	if ps := server.ProcessState; ps == nil || !ps.Exited() || ps.ExitCode() != 0 {
		t.Errorf("krunbox mcp after its client closed: %v, want an exit of its own, 0 (stderr %s)", ps, server.Stderr)
	}

	// A client that goes away in the middle of a call (it crashed: its
	// pipes close): the command stops in the VM and the server exits.
	cmd := e.command("mcp", "--image", image)
	cmd.Dir = ws
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pidFile := filepath.Join(ws, "pid")
	fmt.Fprintf(stdin, "%s\n%s\n%s\n",
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"crash","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run","arguments":{"command":"echo $$ > `+pidFile+`; exec sleep 100000"}}}`)
	poll.Until(t, "the command to start", 60*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.HasSuffix(string(b), "\n")
	})
	b, _ := os.ReadFile(pidFile)
	pid := strings.TrimSpace(string(b))
	if r := e.krunbox("exec", name, "kill", "-0", pid); r.code != 0 {
		t.Fatalf("the command is not running: %s", r)
	}
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("krunbox mcp after its client went away: %v", err)
		}
	case <-time.After(poll.Scaled(30 * time.Second)):
		cmd.Process.Kill()
		t.Fatalf("krunbox mcp did not exit %v after its client went away mid-call", poll.Scaled(30*time.Second))
	}
	if r := e.krunbox("exec", name, "kill", "-0", pid); r.code == 0 {
		t.Errorf("the command of a client that went away still runs in the VM")
	}
}
