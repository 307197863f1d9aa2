package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/session"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/proctree"
	"github.com/krunbox/krunbox/internal/testutil/syncbuf"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

// serveMsg is a message from the server.
type serveMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *rpcError       `json:"error"`
}

// serveConn drives one server over its stdin and stdout.
type serveConn struct {
	t      *testing.T
	stdin  io.WriteCloser
	exited chan int

	mu     sync.Mutex
	msgs   []serveMsg
	raw    []string // every line, in order
	update chan struct{}
	nextID int
}

// newServeConn returns a connection writing to stdin, and closes stdin
// when the test ends, expecting the server to exit then (kill is called
// when it does not).
func newServeConn(t *testing.T, stdin io.WriteCloser, stderr *syncbuf.Buffer, kill func()) *serveConn {
	c := &serveConn{t: t, stdin: stdin, exited: make(chan int, 1), update: make(chan struct{}, 1)}
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			kill()
			t.Errorf("serve did not exit 30s after stdin closed")
		}
		if t.Failed() {
			t.Logf("serve's stderr:\n%s", stderr.String())
		}
	})
	return c
}

// startServe runs "krunbox serve --stdio" in-process on pipes.
func startServe(t *testing.T) *serveConn {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stderr := &syncbuf.Buffer{}
	c := newServeConn(t, inW, stderr, func() {})
	go func() {
		code := Main([]string{"serve", "--stdio", "--log-level", "debug"}, inR, outW, stderr)
		outW.Close()
		c.exited <- code
	}()
	go c.read(outR)
	return c
}

// startServeProcess runs a krunbox binary's serve --stdio.
func startServeProcess(t *testing.T, bin string, env []string) *serveConn {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--stdio")
	cmd.Env = env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := newServeConn(t, stdin, stderr, func() { cmd.Process.Kill() })
	go func() {
		c.read(stdout)
		cmd.Wait()
		c.exited <- cmd.ProcessState.ExitCode()
	}()
	return c
}

func (c *serveConn) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var m serveMsg
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				c.t.Errorf("serve wrote a line that is not JSON: %q", line)
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.raw = append(c.raw, string(line))
			c.mu.Unlock()
			select {
			case c.update <- struct{}{}:
			default:
			}
		}
		if err != nil {
			return
		}
	}
}

