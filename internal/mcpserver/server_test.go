package mcpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/session"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// testEnv is a fresh krunbox home on the libkrun test double, a busybox
// image in an OCI layout and a workspace.
type testEnv struct {
	host      *hostapi.Host
	image     string
	workspace string
}

func newTestEnv(t testing.TB) *testEnv {
	t.Helper()
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	lib := testkrun.Library(t)
	layout := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "image"), "latest", testimage.Busybox(t))
	base := t.TempDir()
	e := &testEnv{image: "oci:" + layout + ":latest", workspace: filepath.Join(base, "ws")}
	if err := os.MkdirAll(e.workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(krun.LibraryEnv, lib)
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	t.Setenv("KRUNBOX_HOME", filepath.Join(base, "home"))
	h, err := hostapi.NewHost()
	if err != nil {
		t.Fatal(err)
	}
	e.host = h
	t.Cleanup(func() {
		sbs, _ := h.List()
		for _, sb := range sbs {
			sb.Remove(context.Background())
		}
	})
	return e
}

// request is the sandbox of the workspace, with image.
func (e *testEnv) request(t testing.TB, image string) *session.EnsureRequest {
	t.Helper()
	req, err := session.ParseEnsure(&session.EnsureParams{Name: session.SandboxName("mcp", e.workspace), Workspace: e.workspace,
		Config: &session.ConfigParams{Image: image, ImageTrusted: true}})
	if err != nil {
		t.Fatal(err)
	}
	req.StartTimeout = 60 * time.Second
	return req
}

// connect serves opts on in-memory transports and returns a connected
// client session; both end with the test.
func connect(t testing.TB, e *testEnv, opts Options, copts *mcp.ClientOptions) (*Server, *mcp.ClientSession) {
	t.Helper()
	return connectVersion(t, e, opts, copts, "")
}

// connectVersion is connect for a client that asks for a protocol
// revision ("" for the latest).
func connectVersion(t testing.TB, e *testEnv, opts Options, copts *mcp.ClientOptions, version string) (*Server, *mcp.ClientSession) {
	t.Helper()
	srv := New(e.host, slog.New(slog.DiscardHandler), opts)
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.MCP().Run(ctx, st)
		srv.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, copts).Connect(t.Context(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		cancel()
		<-done
	})
	return srv, cs
}

// call calls a tool and returns its text and whether it is an error.
func call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", tool, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// ok calls a tool that must succeed.
func ok(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	out, isErr := call(t, cs, tool, args)
	if isErr {
		t.Fatalf("%s %v: error result %q", tool, args, out)
	}
	return out
}

// fails calls a tool that must give an error result containing want.
func fails(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any, want string) string {
	t.Helper()
	out, isErr := call(t, cs, tool, args)
	if !isErr || !strings.Contains(out, want) {
		t.Fatalf("%s %v: %q (error %v), want an error saying %q", tool, args, out, isErr, want)
	}
	return out
}

