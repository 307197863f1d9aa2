package hostapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
)

// newTestClient starts an agent with cfg and returns a client of it.
func newTestClient(t testing.TB, cfg *protocol.Config, opts ...agenttest.Option) (*Client, *agenttest.Agent) {
	t.Helper()
	a := agenttest.Start(t, cfg, opts...)
	c := NewUnixClient(a.Socket)
	t.Cleanup(func() { c.Close() })
	return c, a
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestInfoAndHealth(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != protocol.Version || info.Arch != runtime.GOARCH || info.AgentVersion == "" {
		t.Errorf("hello = %+v", info)
	}
	if info.Boot.AgentStart <= 0 || info.Boot.Ready < info.Boot.AgentStart {
		t.Errorf("boot timings %+v: want 0 < agent start <= ready", info.Boot)
	}
	rtt, err := c.Ping(ctx)
	if err != nil || rtt <= 0 {
		t.Fatalf("Ping = %v, %v", rtt, err)
	}
	h, err := c.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Uptime < info.Boot.Ready || h.Memory.Total == 0 || h.Memory.Available == 0 ||
		h.Memory.Available > h.Memory.Total || h.Disk.Total == 0 || h.Disk.Path != "/" || h.AgentVersion != info.AgentVersion {
		t.Errorf("health = %+v", h)
	}
}

func TestMalformedInputClosesOnlyThatConnection(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	// A process on a good connection, to check it survives.
	p, err := c.Start(ctx, Cmd{Args: []string{"cat"}, OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	hello := protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHello},
		protocol.Encode(&protocol.Hello{MinVersion: 1, MaxVersion: 1}))
	frame := func(stream uint32, typ protocol.Type, body string) []byte {
		return protocol.AppendFrame(nil, protocol.Header{Stream: stream, Type: typ}, []byte(body))
	}
	huge := make([]byte, protocol.HeaderSize)
	protocol.Header{Stream: 1, Type: protocol.TypePing}.Put(huge)
	binary.BigEndian.PutUint32(huge, 0xFFFFFFFF)
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name      string
		input     []byte
		wantError bool // an Error frame on stream 0 before the close
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true},
		{"truncated header", hello[:5], false},
		{"truncated body", hello[:len(hello)-3], false},
		{"huge length before hello", huge, true},
		{"huge length after hello", cat(hello, huge), true},
		{"unknown type", cat(hello, frame(1, 200, "{}")), true},
		{"request on stream 0", cat(hello, frame(0, protocol.TypePing, "")), true},
		{"malformed request JSON", cat(hello, frame(1, protocol.TypeStat, "{not json")), true},
		{"wrong JSON type", cat(hello, frame(1, protocol.TypeExec, `{"argv": "sh"}`)), true},
		{"data for a stream never opened", cat(hello, frame(9, protocol.TypeData, "x")), true},
		{"reused stream id", cat(hello, frame(1, protocol.TypePing, ""), frame(1, protocol.TypePing, "")), true},
		{"reply sent by the host", cat(hello, frame(1, protocol.TypePing, ""), frame(1, protocol.TypeReply, "")), true},
		{"credit with a bad body", cat(hello, frame(1, protocol.TypeExec, `{"argv":["sleep","5"]}`), frame(1, protocol.TypeCredit, "xx")), true},
		{"stdin over the window", cat(hello, frame(1, protocol.TypeExec, `{"argv":["sleep","5"],"stdin":true}`),
			protocol.AppendFrame(nil, protocol.Header{Stream: 1, Type: protocol.TypeData}, make([]byte, protocol.DefaultWindow)),
			protocol.AppendFrame(nil, protocol.Header{Stream: 1, Type: protocol.TypeData}, []byte("1 byte too many"))), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nc, err := net.Dial("unix", a.Socket)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			if _, err := nc.Write(tt.input); err != nil {
				t.Fatal(err)
			}
			if !tt.wantError {
				nc.(*net.UnixConn).CloseWrite()
			}
			// The agent answers what was valid, then closes.
			var sawError bool
			for {
				f, err := protocol.ReadFrame(nc)
				if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
					break
				}
				if err != nil {
					t.Fatalf("reading until the close: %v", err)
				}
				if f.Stream == 0 && f.Type == protocol.TypeError {
					sawError = true
				}
			}
			if sawError != tt.wantError {
				t.Errorf("error frame before the close: %v, want %v", sawError, tt.wantError)
			}
		})
	}
	// The agent still serves, and the process on the good connection lives.
	if _, err := io.WriteString(p.Stdin(), "still here\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("still here\n"))
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil || string(buf) != "still here\n" {
		t.Fatalf("process on the good connection: %q, %v", buf, err)
	}
	c2 := NewUnixClient(a.Socket)
	defer c2.Close()
	if out, err := c2.Output(ctx, "echo", "ok"); err != nil || string(out) != "ok\n" {
		t.Fatalf("new connection after bad ones: %q, %v", out, err)
	}
}