// write sends a raw line.
func (c *serveConn) write(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

// send sends a request and returns its id.
func (c *serveConn) send(method string, params any) string {
	c.t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	c.mu.Unlock()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(string(b))
	return fmt.Sprint(id)
}

// waitFor returns the first message matching pred (called with c.mu
// held) and its index.
func (c *serveConn) waitFor(what string, timeout time.Duration, pred func(serveMsg) bool) (serveMsg, int) {
	c.t.Helper()
	deadline := time.After(timeout)
	for {
		c.mu.Lock()
		for i, m := range c.msgs {
			if pred(m) {
				c.mu.Unlock()
				return m, i
			}
		}
		c.mu.Unlock()
		select {
		case <-c.update:
		case <-deadline:
			c.t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}

// response waits for the answer to the request id.
func (c *serveConn) response(id string) serveMsg {
	c.t.Helper()
	m, _ := c.waitFor("the answer to request "+id, 60*time.Second, func(m serveMsg) bool { return string(m.ID) == id })
	return m
}

// call makes a request and decodes its result into out; it fails the test
// on an error answer.
func (c *serveConn) call(method string, params, out any) {
	c.t.Helper()
	m := c.response(c.send(method, params))
	if m.Error != nil {
		c.t.Fatalf("%s: error %d: %s (data %v)", method, m.Error.Code, m.Error.Message, m.Error.Data)
	}
	if out != nil {
		if err := json.Unmarshal(m.Result, out); err != nil {
			c.t.Fatalf("%s: result %s: %v", method, m.Result, err)
		}
	}
}

// callErr makes a request that must fail with code.
func (c *serveConn) callErr(method string, params any, code int) *rpcError {
	c.t.Helper()
	m := c.response(c.send(method, params))
	if m.Error == nil {
		c.t.Fatalf("%s %v: answered %s, want error %d", method, params, m.Result, code)
	}
	if m.Error.Code != code {
		c.t.Fatalf("%s %v: error %d (%s), want %d", method, params, m.Error.Code, m.Error.Message, code)
	}
	if m.Error.Message == "" || strings.Contains(m.Error.Message, "\n") {
		c.t.Errorf("%s: error message %q: want one line", method, m.Error.Message)
	}
	return m.Error
}

func (c *serveConn) initialize() {
	c.t.Helper()
	c.call("initialize", map[string]any{"protocolVersion": 1, "client": map[string]string{"name": "test", "version": "0"}}, nil)
}

// closeAndWait closes stdin and returns the server's exit code.
func (c *serveConn) closeAndWait() int {
	c.t.Helper()
	c.stdin.Close()
	select {
	case code := <-c.exited:
		c.exited <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		c.t.Fatal("serve did not exit after stdin closed")
	}
	return -1
}

// serveEnv is the environment of a test that runs sandboxes: the libkrun
// test double, the test agent, a fresh KRUNBOX_HOME, a busybox image and a
// workspace.
type serveEnv struct {
	home, image, workspace string
}

func newServeEnv(t *testing.T) *serveEnv {
	t.Helper()
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	lib := testkrun.Library(t)
	layout := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "image"), "latest", testimage.Busybox(t))
	base := t.TempDir()
	e := &serveEnv{home: filepath.Join(base, "home"), image: "oci:" + layout + ":latest", workspace: filepath.Join(base, "ws")}
	if err := os.MkdirAll(e.workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(krun.LibraryEnv, lib)
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	t.Setenv("KRUNBOX_HOME", e.home)
	t.Cleanup(func() {
		// Sandboxes outlive their server: remove them.
		h, err := hostapi.NewHost()
		if err != nil {
			return
		}
		sbs, _ := h.List()
		for _, sb := range sbs {
			sb.Remove(context.Background())
		}
	})
	return e
}

// readySandbox starts a server, initialized, with the sandbox name ready
// in a fresh environment.
func readySandbox(t *testing.T, name string, config map[string]any) (*serveEnv, *serveConn) {
	t.Helper()
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	c.call("sandbox.ensure", e.ensureParams(name, config), nil)
	return e, c
}

func (e *serveEnv) ensureParams(name string, config map[string]any) map[string]any {
	cfg := map[string]any{"image": e.image, "imageTrusted": true}
	for k, v := range config {
		cfg[k] = v
	}
	return map[string]any{"name": name, "workspace": e.workspace, "config": cfg}
}

// execResult is what a command did.
type execResult struct {
	stdout, stderr string
	exit           execExit
}

// exitOf waits for the exec.exit of id.
func (c *serveConn) exitOf(id string, timeout time.Duration) (execExit, int) {
	c.t.Helper()
	m, i := c.waitFor("exec.exit of "+id, timeout, func(m serveMsg) bool {
		var e execExit
		return m.Method == "exec.exit" && json.Unmarshal(m.Params, &e) == nil && e.ExecID == id
	})
	var e execExit
	json.Unmarshal(m.Params, &e)
	return e, i
}

// output returns what exec id wrote on stream so far.
func (c *serveConn) output(id, stream string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, m := range c.msgs {
		var o execOutput
		if m.Method == "exec.output" && json.Unmarshal(m.Params, &o) == nil && o.ExecID == id && o.Stream == stream {
			b.Write(o.Data)
		}
	}
	return b.String()
}

var execSeq struct {
	sync.Mutex
	n int
}

// run runs a command to its end.
func (c *serveConn) run(sandbox string, params map[string]any, argv ...string) execResult {
	c.t.Helper()
	execSeq.Lock()
	execSeq.n++
	id := fmt.Sprintf("e%d", execSeq.n)
	execSeq.Unlock()
	p := map[string]any{"sandbox": sandbox, "execId": id, "argv": argv}
	for k, v := range params {
		p[k] = v
	}
	c.call("exec.start", p, nil)
	exit, _ := c.exitOf(id, 60*time.Second)
	return execResult{stdout: c.output(id, "stdout"), stderr: c.output(id, "stderr"), exit: exit}
}

func (c *serveConn) sh(sandbox, script string) string {
	c.t.Helper()
	r := c.run(sandbox, nil, "/bin/sh", "-c", script)
	if r.exit.ExitCode == nil || *r.exit.ExitCode != 0 {
		c.t.Fatalf("sh -c %q: %+v, stderr %q", script, r.exit, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestServeFraming(t *testing.T) {
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	c := startServe(t)
	if e := c.callErr("sandbox.status", map[string]any{"name": "x"}, codeNotInitialized); e == nil {
		t.Fatal()
	}
	e := c.callErr("initialize", map[string]any{"protocolVersion": 99}, codeUnsupported)
	if d, _ := json.Marshal(e.Data); string(d) != `{"supported":[1]}` {
		t.Errorf("unsupported version data %s, want supported [1]", d)
	}
	c.callErr("initialize", map[string]any{}, codeInvalidParams)
	// initialize and a request right behind it, unanswered: the request
	// finds initialize done.
	c.write(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":1}}`)
	c.write(`{"jsonrpc":"2.0","id":"behind","method":"sandbox.status","params":{"name":"behind"}}`)
	if m := c.response(`"behind"`); m.Error != nil {
		t.Fatalf("a request sent right behind initialize: %v", m.Error)
	}
	var init initializeResult
	json.Unmarshal(c.response(`"init"`).Result, &init)
	if init.ProtocolVersion != 1 || init.Server.Name != "krunbox" || init.Limits != (serveLimits{maxLineBytes, maxReadBytes, maxWriteBytes}) {
		t.Errorf("initialize: %+v", init)
	}

	bad := []struct {
		name, line string
		code       int
	}{
		{"not JSON", `this is not json`, codeParseError},
		{"truncated JSON", `{"jsonrpc":"2.0","id":1,`, codeParseError},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"sandbox.status"}]`, codeInvalidRequest},
		{"a number", `42`, codeInvalidRequest},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"sandbox.status"}`, codeInvalidRequest},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"sandbox.status"}`, codeInvalidRequest},
		{"method not a string", `{"jsonrpc":"2.0","id":1,"method":7}`, codeInvalidRequest},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c.mu.Lock()
			from := len(c.msgs)
			c.mu.Unlock()
			c.write(tt.line)
			m, _ := c.waitFor(tt.name, 10*time.Second, func(m serveMsg) bool { return m.Error != nil && string(m.ID) == "null" })
			c.mu.Lock()
			c.msgs = c.msgs[:from] // forget it: later cases wait for their own
			c.mu.Unlock()
			if m.Error.Code != tt.code {
				t.Errorf("%s: error %d (%s), want %d", tt.line, m.Error.Code, m.Error.Message, tt.code)
			}
		})
	}
	c.callErr("no.such.method", nil, codeMethodNotFound)
	c.callErr("sandbox.status", []int{1}, codeInvalidParams)
	c.callErr("sandbox.status", map[string]any{"name": 7}, codeInvalidParams)
	c.callErr("sandbox.status", map[string]any{"name": "Bad_Name"}, codeInvalidParams)
	c.callErr("sandbox.logs", map[string]any{"name": "x", "maxBytes": maxReadBytes + 1}, codeInvalidParams)
	// A notification (no id) gets nothing; a wrong version gets an error
	// with its id.
	c.mu.Lock()
	from := len(c.msgs)
	c.mu.Unlock()
	c.write(`{"jsonrpc":"2.0","method":"sandbox.status","params":{"name":"x"}}`)
	c.write(`{"jsonrpc":"1.0","id":"v1","method":"sandbox.status","params":{"name":"x"}}`)
	if m := c.response(`"v1"`); m.Error == nil || m.Error.Code != codeInvalidRequest {
		t.Errorf("jsonrpc 1.0: %+v", m)
	}
	c.mu.Lock()
	if n := len(c.msgs) - from; n != 1 {
		t.Errorf("%d messages for a notification and a request, want 1: %q", n, c.raw[from:])
	}
	c.mu.Unlock()
	// An oversize line is discarded and answered; the next one is served.
	go func() {
		big := bytes.Repeat([]byte("x"), maxLineBytes+10)
		c.stdin.Write(append(big, '\n'))
	}()
	m, _ := c.waitFor("the oversize line's error", 60*time.Second, func(m serveMsg) bool {
		return m.Error != nil && string(m.ID) == "null" && strings.Contains(m.Error.Message, "longer than")
	})
	if m.Error.Code != codeInvalidRequest {
		t.Errorf("oversize line: error %d", m.Error.Code)
	}
	var st sandboxStatus
	c.call("sandbox.status", map[string]any{"name": "after-the-big-one"}, &st)
	if st.State != stateAbsent {
		t.Errorf("status of a sandbox that does not exist: %+v", st)
	}
	if code := c.closeAndWait(); code != 0 {
		t.Errorf("exit code at EOF %d, want 0", code)
	}
}

func TestServeImageErrors(t *testing.T) {
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	bad := map[string]any{"name": "badref", "workspace": e.workspace, "config": map[string]any{"image": "UPPER/Case::x"}}
	c.callErr("sandbox.ensure", bad, codeInvalidConfig)
	missing := map[string]any{"name": "nolayout", "workspace": e.workspace, "config": map[string]any{"image": "oci:" + filepath.Join(e.home, "none") + ":latest", "imageTrusted": true}}
	err := c.callErr("sandbox.ensure", missing, codeStartFailed)
	if d, _ := json.Marshal(err.Data); !strings.Contains(string(d), `"hint":"check the image reference`) {
		t.Errorf("an image that cannot be pulled: %s, data %s", err.Message, d)
	}
	var st sandboxStatus
	c.call("sandbox.status", map[string]any{"name": "nolayout"}, &st)
	if st.State != stateAbsent {
		t.Errorf("status after a failed pull: %+v", st)
	}
}

func TestServeNeedsStdio(t *testing.T) {
	code, _, errOut := runCLI(t, "serve")
	if code != ExitKrunbox || !strings.Contains(errOut, "--stdio") {
		t.Errorf("serve without --stdio: code %d, stderr %q", code, errOut)
	}
}

func TestServeEnsureParams(t *testing.T) {
	ws := t.TempDir()
	other := t.TempDir()
	ensure := func(config map[string]any) map[string]any {
		cfg := map[string]any{"image": "alpine"}
		for k, v := range config {
			cfg[k] = v
		}
		return map[string]any{"name": "sb", "workspace": ws, "config": cfg}
	}
	tests := []struct {
		name   string
		params any
		code   int
	}{
		{"bad name", map[string]any{"name": "Bad_Name", "workspace": ws, "config": map[string]any{"image": "alpine"}}, codeInvalidParams},
		{"relative workspace", map[string]any{"name": "sb", "workspace": "rel", "config": map[string]any{"image": "alpine"}}, codeInvalidParams},
		{"no config", map[string]any{"name": "sb", "workspace": ws}, codeInvalidParams},
		{"cpus not a number", ensure(map[string]any{"cpus": "two"}), codeInvalidParams},
		{"zero start timeout", map[string]any{"name": "sb", "workspace": ws, "config": map[string]any{"image": "alpine"}, "startTimeoutMs": 0}, codeInvalidParams},
		{"no image", ensure(map[string]any{"image": ""}), codeInvalidConfig},
		{"missing workspace", map[string]any{"name": "sb", "workspace": filepath.Join(ws, "missing"), "config": map[string]any{"image": "alpine"}}, codeInvalidConfig},
		{"cpus 0", ensure(map[string]any{"cpus": 0}), codeInvalidConfig},
		{"memory 64", ensure(map[string]any{"memoryMiB": 64}), codeInvalidConfig},
		{"network", ensure(map[string]any{"network": "wide"}), codeInvalidConfig},
		{"pull", ensure(map[string]any{"pull": "sometimes"}), codeInvalidConfig},
		{"idle timeout", ensure(map[string]any{"idleTimeoutSec": -1}), codeInvalidConfig},
		{"relative mount", ensure(map[string]any{"mounts": []any{map[string]any{"host": "rel"}}}), codeInvalidConfig},
		{"mount shadows /proc", ensure(map[string]any{"mounts": []any{map[string]any{"host": other, "guest": "/proc"}}}), codeInvalidConfig},
		{"mount overlaps the workspace", ensure(map[string]any{"mounts": []any{map[string]any{"host": other, "guest": ws + "/x"}}}), codeInvalidConfig},
		{"env name with =", ensure(map[string]any{"env": map[string]any{"A=B": "c"}}), codeInvalidConfig},
		{"oci layout not the user's", ensure(map[string]any{"image": "oci:" + ws + "/img:latest"}), codeInvalidConfig},
		{"docker archive not the user's", ensure(map[string]any{"image": "docker-archive:/tmp/img.tar", "imageTrusted": false}), codeInvalidConfig},
		{"relative oci layout", ensure(map[string]any{"image": "oci:img:latest", "imageTrusted": true}), codeInvalidConfig},
		{"relative docker archive", ensure(map[string]any{"image": "docker-archive:./img.tar", "imageTrusted": true}), codeInvalidConfig},
		{"secret without hosts", ensure(map[string]any{"network": "public", "secrets": []any{map[string]any{"name": "K", "source": "env:HOME"}}}), codeInvalidConfig},
		{"secret with a relative file", ensure(map[string]any{"network": "public", "secrets": []any{map[string]any{"name": "K", "source": "file:tok", "hosts": []string{"a.example"}}}}), codeInvalidConfig},
		{"secret under tsi", ensure(map[string]any{"network": "tsi", "secrets": []any{map[string]any{"name": "K", "source": "env:HOME", "hosts": []string{"a.example"}}}}), codeInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, _ := json.Marshal(tt.params)
			req, err := parseEnsure(raw)
			re, ok := err.(*rpcError)
			if !ok || re.Code != tt.code {
				t.Fatalf("parseEnsure: %+v, %v; want error %d", req, err, tt.code)
			}
		})
	}
	for _, image := range []string{"oci:" + other + ":latest", "docker-archive:" + other + "/img.tar:x:1"} {
		raw, _ := json.Marshal(ensure(map[string]any{"image": image, "imageTrusted": true}))
		if _, err := parseEnsure(raw); err != nil {
			t.Errorf("the user's local image %s: %v", image, err)
		}
	}
	raw, _ := json.Marshal(ensure(map[string]any{"mounts": []any{map[string]any{"host": other + "/", "readOnly": true}}, "env": map[string]any{"B": "2", "A": "1"}, "idleTimeoutSec": 60, "pull": "never"}))
	req, err := parseEnsure(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := hostapi.Config{Name: "sb", Image: "alpine", PullPolicy: "never", CPUs: hostapi.DefaultCPUs, MemoryMiB: hostapi.DefaultMemoryMiB,
		Workspace: ws, Network: hostapi.NetworkPublic, Mounts: []hostapi.Mount{{HostPath: other, GuestPath: other, ReadOnly: true}},
		Env: []string{"A=1", "B=2"}, IdleTimeout: time.Minute}
	if got := req.Config; fmt.Sprint(got) != fmt.Sprint(want) || req.StartTimeout != session.DefaultStartTimeout {
		t.Errorf("config\n got %+v\nwant %+v", got, want)
	}
}

func TestServeSandboxLifecycle(t *testing.T) {
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	const name = "life"
	var st sandboxStatus
	c.call("sandbox.ensure", e.ensureParams(name, map[string]any{"env": map[string]string{"SB": "1"}}), &st)
	if st.State != stateReady || st.Name != name || st.Workspace != e.workspace || st.Hostname != name ||
		st.Created == nil || !*st.Created || st.BootMs == nil || st.ImageDigest == "" || st.ConfigChanged == nil || len(*st.ConfigChanged) != 0 {
		t.Fatalf("first ensure: %+v", st)
	}
	if m, _ := c.waitFor("a boot progress", time.Second, func(m serveMsg) bool { return m.Method == "sandbox.progress" }); !strings.Contains(string(m.Params), `"name":"life"`) {
		t.Errorf("progress %s", m.Params)
	}
	if got := c.sh(name, "hostname"); got != name {
		t.Errorf("the guest's hostname %q, want the sandbox name", got)
	}
	pid := runnerPid(t, name)

	var again sandboxStatus
	c.call("sandbox.ensure", e.ensureParams(name, map[string]any{"env": map[string]string{"SB": "1"}, "cpus": 1}), &again)
	if again.State != stateReady || *again.Created || !slices.Equal(*again.ConfigChanged, []string{"cpus"}) || again.BootMs != nil {
		t.Errorf("second ensure: %+v", again)
	}
	mismatch := c.callErr("sandbox.ensure", e.ensureParams(name, map[string]any{"network": "none", "image": e.image + "x"}), codeConfigMismatch)
	if d, _ := json.Marshal(mismatch.Data); !strings.Contains(string(d), `"keys":["image","network"]`) || !strings.Contains(string(d), `"state":"ready"`) {
		t.Errorf("config mismatch data %s", d)
	}
	if got := runnerPid(t, name); got != pid {
		t.Errorf("a refused ensure restarted the VM (runner %d, then %d)", pid, got)
	}

	// The VM's own files stay in it, and across a stop and start.
	c.call("fs.writeFile", map[string]any{"sandbox": name, "path": "/root/kept", "data": b64("vm")}, nil)
	if _, err := os.Stat("/root/kept"); err == nil {
		t.Fatal("/root/kept written in the sandbox appeared on the host")
	}
	c.call("sandbox.stop", map[string]any{"name": name}, &st)
	if st.State != stateStopped {
		t.Errorf("after stop: %+v", st)
	}
	if e := c.callErr("fs.stat", map[string]any{"sandbox": name, "path": "/root/kept"}, codeNotReady); !strings.Contains(e.Message, "stopped") {
		t.Errorf("not-ready message %q", e.Message)
	}
	c.callErr("exec.start", map[string]any{"sandbox": name, "execId": "x", "argv": []string{"true"}}, codeNotReady)
	c.call("sandbox.ensure", e.ensureParams(name, nil), &st)
	if st.State != stateReady || *st.Created {
		t.Errorf("ensure of a stopped sandbox: %+v", st)
	}
	var fi statResult
	c.call("fs.stat", map[string]any{"sandbox": name, "path": "/root/kept"}, &fi)
	if fi.Type != "file" || fi.Size != 2 {
		t.Errorf("/root/kept after stop and start: %+v", fi)
	}

	// Restart with recreate starts from the image, with the new config.
	c.call("sandbox.restart", map[string]any{"name": name, "workspace": e.workspace, "config": map[string]any{"image": e.image, "imageTrusted": true, "network": "none"}, "recreate": true}, &st)
	if st.State != stateReady || !*st.Created {
		t.Errorf("restart with recreate: %+v", st)
	}
	c.callErr("fs.stat", map[string]any{"sandbox": name, "path": "/root/kept"}, codeNotFound)
	h, _ := hostapi.NewHost()
	if sb, err := h.Get(name); err != nil || sb.Config().Network != hostapi.NetworkNone {
		t.Errorf("after recreate: %v, %+v", err, sb)
	}

	var logs logsResult
	c.call("sandbox.logs", map[string]any{"name": name, "maxBytes": 10}, &logs)
	if len(logs.Text) > 10 {
		t.Errorf("logs: %d bytes, want at most 10", len(logs.Text))
	}
	c.call("sandbox.stop", map[string]any{"name": name, "remove": true}, &st)
	if st.State != stateAbsent {
		t.Errorf("after stop with remove: %+v", st)
	}
	c.mu.Lock()
	for _, m := range c.msgs {
		if m.Method == "sandbox.state" {
			t.Errorf("sandbox.state for stops and restarts this connection asked for: %s", m.Params)
		}
	}
	c.mu.Unlock()
	c.call("sandbox.status", map[string]any{"name": name}, &st)
	if st.State != stateAbsent {
		t.Errorf("status after remove: %+v", st)
	}
	c.call("sandbox.logs", map[string]any{"name": name}, &logs)
	if logs != (logsResult{}) {
		t.Errorf("logs of an absent sandbox: %+v", logs)
	}
}

// runnerPid is the pid of a sandbox's VM runner.
// sandbox.status's timeoutMs bounds its ping of the guest agent: a frozen
// agent is reported unresponsive within the client's deadline.
func TestServeStatusTimeout(t *testing.T) {
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	const name = "frozen"
	c.call("sandbox.ensure", e.ensureParams(name, nil), nil)
	agent := proctree.DescendantNamed(runnerPid(t, name), "krunbox-agent")
	if agent == 0 {
		t.Fatal("no krunbox-agent below the runner")
	}
	if err := syscall.Kill(agent, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(agent, syscall.SIGCONT)
	poll.Until(t, "the agent's threads to stop", 10*time.Second, func() bool { return proctree.Stopped(agent) })
	start := time.Now()
	var st sandboxStatus
	c.call("sandbox.status", map[string]any{"name": name, "timeoutMs": 300}, &st)
	// Without timeoutMs the ping would take the default 2 s.
	if took := time.Since(start); st.State != stateUnresponsive || took > 1500*time.Millisecond {
		t.Errorf("status of a frozen agent with timeoutMs 300: %+v after %v; want unresponsive within about 300 ms", st, took)
	}
	c.callErr("sandbox.status", map[string]any{"name": name, "timeoutMs": -1}, codeInvalidParams)
}

func runnerPid(t *testing.T, name string) int {
	t.Helper()
	h, err := hostapi.NewHost()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := h.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sb.Status(t.Context())
	if err != nil || st.State != hostapi.StateRunning {
		t.Fatalf("status of %s: %+v, %v", name, st, err)
	}
	return st.Pid
}

func TestServeExec(t *testing.T) {
	t.Setenv("SERVE_SECRET", "from-the-server")
	const name = "ex"
	e, c := readySandbox(t, name, map[string]any{"env": map[string]string{"SB": "sb", "OVER": "sandbox"}})

	r := c.run(name, nil, "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if r.stdout != "out\n" || r.stderr != "err\n" || r.exit.ExitCode == nil || *r.exit.ExitCode != 3 || r.exit.Signal != nil || r.exit.TimedOut {
		t.Errorf("exit 3: %+v", r)
	}
	r = c.run(name, map[string]any{"env": map[string]string{"CALL": "c", "OVER": "call"}}, "/bin/sh", "-c", `echo "$SB $OVER $CALL ${SERVE_SECRET:-unset} $PWD"`)
	if want := "sb call c unset " + e.workspace + "\n"; r.stdout != want {
		t.Errorf("environment and default cwd: %q, want %q", r.stdout, want)
	}
	if got := c.run(name, map[string]any{"cwd": "/tmp"}, "pwd").stdout; got != "/tmp\n" {
		t.Errorf("cwd: %q", got)
	}
	if got := c.run(name, map[string]any{"stdin": b64("in\n")}, "/bin/sh", "-c", "cat; echo done").stdout; got != "in\ndone\n" {
		t.Errorf("stdin: %q", got)
	}
	if got := c.run(name, nil, "/bin/sh", "-c", "cat; echo eof").stdout; got != "eof\n" {
		t.Errorf("no stdin: %q", got)
	}

	// Could not start: exec-failed with the reason; no notification.
	if err := os.WriteFile(filepath.Join(e.workspace, "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		params map[string]any
		reason string
	}{
		{map[string]any{"argv": []string{"no-such-command"}}, "not-found"},
		{map[string]any{"argv": []string{filepath.Join(e.workspace, "noexec")}}, "permission"},
		{map[string]any{"argv": []string{"true"}, "cwd": "/no/such/dir"}, "cwd"},
	} {
		p := map[string]any{"sandbox": name, "execId": "fail-" + tt.reason}
		for k, v := range tt.params {
			p[k] = v
		}
		err := c.callErr("exec.start", p, codeExecFailed)
		if d, _ := json.Marshal(err.Data); string(d) != `{"reason":"`+tt.reason+`"}` {
			t.Errorf("%v: data %s, want reason %s", tt.params, d, tt.reason)
		}
	}
	for _, bad := range []map[string]any{
		{"sandbox": name, "execId": "", "argv": []string{"true"}},
		{"sandbox": name, "execId": strings.Repeat("x", 65), "argv": []string{"true"}},
		{"sandbox": name, "execId": "a", "argv": []string{}},
		{"sandbox": name, "execId": "a", "argv": []string{"true"}, "cwd": "rel"},
		{"sandbox": name, "execId": "a", "argv": []string{"true"}, "timeoutMs": 0},
		{"sandbox": name, "execId": "a", "argv": []string{"true"}, "stdin": "%%%"},
	} {
		c.callErr("exec.start", bad, codeInvalidParams)
	}
	c.mu.Lock()
	for _, m := range c.msgs {
		if strings.HasPrefix(string(m.Params), `{"execId":"fail-`) {
			t.Errorf("a notification for an exec that did not start: %s", m.Params)
		}
	}
	c.mu.Unlock()

	// Timeout.
	t0 := time.Now()
	r = c.run(name, map[string]any{"timeoutMs": 200}, "sleep", "30")
	if !r.exit.TimedOut || r.exit.Signal == nil || *r.exit.Signal != "SIGKILL" || r.exit.ExitCode != nil || time.Since(t0) > 10*time.Second {
		t.Errorf("timeout: %+v after %v", r.exit, time.Since(t0))
	}

	// Signals go to the group; a duplicate id is refused while it runs.
	c.call("exec.start", map[string]any{"sandbox": name, "execId": "trap", "argv": []string{"/bin/sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"}}, nil)
	poll.Until(t, "the trap", 10*time.Second, func() bool { return strings.Contains(c.output("trap", "stdout"), "ready") })
	c.callErr("exec.start", map[string]any{"sandbox": name, "execId": "trap", "argv": []string{"true"}}, codeInvalidParams)
	c.callErr("exec.signal", map[string]any{"execId": "trap", "signal": "SIGBOGUS"}, codeInvalidParams)
	var sent struct{ Delivered bool }
	c.call("exec.signal", map[string]any{"execId": "trap", "signal": "SIGTERM"}, &sent)
	exit, _ := c.exitOf("trap", 10*time.Second)
	if !sent.Delivered || exit.ExitCode == nil || *exit.ExitCode != 7 || !strings.Contains(c.output("trap", "stdout"), "got-term") {
		t.Errorf("SIGTERM to a trap: delivered %v, exit %+v", sent.Delivered, exit)
	}
	c.call("exec.signal", map[string]any{"execId": "trap", "signal": "SIGKILL"}, &sent)
	if sent.Delivered {
		t.Error("a signal to an exited exec was delivered")
	}
	// The id is free again once it exited.
	c.call("exec.start", map[string]any{"sandbox": name, "execId": "trap", "argv": []string{"true"}}, nil)
}

func TestServeExecOutputOrder(t *testing.T) {
	const name = "order"
	_, c := readySandbox(t, name, nil)
	// 2 MiB of stdout in lines, and a little stderr.
	script := "i=0; while [ $i -lt 32768 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; echo bye >&2"
	id := c.send("exec.start", map[string]any{"sandbox": name, "execId": "big", "argv": []string{"/bin/sh", "-c", script}})
	exit, iExit := c.exitOf("big", 60*time.Second)
	if exit.ExitCode == nil || *exit.ExitCode != 0 {
		t.Fatalf("exit %+v", exit)
	}
	c.mu.Lock()
	iResp := slices.IndexFunc(c.msgs, func(m serveMsg) bool { return string(m.ID) == id })
	var last int
	for i, m := range c.msgs {
		var o execOutput
		if m.Method == "exec.output" && json.Unmarshal(m.Params, &o) == nil && o.ExecID == "big" {
			if i < iResp {
				t.Errorf("output %d before the exec.start answer %d", i, iResp)
			}
			if len(o.Data) == 0 || len(o.Data) > outputChunk {
				t.Errorf("an output chunk of %d bytes", len(o.Data))
			}
			last = i
		}
	}
	c.mu.Unlock()
	if last > iExit {
		t.Errorf("output after exec.exit")
	}
	lines := strings.Split(strings.TrimSuffix(c.output("big", "stdout"), "\n"), "\n")
	if len(lines) != 32768 {
		t.Fatalf("%d lines, want 32768", len(lines))
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, fmt.Sprintf("line-%d-", i)) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
	if got := c.output("big", "stderr"); got != "bye\n" {
		t.Errorf("stderr %q", got)
	}
}

func TestServeFiles(t *testing.T) {
	const name = "files"
	e, c := readySandbox(t, name, map[string]any{"mounts": []any{map[string]any{"host": t.TempDir(), "guest": "/ro", "readOnly": true}}})
	ws := e.workspace
	p := filepath.Join(ws, "d1", "d2", "f.txt")
	fsCall := func(method string, params map[string]any, out any) {
		t.Helper()
		params["sandbox"] = name
		c.call(method, params, out)
	}
	fsErr := func(method string, params map[string]any, code int) {
		t.Helper()
		params["sandbox"] = name
		c.callErr(method, params, code)
	}

	fsErr("fs.writeFile", map[string]any{"path": p, "data": b64("x")}, codeNotFound)
	var size struct{ Size int }
	fsCall("fs.writeFile", map[string]any{"path": p, "data": b64("hello world"), "mkdirs": true, "mode": 0o600}, &size)
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello world" || size.Size != 11 {
		t.Fatalf("write seen on the host: %q, %v; size %d", b, err, size.Size)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode of a new file %v, want 0600", fi.Mode())
	}
	var rf readFileResult
	fsCall("fs.readFile", map[string]any{"path": p}, &rf)
	if string(rf.Data) != "hello world" || rf.Size != 11 || !rf.EOF {
		t.Errorf("read: %+v", rf)
	}
	fsCall("fs.readFile", map[string]any{"path": p, "offset": 6, "length": 3}, &rf)
	if string(rf.Data) != "wor" || rf.Size != 11 || rf.EOF {
		t.Errorf("read at 6, 3 bytes: %+v", rf)
	}
	fsCall("fs.readFile", map[string]any{"path": p, "offset": 6, "length": 0}, &rf)
	if len(rf.Data) != 0 || rf.Size != 11 || rf.EOF {
		t.Errorf("read of 0 bytes: %+v", rf)
	}
	fsCall("fs.readFile", map[string]any{"path": p, "offset": 20}, &rf)
	if len(rf.Data) != 0 || !rf.EOF {
		t.Errorf("read past the end: %+v", rf)
	}
	fsErr("fs.readFile", map[string]any{"path": p, "length": maxReadBytes + 1}, codeTooLarge)
	fsErr("fs.readFile", map[string]any{"path": p, "offset": -1}, codeInvalidParams)
	fsErr("fs.readFile", map[string]any{"path": "relative"}, codeInvalidParams)

	// An existing file keeps its mode; a link is followed, and stays.
	script := filepath.Join(ws, "run.sh")
	if err := os.WriteFile(script, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("run.sh", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	fsCall("fs.writeFile", map[string]any{"path": filepath.Join(ws, "link"), "data": b64("new")}, nil)
	if b, _ := os.ReadFile(script); string(b) != "new" {
		t.Errorf("write through a link: the target holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi, err)
	}
	var st statResult
	fsCall("fs.stat", map[string]any{"path": filepath.Join(ws, "link")}, &st)
	if st.Type != "file" || st.Mode != 0o755 || st.Size != 3 || st.MtimeMs < time.Now().Add(-time.Hour).UnixMilli() {
		t.Errorf("stat through the link: %+v", st)
	}
	fsCall("fs.stat", map[string]any{"path": filepath.Join(ws, "link"), "lstat": true}, &st)
	if st.Type != "symlink" {
		t.Errorf("lstat of the link: %+v", st)
	}

	// Directories.
	fsCall("fs.mkdirAll", map[string]any{"path": filepath.Join(ws, "a", "b")}, nil)
	fsCall("fs.mkdirAll", map[string]any{"path": filepath.Join(ws, "a", "b")}, nil)
	var dir struct{ Entries []dirEntry }
	fsCall("fs.readDir", map[string]any{"path": ws}, &dir)
	slices.SortFunc(dir.Entries, func(a, b dirEntry) int { return strings.Compare(a.Name, b.Name) })
	want := []dirEntry{{"a", "dir"}, {"d1", "dir"}, {"link", "symlink"}, {"run.sh", "file"}}
	if !slices.Equal(dir.Entries, want) {
		t.Errorf("readDir: %+v, want %+v", dir.Entries, want)
	}
	fsErr("fs.readFile", map[string]any{"path": filepath.Join(ws, "nope")}, codeNotFound)
	fsErr("fs.readFile", map[string]any{"path": ws}, codeIsDir)
	fsErr("fs.readDir", map[string]any{"path": script}, codeNotDir)
	fsErr("fs.mkdirAll", map[string]any{"path": filepath.Join(script, "sub")}, codeNotDir)
	fsErr("fs.writeFile", map[string]any{"path": ws, "data": ""}, codeIsDir)
	fsErr("fs.writeFile", map[string]any{"path": p, "data": "%%%"}, codeInvalidParams)
	fsErr("fs.writeFile", map[string]any{"path": p}, codeInvalidParams)
	fsErr("fs.writeFile", map[string]any{"path": p, "data": "", "mode": 0o1777}, codeInvalidParams)
	fsErr("fs.writeFile", map[string]any{"path": "/ro/x", "data": b64("x")}, codePermission)
	fsErr("fs.mkdirAll", map[string]any{"path": "/ro/sub"}, codePermission)
	fsErr("fs.writeFile", map[string]any{"path": ws, "data": strings.Repeat("A", base64.StdEncoding.EncodedLen(maxWriteBytes+3))}, codeTooLarge)
}

func TestServeEOFKillsCommandsKeepsSandbox(t *testing.T) {
	const name = "eof"
	e, c := readySandbox(t, name, nil)
	pidFile := filepath.Join(e.workspace, "pid")
	c.call("exec.start", map[string]any{"sandbox": name, "execId": "sleeper", "argv": []string{"/bin/sh", "-c", "echo $$ > " + pidFile + "; exec sleep 300"}}, nil)
	var pid string
	poll.Until(t, "the sleeper's pid", 10*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		return pid != ""
	})
	if code := c.closeAndWait(); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	c2 := startServe(t)
	c2.initialize()
	var st sandboxStatus
	c2.call("sandbox.status", map[string]any{"name": name}, &st)
	if st.State != stateReady {
		t.Fatalf("the sandbox after its server ended: %+v", st)
	}
	if got := c2.sh(name, "kill -0 "+pid+" 2>/dev/null && echo alive || echo dead"); got != "dead" {
		t.Errorf("the command of the ended server is %s", got)
	}
}

func TestServeStartFailure(t *testing.T) {
	e := newServeEnv(t)
	t.Setenv(krun.LibraryEnv, "/nonexistent/libkrun.so.1")
	c := startServe(t)
	c.initialize()
	err := c.callErr("sandbox.ensure", e.ensureParams("broken", nil), codeStartFailed)
	d, _ := json.Marshal(err.Data)
	var data struct {
		Hint   string
		Status sandboxStatus
	}
	json.Unmarshal(d, &data)
	if !strings.Contains(err.Message, "libkrun") || !strings.Contains(data.Hint, "KRUNBOX_LIBKRUN=/nonexistent/libkrun.so.1") || data.Status.State != stateFailed {
		t.Errorf("start failure: %q, data %s", err.Message, d)
	}
	var st sandboxStatus
	c.call("sandbox.status", map[string]any{"name": "broken"}, &st)
	if st.State != stateFailed || st.Reason != err.Message || st.Hint == "" {
		t.Errorf("status after a failed start: %+v", st)
	}
	c.callErr("fs.stat", map[string]any{"sandbox": "broken", "path": "/"}, codeNotReady)
	c.callErr("exec.start", map[string]any{"sandbox": "broken", "execId": "x", "argv": []string{"true"}}, codeNotReady)
}

func TestServeStateNotification(t *testing.T) {
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	// Stopped by its idle timeout...
	c.call("sandbox.ensure", e.ensureParams("idle", map[string]any{"idleTimeoutSec": 1}), nil)
	m, _ := c.waitFor("sandbox.state of the idle sandbox", 30*time.Second, func(m serveMsg) bool { return m.Method == "sandbox.state" })
	if !strings.Contains(string(m.Params), `"name":"idle"`) || !strings.Contains(string(m.Params), `"state":"stopped"`) {
		t.Errorf("idle timeout: %s", m.Params)
	}
	// ... or from elsewhere.
	c.call("sandbox.ensure", e.ensureParams("other", nil), nil)
	h, _ := hostapi.NewHost()
	sb, err := h.Get("other")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	m, _ = c.waitFor("sandbox.state of the stopped sandbox", 30*time.Second, func(m serveMsg) bool {
		return m.Method == "sandbox.state" && strings.Contains(string(m.Params), `"name":"other"`)
	})
	if !strings.Contains(string(m.Params), `"state":"stopped"`) {
		t.Errorf("stopped from elsewhere: %s", m.Params)
	}
}

func TestServeConcurrentEnsure(t *testing.T) {
	e := newServeEnv(t)
	a, b := startServe(t), startServe(t)
	a.initialize()
	b.initialize()
	ida := a.send("sandbox.ensure", e.ensureParams("both", nil))
	idb := b.send("sandbox.ensure", e.ensureParams("both", nil))
	var sa, sb sandboxStatus
	for _, x := range []struct {
		c  *serveConn
		id string
		st *sandboxStatus
	}{{a, ida, &sa}, {b, idb, &sb}} {
		m := x.c.response(x.id)
		if m.Error != nil {
			t.Fatalf("ensure: %v", m.Error)
		}
		json.Unmarshal(m.Result, x.st)
	}
	if sa.State != stateReady || sb.State != stateReady || *sa.Created == *sb.Created {
		t.Errorf("two ensures at once: %+v and %+v; want both ready, one created", sa, sb)
	}
	a.sh("both", "echo one > /tmp/one")
	if got := b.sh("both", "cat /tmp/one"); got != "one" {
		t.Errorf("the two servers reached two VMs: %q", got)
	}
}

func TestServeRestartKillsExecs(t *testing.T) {
	e, c := readySandbox(t, "rs", nil)
	c.call("exec.start", map[string]any{"sandbox": "rs", "execId": "long", "argv": []string{"sleep", "300"}}, nil)
	id := c.send("sandbox.restart", e.ensureParams("rs", nil))
	m := c.response(id)
	if m.Error != nil {
		t.Fatal(m.Error)
	}
	exit, iExit := c.exitOf("long", time.Second)
	c.mu.Lock()
	iResp := slices.IndexFunc(c.msgs, func(m serveMsg) bool { return string(m.ID) == id })
	c.mu.Unlock()
	if iExit > iResp || exit.Signal == nil || *exit.Signal != "SIGKILL" {
		t.Errorf("the exec's exit (%d: %+v) must come, killed, before the restart's answer (%d)", iExit, exit, iResp)
	}
}

// TestServeBinary runs the built krunbox (KRUNBOX_BIN, as "make test"
// sets, or one built here) as a client does.
func TestServeBinary(t *testing.T) {
	e := newServeEnv(t)
	bin := os.Getenv("KRUNBOX_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "krunbox")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("build krunbox: %v\n%s", err, out)
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "KRUNBOX_HOME=" + e.home, "KRUNBOX_AGENT=" + agenttest.Binary(), krun.LibraryEnv + "=" + os.Getenv(krun.LibraryEnv)}
	c := startServeProcess(t, bin, env)
	c.initialize()
	var st sandboxStatus
	c.call("sandbox.ensure", e.ensureParams("bin", nil), &st)
	if st.State != stateReady {
		t.Fatalf("ensure: %+v", st)
	}
	if got := c.sh("bin", "hostname; echo vm > /root/x; cat /root/x"); got != "bin\nvm" {
		t.Errorf("in the VM: %q", got)
	}
	c.write("not json")
	c.waitFor("the parse error", 10*time.Second, func(m serveMsg) bool { return m.Error != nil && m.Error.Code == codeParseError })
	c.call("sandbox.status", map[string]any{"name": "bin"}, &st)
	if st.State != stateReady {
		t.Errorf("status after a bad line: %+v", st)
	}
	if code := c.closeAndWait(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
}

// FuzzServeLine feeds arbitrary lines to an initialized server: each gets
// at most one answer, which is JSON-RPC, and nothing panics.
func FuzzServeLine(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"sandbox.status","params":{"name":"x"}}`,
		`{"jsonrpc":"2.0","id":"a","method":"fs.stat","params":{"sandbox":"x","path":"/"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"exec.start","params":{"sandbox":"x","execId":"e","argv":["true"],"env":{"A":"b"},"stdin":"aGk="}}`,
		`{"jsonrpc":"2.0","id":3,"method":"exec.signal","params":{"execId":"e","signal":"SIGKILL"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"sandbox.logs","params":{"name":"x","maxBytes":-1}}`,
		`{"jsonrpc":"2.0","id":5,"method":"fs.writeFile","params":{"sandbox":"x","path":"/a","data":"!!","mode":-1}}`,
		`{"jsonrpc":"2.0","id":6,"method":"sandbox.ensure","params":{"name":"x","workspace":"/nonexistent","config":{"image":"a","mounts":[{"host":""}]}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":1e400}}`,
		`{"jsonrpc":"2.0","id":1e3,"method":"x"}`, `[]`, `{}`, `null`, `"x"`, `{"id":null}`,
	} {
		f.Add([]byte(seed))
	}
	home := f.TempDir()
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || bytes.ContainsRune(line, '\n') {
			return
		}
		h, err := hostapi.NewHost(hostapi.WithDirs(hostapi.Dirs{State: home + "/state", Cache: home + "/cache", Config: home + "/config"}))
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		s := newServer(h, &out, slog.New(slog.DiscardHandler))
		s.initialized.Store(true)
		s.handle(t.Context(), line)
		s.shutdown(func() {})
		answers := strings.Split(strings.TrimSpace(out.String()), "\n")
		if out.Len() == 0 {
			return // a notification
		}
		if len(answers) != 1 {
			t.Fatalf("%q: %d answers: %q", line, len(answers), answers)
		}
		var m struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Result  json.RawMessage `json:"result"`
			Error   *rpcError       `json:"error"`
		}
		if err := json.Unmarshal([]byte(answers[0]), &m); err != nil || m.JSONRPC != "2.0" || m.ID == nil || (m.Result == nil) == (m.Error == nil) {
			t.Fatalf("%q: answer %q is not a JSON-RPC response", line, answers[0])
		}
		if m.Error != nil && m.Error.Code == codeInternal {
			t.Fatalf("%q: internal error %q", line, m.Error.Message)
		}
	})
}

func TestServePanicFailsOneRequest(t *testing.T) {
	h, err := hostapi.NewHost(hostapi.WithDirs(hostapi.Dirs{State: t.TempDir(), Cache: t.TempDir(), Config: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	s := newServer(h, &out, slog.New(slog.DiscardHandler))
	s.initialized.Store(true)
	s.methods["test.panic"] = func(context.Context, json.RawMessage) (any, func(), error) { panic("a bug") }
	s.handle(t.Context(), []byte(`{"jsonrpc":"2.0","id":1,"method":"test.panic"}`))
	s.handle(t.Context(), []byte(`{"jsonrpc":"2.0","id":2,"method":"sandbox.status","params":{"name":"x"}}`))
	want := `{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"test.panic: panic: a bug"}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"result":{"name":"x","state":"absent"}}` + "\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestServeNetwork(t *testing.T) {
	e := newServeEnv(t)
	c := startServe(t)
	c.initialize()
	const name = "netrules"
	var st sandboxStatus
	c.call("sandbox.ensure", e.ensureParams(name, map[string]any{"network": "allow=a.test"}), &st)
	var r struct {
		Network string `json:"network"`
	}
	c.call("sandbox.network", map[string]any{"name": name, "op": "allow", "rules": []string{"b.test:443"}}, &r)
	if r.Network != "allow=a.test,b.test:443" {
		t.Errorf("after allow: %q", r.Network)
	}
	c.call("sandbox.network", map[string]any{"name": name, "op": "deny", "rules": []string{"a.test"}}, &r)
	if r.Network != "allow=b.test:443" {
		t.Errorf("after deny: %q", r.Network)
	}
	h, _ := hostapi.NewHost()
	if sb, err := h.Get(name); err != nil || sb.Config().Network != "allow=b.test:443" {
		t.Errorf("the change is not recorded: %v, %+v", err, sb)
	}
	c.callErr("sandbox.network", map[string]any{"name": name, "op": "allow", "rules": []string{"bad rule"}}, codeInvalidConfig)
	c.callErr("sandbox.network", map[string]any{"name": name, "op": "open", "rules": []string{"a.test"}}, codeInvalidParams)
	c.callErr("sandbox.network", map[string]any{"name": name, "op": "allow"}, codeInvalidParams)
	c.callErr("sandbox.network", map[string]any{"name": "absent", "op": "allow", "rules": []string{"a.test"}}, codeNotFound)
	c.call("sandbox.stop", map[string]any{"name": name}, &st)
	c.callErr("sandbox.network", map[string]any{"name": name, "op": "allow", "rules": []string{"a.test"}}, codeNotReady)
}
