package mcpserver

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// git runs git in dir.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return string(out)
}

// --isolate: diff shows the sandbox's work; land needs the user's
// confirmation, asked through elicitation, and is refused, with the
// command to run, by a client that cannot ask.
func TestIsolatedDiffAndLand(t *testing.T) {
	e := newTestEnv(t)
	git(t, e.workspace, "init", "-q")
	git(t, e.workspace, "commit", "-q", "--allow-empty", "-m", "base")
	req := e.request(t, e.image)
	req.Config.Isolate = true
	answer := "decline"
	asked := 0
	_, cs := connect(t, e, Options{Sandbox: req}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: answer}, nil
		},
	})
	ok(t, cs, "write", map[string]any{"path": "new.txt", "content": "from the sandbox\n"})
	if _, err := os.Stat(filepath.Join(e.workspace, "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an isolated write reached the project: %v", err)
	}
	if got := ok(t, cs, "diff", nil); !strings.Contains(got, "+from the sandbox") {
		t.Errorf("diff: %q", got)
	}
	fails(t, cs, "land", nil, "did not confirm")
	if strings.Contains(git(t, e.workspace, "branch", "--list"), "krunbox/") {
		t.Error("a declined land made a branch")
	}
	answer = "accept"
	if got := ok(t, cs, "land", nil); !strings.Contains(got, "landed: branch krunbox/"+req.Config.Name) {
		t.Errorf("land: %q", got)
	}
	if asked != 2 {
		t.Errorf("asked %d times, want 2", asked)
	}
	if got := git(t, e.workspace, "show", "krunbox/"+req.Config.Name+":new.txt"); got != "from the sandbox\n" {
		t.Errorf("the landed file: %q", got)
	}

	// A client of the 2025-06-18 revision (which agents speak today) is
	// asked with elicitation/create.
	_, older := connectVersion(t, e, Options{Sandbox: req}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked++
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	}, "2025-06-18")
	if v := older.InitializeResult().ProtocolVersion; v != "2025-06-18" {
		t.Fatalf("protocol %s", v)
	}
	if got := ok(t, older, "land", nil); !strings.Contains(got, "nothing new to land") || asked != 3 {
		t.Errorf("land from a 2025-06-18 client: %q, asked %d times", got, asked)
	}

	// A client without elicitation is told what to run.
	_, plain := connect(t, e, Options{Sandbox: req}, nil)
	fails(t, plain, "land", nil, `run "krunbox land `+req.Config.Name+`"`)
}

// serveHTTP serves the workspace's sandbox on ln until the test ends.
func serveHTTP(t *testing.T, e *testEnv, ln net.Listener) {
	srv := New(e.host, discard(), Options{Sandbox: e.request(t, e.image)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.ServeHTTP(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	})
}

// Streamable HTTP on a unix socket, and on 127.0.0.1, where a request
// naming another host (DNS rebinding) is refused.
func TestServeHTTP(t *testing.T) {
	e := newTestEnv(t)
	sock := filepath.Join(t.TempDir(), "mcp.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, e, ln)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(),
		&mcp.StreamableClientTransport{Endpoint: "http://localhost/", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := ok(t, cs, "run", map[string]any{"command": "echo over a socket"}); !strings.Contains(got, "over a socket") {
		t.Errorf("run: %q", got)
	}

	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, e, tcp)
	req, _ := http.NewRequest("POST", "http://"+tcp.Addr().String()+"/", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	req.Host = "evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a request for evil.example on 127.0.0.1: %s, want 403", resp.Status)
	}
}