func TestInvalidRequestFailsOnlyThatRequest(t *testing.T) {
	c, _ := newTestClient(t, nil)
	ctx := testContext(t)
	_, err := c.Start(ctx, Cmd{Args: []string{"true"}, Env: []string{"NOEQUALS"}})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Start with a bad env entry = %v, want EINVAL", err)
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("the connection broke: %v", err)
	}
}

// fakeAgent serves one hello reply on a unix socket.
func fakeAgent(t *testing.T, reply protocol.HelloReply) string {
	sock := filepath.Join(t.TempDir(), "fake.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			protocol.ReadFrame(nc)
			nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHelloReply}, protocol.Encode(&reply)))
			nc.Close()
		}
	}()
	return sock
}

func TestVersionMismatchNamesBothVersions(t *testing.T) {
	sock := fakeAgent(t, protocol.HelloReply{Version: 0, MinVersion: 7, MaxVersion: 9, AgentVersion: "v9.9"})
	c := NewUnixClient(sock)
	defer c.Close()
	_, err := c.Ping(testContext(t))
	var ve *VersionError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v, want *VersionError", err)
	}
	msg := err.Error()
	for _, want := range []string{"7 to 9", fmt.Sprintf("%d to %d", protocol.MinVersion, protocol.Version), "v9.9"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	// An agent choosing a version this client never offered is refused too.
	sock = fakeAgent(t, protocol.HelloReply{Version: 5, MinVersion: 5, MaxVersion: 5})
	c2 := NewUnixClient(sock)
	defer c2.Close()
	if _, err := c2.Ping(testContext(t)); !errors.As(err, &ve) {
		t.Fatalf("err = %v, want *VersionError", err)
	}
}

func TestAgentNewerVersionNegotiatesDown(t *testing.T) {
	// A host speaking 1..9 to this agent gets the agent's newest version.
	_, a := newTestClient(t, nil)
	if _, r := a.Hello(t, 1, 9); r.Version != protocol.Version {
		t.Fatalf("reply %+v; want version %d", r, protocol.Version)
	}
	// And a host that only speaks newer ones gets version 0 and a close.
	nc, r := a.Hello(t, protocol.Version+1, 9)
	if r.Version != 0 || r.MinVersion != 1 || r.MaxVersion != protocol.Version {
		t.Fatalf("reply %+v, want version 0 and the agent's range", r)
	}
	if _, err := protocol.ReadFrame(nc); err != io.EOF {
		t.Fatalf("after a failed negotiation: %v, want EOF", err)
	}
}

func TestDialLongSocketPath(t *testing.T) {
	_, a := newTestClient(t, nil)
	long := t.TempDir()
	for len(long) < 200 {
		long = filepath.Join(long, "a-rather-long-directory-name")
	}
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(long, "agent.sock")
	if err := os.Rename(a.Socket, sock); err != nil {
		t.Fatal(err)
	}
	c := NewUnixClient(sock)
	defer c.Close()
	if _, err := c.Ping(testContext(t)); err != nil {
		t.Fatalf("ping over a %d-byte socket path: %v", len(sock), err)
	}
}

func TestConnectErrors(t *testing.T) {
	c := NewUnixClient(filepath.Join(t.TempDir(), "none.sock"))
	if _, err := c.Ping(testContext(t)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ping of a missing socket: %v, want ErrNotExist", err)
	}
	c.Close()
	if _, err := c.Ping(testContext(t)); !errors.Is(err, ErrClientClosed) {
		t.Fatalf("ping after Close: %v", err)
	}
}

func TestReconnectsAfterAgentRestart(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	a.Cmd.Process.Signal(syscall.SIGTERM)
	a.Wait(ctx)
	if _, err := c.Ping(ctx); err == nil {
		t.Fatal("ping of a stopped agent succeeded")
	}
	a2 := agenttest.Start(t, nil)
	os.Rename(a2.Socket, a.Socket)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the agent came back: %v", err)
	}
}