func TestSession(t *testing.T) {
	e := newTestEnv(t)
	_, cs := connect(t, e, Options{Sandbox: e.request(t, e.image), Limits: Limits{OutputLines: 50, KeepBytes: 1 << 20}}, nil)
	if got := cs.InitializeResult().ServerInfo.Name; got != "krunbox" {
		t.Errorf("server name %q", got)
	}
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s: no description or schema", tool.Name)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"edit", "find", "grep", "list", "read", "run", "sandbox_restart", "sandbox_status", "write"}; !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v (no diff or land without --isolate)", names, want)
	}

	ws := e.workspace
	// run: stdout, stderr, exit code, cwd, env.
	out := ok(t, cs, "run", map[string]any{"command": "echo out; echo err >&2; pwd; echo $A", "env": map[string]string{"A": "from-env"}})
	for _, want := range []string{"[stdout]\nout\n" + ws + "\nfrom-env\n", "[stderr]\nerr\n", "exit code: 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("run: %q lacks %q", out, want)
		}
	}
	fails(t, cs, "run", map[string]any{"command": "exit 3"}, "exit code: 3")
	if out := ok(t, cs, "run", map[string]any{"command": "pwd", "cwd": "/tmp"}); !strings.Contains(out, "/tmp\n") {
		t.Errorf("run in /tmp: %q", out)
	}
	fails(t, cs, "run", map[string]any{"command": "sleep 30", "timeout_sec": 1}, "timed out after 1s")
	// Long output: its last lines, the whole of it saved in the guest.
	out = fails(t, cs, "run", map[string]any{"command": "seq 1 100000; exit 1"}, "exit code: 1")
	if !strings.Contains(out, "\n100000\n") || strings.Contains(out, "\n99950\n") || !strings.Contains(out, "is in the sandbox at /tmp/krunbox-mcp/") {
		t.Errorf("long output: %q", out)
	}
	saved := out[strings.Index(out, "/tmp/krunbox-mcp/"):]
	saved = saved[:strings.IndexAny(saved, " )")]
	if got := ok(t, cs, "run", map[string]any{"command": "wc -l < " + saved}); !strings.Contains(got, "100000") {
		t.Errorf("the saved output %s: %q", saved, got)
	}

	// write, read, edit, list, find, grep: through the guest, seen on the
	// host through the live mount.
	ok(t, cs, "write", map[string]any{"path": "src/a.go", "content": "package a\n\nfunc A() int { return 1 }\n"})
	if b, err := os.ReadFile(filepath.Join(ws, "src/a.go")); err != nil || !strings.Contains(string(b), "return 1") {
		t.Fatalf("the write on the host: %q, %v", b, err)
	}
	if got := ok(t, cs, "read", map[string]any{"path": ws + "/src/a.go"}); got != "     1\tpackage a\n     2\t\n     3\tfunc A() int { return 1 }\n" {
		t.Errorf("read: %q", got)
	}
	if got := ok(t, cs, "read", map[string]any{"path": "src/a.go", "offset": 3, "limit": 1}); got != "     3\tfunc A() int { return 1 }\n" {
		t.Errorf("read a range: %q", got)
	}
	ok(t, cs, "edit", map[string]any{"path": "src/a.go", "old_string": "return 1", "new_string": "return 2"})
	if b, _ := os.ReadFile(filepath.Join(ws, "src/a.go")); !strings.Contains(string(b), "return 2") {
		t.Errorf("after edit: %q", b)
	}
	fails(t, cs, "edit", map[string]any{"path": "src/a.go", "old_string": "return 1", "new_string": "x"}, "was not found")
	ok(t, cs, "write", map[string]any{"path": "src/b.txt", "content": "x\nx\n"})
	fails(t, cs, "edit", map[string]any{"path": "src/b.txt", "old_string": "x", "new_string": "y"}, "occurs 2 times")
	ok(t, cs, "edit", map[string]any{"path": "src/b.txt", "old_string": "x", "new_string": "y", "replace_all": true})
	if b, _ := os.ReadFile(filepath.Join(ws, "src/b.txt")); string(b) != "y\ny\n" {
		t.Errorf("after replace_all: %q", b)
	}
	if got := ok(t, cs, "list", map[string]any{"path": "src"}); got != "a.go\nb.txt\n" {
		t.Errorf("list: %q", got)
	}
	if got := ok(t, cs, "list", nil); got != "src/\n" {
		t.Errorf("list of the workspace: %q", got)
	}
	if got := ok(t, cs, "find", map[string]any{"pattern": "*.go"}); got != "src/a.go\n" {
		t.Errorf("find *.go: %q", got)
	}
	if got := ok(t, cs, "find", map[string]any{"pattern": "src/**"}); got != "src/a.go\nsrc/b.txt\n" {
		t.Errorf("find src/**: %q", got)
	}
	if got := ok(t, cs, "grep", map[string]any{"pattern": "func [A-Z]"}); !strings.Contains(got, "src/a.go:3:func A()") {
		t.Errorf("grep: %q", got)
	}
	if got := ok(t, cs, "grep", map[string]any{"pattern": "[ay]", "glob": "*.txt"}); got != ws+"/src/b.txt:1:y\n"+ws+"/src/b.txt:2:y\n" {
		t.Errorf("grep with a glob: %q", got)
	}
	ok(t, cs, "run", map[string]any{"command": "mkdir -p .git && echo 'func Hidden' > .git/x"})
	if got := ok(t, cs, "grep", map[string]any{"pattern": "func"}); strings.Contains(got, ".git") {
		t.Errorf("grep searched .git: %q", got)
	}
	if got := ok(t, cs, "grep", map[string]any{"pattern": "nowhere"}); !strings.Contains(got, "no match") {
		t.Errorf("grep without a match: %q", got)
	}
	// Binary files are not shown.
	ok(t, cs, "run", map[string]any{"command": "printf 'a\\0b' > bin.dat"})
	if got := ok(t, cs, "read", map[string]any{"path": "bin.dat"}); !strings.Contains(got, "binary file of 3 bytes") {
		t.Errorf("read of a binary file: %q", got)
	}
	fails(t, cs, "read", map[string]any{"path": "missing"}, "no such file")

	// A path outside the workspace is the guest's, never the host's.
	marker := "/tmp/krunbox-mcp-test-" + strconv.Itoa(os.Getpid())
	ok(t, cs, "write", map[string]any{"path": marker, "content": "guest\n"})
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("write %s reached the host: %v", marker, err)
	}
	if got := ok(t, cs, "read", map[string]any{"path": marker}); got != "     1\tguest\n" {
		t.Errorf("read %s: %q", marker, got)
	}

	if got := ok(t, cs, "sandbox_status", nil); !strings.Contains(got, ": ready\n") || !strings.Contains(got, "workspace: "+ws) {
		t.Errorf("status: %q", got)
	}
	if got := ok(t, cs, "sandbox_restart", map[string]any{"recreate": true}); !strings.Contains(got, "made again from its image: ready") {
		t.Errorf("restart: %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "src/a.go")); err != nil {
		t.Errorf("the workspace after a recreate: %v", err)
	}
	fails(t, cs, "read", map[string]any{"path": marker}, "no such file")
}