func TestShutdownTerminatesProcessesAndExits(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	// One process ignores SIGTERM and must be killed after the grace.
	p, err := c.Start(ctx, Command("sh", "-c", "trap '' TERM; echo $$; while :; do sleep 1; done"))
	if err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, p.Stdout())
	start := time.Now()
	if err := c.Shutdown(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("Shutdown returned after %v, before the grace period ended", d)
	}
	waitGone(t, pid)
	if code, ok := a.Wait(ctx); !ok || code != 0 {
		t.Fatalf("agent exit %d (exited %v), want 0", code, ok)
	}
}

// A process that outlives the idle timeout keeps the agent up; once it has
// ended, the agent shuts itself down.
func TestIdleTimeoutWaitsForProcesses(t *testing.T) {
	c, a := newTestClient(t, &protocol.Config{IdleTimeout: 500 * time.Millisecond})
	ctx := testContext(t)
	if _, err := c.Run(ctx, Command("sleep", "1")); err != nil {
		t.Fatalf("exec longer than the idle timeout: %v", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if code, ok := a.Wait(waitCtx); !ok || code != 0 {
		t.Fatalf("agent exit %d (exited %v), want an idle shutdown with 0", code, ok)
	}
}

// An agent told to wait for a main command (Config.MainWait, krunbox
// run's start) shuts down when none has started in time, and lets one
// that did start run to its end; an ordinary exec is not one.
func TestMainWait(t *testing.T) {
	// Long enough for the main command to start first on a loaded machine.
	const wait = 2 * time.Second
	tests := []struct {
		name string
		main bool // run a main command, longer than wait, first
	}{
		{"no main command", false},
		{"a main command", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, a := newTestClient(t, &protocol.Config{MainWait: wait})
			ctx := testContext(t)
			start := time.Now()
			if tt.main {
				cmd := Command("sh", "-c", "sleep 3; echo done")
				cmd.Main = true
				res, err := c.Run(ctx, cmd)
				if err != nil || res.ExitCode != 0 || string(res.Stdout) != "done\n" {
					t.Fatalf("main command: %+v, %v; want it to run to its end past the wait", res, err)
				}
				c.Close() // the agent shuts down once its host has the exit status
			} else if _, err := c.Run(ctx, Command("true")); err != nil {
				t.Fatalf("exec: %v", err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if code, ok := a.Wait(waitCtx); !ok || code != 0 {
				t.Fatalf("agent exit %d (exited %v), want a shutdown with 0", code, ok)
			}
			if d := time.Since(start); d < wait {
				t.Errorf("the agent shut down after %v, before the wait of %v", d, wait)
			}
		})
	}
}

// Exec and file calls are activity for the idle timeout, pings and health
// checks are not: an agent called only with those shuts down on time, one
// kept busy with the others stays up past its timeout and shuts down once
// the calls stop.
func TestIdleTimeout(t *testing.T) {
	const idle = 500 * time.Millisecond
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		call   func(context.Context, *Client) error
		active bool
	}{
		{"ping", func(ctx context.Context, c *Client) error { _, err := c.Ping(ctx); return err }, false},
		{"health", func(ctx context.Context, c *Client) error { _, err := c.Health(ctx); return err }, false},
		{"exec", func(ctx context.Context, c *Client) error { _, err := c.Run(ctx, Command("true")); return err }, true},
		{"stat", func(ctx context.Context, c *Client) error { _, err := c.Stat(ctx, file); return err }, true},
		{"read file", func(ctx context.Context, c *Client) error { _, err := c.ReadFile(ctx, file); return err }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, a := newTestClient(t, &protocol.Config{IdleTimeout: idle})
			ctx := testContext(t)
			start := time.Now()
			// keepCalling calls every 20 ms, for at most d or until the
			// agent exits, and reports whether it did.
			keepCalling := func(d time.Duration) bool {
				for time.Since(start) < d {
					if err := tt.call(ctx, c); err != nil && tt.active {
						t.Fatalf("%s call %v after the start: %v", tt.name, time.Since(start).Round(time.Millisecond), err)
					}
					pause, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
					_, exited := a.Wait(pause)
					cancel()
					if exited {
						return true
					}
				}
				return false
			}
			if tt.active {
				if keepCalling(3 * idle) {
					t.Fatalf("the agent shut down within %v although it had %s calls every 20 ms (idle timeout %v)", time.Since(start).Round(time.Millisecond), tt.name, idle)
				}
			} else if !keepCalling(20 * time.Second) {
				t.Fatalf("the agent still runs 20 s after the start, with only %s calls (idle timeout %v)", tt.name, idle)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if code, ok := a.Wait(waitCtx); !ok || code != 0 {
				t.Fatalf("agent exit %d (exited %v), want an idle shutdown with 0", code, ok)
			}
		})
	}
}