func TestHostileArguments(t *testing.T) {
	e := newTestEnv(t)
	_, cs := connect(t, e, Options{Sandbox: e.request(t, e.image), Limits: Limits{WriteBytes: 1 << 20, ArgBytes: 1 << 10}}, nil)
	big := strings.Repeat("x", 1<<20+1)
	fails(t, cs, "write", map[string]any{"path": "big", "content": big}, "more than the 1048576 one write takes")
	if _, err := os.Stat(filepath.Join(e.workspace, "big")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused write wrote: %v", err)
	}
	fails(t, cs, "run", map[string]any{"command": "echo " + strings.Repeat("y", 2<<10)}, "more than the 1024 this tool takes")
	fails(t, cs, "grep", map[string]any{"pattern": strings.Repeat("z", 2<<10)}, "more than the 1024")
	fails(t, cs, "run", map[string]any{"command": "true", "env": map[string]string{"BIG": strings.Repeat("v", 2<<10)}}, "env: ")
	fails(t, cs, "read", map[string]any{"path": "/" + strings.Repeat("p", 5000)}, "not a path")
	fails(t, cs, "run", map[string]any{"command": "true", "timeout_sec": 1 << 30}, "timeout_sec")
	fails(t, cs, "edit", map[string]any{"path": "f", "old_string": "", "new_string": "x"}, "old_string: required")
	// The read tool's scan is bounded: a file of one endless line.
	ok(t, cs, "run", map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' a > long"})
	if got := ok(t, cs, "read", map[string]any{"path": "long"}); !strings.HasSuffix(got, "[line cut]\n") || len(got) > 10000 {
		t.Errorf("read of one long line: %d bytes, ends %q", len(got), got[max(0, len(got)-40):])
	}
}

// A sandbox that cannot start fails closed: every tool says so, and
// nothing runs, on the host or anywhere.
func TestBrokenSandboxFailsClosed(t *testing.T) {
	e := newTestEnv(t)
	_, cs := connect(t, e, Options{Sandbox: e.request(t, "oci:"+filepath.Join(t.TempDir(), "none")+":latest")}, nil)
	marker := filepath.Join(e.workspace, "ran")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run", map[string]any{"command": "touch " + marker}},
		{"write", map[string]any{"path": marker, "content": "x"}},
		{"read", map[string]any{"path": marker}},
		{"edit", map[string]any{"path": marker, "old_string": "a", "new_string": "b"}},
		{"list", nil},
		{"find", map[string]any{"pattern": "*"}},
		{"grep", map[string]any{"pattern": "x"}},
		{"sandbox_restart", nil},
	} {
		fails(t, cs, c.tool, c.args, "the sandbox is not running, so nothing ran")
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a tool ran although the sandbox did not start: %v", err)
	}
	if got := ok(t, cs, "sandbox_status", nil); !strings.Contains(got, "the last start failed: ") || !strings.Contains(got, "hint:") {
		t.Errorf("status of a broken sandbox: %q", got)
	}
}

// guestAlive reports whether the guest process whose pid the workspace's
// file holds still runs, asked through the agent.
func guestAlive(t testing.TB, e *testEnv, name, pidFile string) bool {
	t.Helper()
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := e.host.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	c := sb.Client()
	defer c.Close()
	r, err := c.Run(t.Context(), hostapi.Cmd{Args: []string{"kill", "-0", strings.TrimSpace(string(pid))}})
	if err != nil {
		t.Fatal(err)
	}
	return r.ExitCode == 0
}

// A cancelled call kills its never-ending command in the VM; progress
// comes while it runs.
func TestRunCancelAndProgress(t *testing.T) {
	e := newTestEnv(t)
	req := e.request(t, e.image)
	var mu sync.Mutex
	var progress []string
	got := make(chan struct{}, 1)
	_, cs := connect(t, e, Options{Sandbox: req, Limits: Limits{ProgressEvery: 20 * time.Millisecond}}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			progress = append(progress, r.Params.Message)
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
		},
	})
	pidFile := filepath.Join(e.workspace, "pid")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"command": "echo $$ > " + pidFile + "; exec sleep 100000"},
			Meta: mcp.Meta{"progressToken": "p1"}})
		done <- err
	}()
	select {
	case <-got:
	case <-time.After(60 * time.Second):
		t.Fatal("no progress notification in 60s")
	}
	poll.Until(t, "the command's pid file", 30*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.HasSuffix(string(b), "\n")
	})
	if !guestAlive(t, e, req.Config.Name, pidFile) {
		t.Fatal("the command is not running")
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled call succeeded")
	}
	poll.Until(t, "the cancelled command to be killed in the VM", 30*time.Second, func() bool { return !guestAlive(t, e, req.Config.Name, pidFile) })
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(progress[0], "running for") {
		t.Errorf("progress %q", progress)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A session whose client goes away leaves no goroutine behind: not the
// server's, not its commands' pumps, not its agent connections'.
func TestNoGoroutineLeft(t *testing.T) {
	e := newTestEnv(t)
	req := e.request(t, e.image)
	// The sandbox is started first: its runner, a child of this process,
	// has a goroutine that waits for it, and outlives the session.
	m := session.New(e.host, discard(), session.Options{})
	if _, err := m.Ensure(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	m.Close()
	before := runtime.NumGoroutine()
	srv := New(e.host, discard(), Options{Sandbox: req})
	toServer, fromClient := io.Pipe()
	toClient, fromServer := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- srv.ServeStdio(context.Background(), toServer, fromServer) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(t.Context(),
		&mcp.IOTransport{Reader: toClient, Writer: fromClient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok(t, cs, "read", map[string]any{"path": "/etc/passwd"})
	pidFile := filepath.Join(e.workspace, "pid")
	go cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"command": "echo $$ > " + pidFile + "; exec sleep 100000"}})
	poll.Until(t, "the command's pid file", 30*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.HasSuffix(string(b), "\n")
	})
	// The client goes away mid-call: its pipes close.
	fromClient.Close()
	toClient.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not end 30s after its client went away")
	}
	if guestAlive(t, e, req.Config.Name, pidFile) {
		t.Error("the command outlived its client")
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
