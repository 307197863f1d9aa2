// Package agenttest builds the real guest agent and runs it as an ordinary
// host process serving a unix socket, for tests that drive it.
package agenttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

var binary string

// PrebuiltEnv names a prebuilt agent binary that Main uses instead of
// building one, for test binaries run where Go is not installed (the
// nested real VMs of hack/realvm).
const PrebuiltEnv = "KRUNBOX_TEST_AGENT"

// Main builds the agent (CGO_ENABLED=0, as shipped; with the race detector
// when KRUNBOX_AGENT_RACE=1), or takes PrebuiltEnv's, runs the tests and
// removes the build. Call it from TestMain.
func Main(m *testing.M) int {
	if p := os.Getenv(PrebuiltEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err == nil {
			_, err = os.Stat(abs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", PrebuiltEnv, err)
			return 1
		}
		binary = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "krunbox-agenttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	// Reachable by other users, for agents run WithCredential.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binary = filepath.Join(dir, "krunbox-agent")
	cmd := exec.Command("go", "build", "-o", binary, "github.com/krunbox/krunbox/cmd/krunbox-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if os.Getenv("KRUNBOX_AGENT_RACE") == "1" {
		// The race detector needs cgo: for checking the agent, not shipping it.
		cmd.Args = append(cmd.Args[:2], append([]string{"-race"}, cmd.Args[2:]...)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the agent: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// Binary is the path of the agent built by Main.
func Binary() string { return binary }

// Agent is a running agent process.
type Agent struct {
	// Socket is the unix socket it serves.
	Socket string
	// Dir holds the socket, config and log.
	Dir string
	Cmd *exec.Cmd
	// Log is the file its stderr goes to.
	Log string

	exited chan struct{}
}

// Pid is the agent's process id.
func (a *Agent) Pid() int { return a.Cmd.Process.Pid }

// Option changes how Start runs the agent.
type Option func(*options)

type options struct {
	env        []string
	wrapper    []string
	configJSON []byte
	cred       *syscall.Credential
}

// WithEnv adds KEY=VALUE entries to the agent's environment.
func WithEnv(kv ...string) Option { return func(o *options) { o.env = append(o.env, kv...) } }

// WithConfigJSON writes data as the config file instead of the cfg given
// to Start: for configs a Config cannot express, such as broken ones.
func WithConfigJSON(data []byte) Option { return func(o *options) { o.configJSON = data } }

// WithWrapper runs the agent under a command, such as
// "unshare", "-m", "-u", "--".
func WithWrapper(argv ...string) Option { return func(o *options) { o.wrapper = argv } }

// WithCredential runs the agent as the user uid and group gid, with no
// supplementary groups (which needs root); its directory is given to that
// user.
func WithCredential(uid, gid uint32) Option {
	return func(o *options) { o.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}} }
}

// Start runs the agent with cfg (nil: an empty config) on a socket in a
// new temporary directory, waits until it accepts connections, and stops
// it when the test ends.
func Start(t testing.TB, cfg *protocol.Config, opts ...Option) *Agent {
	t.Helper()
	if binary == "" {
		t.Fatal("agenttest.Main was not called from TestMain")
	}
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "kba")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if cfg == nil {
		cfg = &protocol.Config{}
	}
	cfgPath := filepath.Join(dir, "agent.json")
	data := o.configJSON
	if data == nil {
		data, _ = json.Marshal(cfg)
	}
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	a := &Agent{Socket: filepath.Join(dir, "a.sock"), Dir: dir, Log: filepath.Join(dir, "agent.log")}
	logf, err := os.Create(a.Log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	argv := append(append([]string(nil), o.wrapper...), binary, "--config", cfgPath, "--listen", "unix:"+a.Socket, "--debug")
	a.Cmd = exec.Command(argv[0], argv[1:]...)
	a.Cmd.Stdout, a.Cmd.Stderr = logf, logf
	a.Cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, o.env...)
	a.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: o.cred}
	if o.cred != nil {
		if err := os.Chown(dir, int(o.cred.Uid), int(o.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	a.exited = exited
	go func() { a.Cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		a.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			a.Cmd.Process.Kill()
			<-exited
		}
		b, _ := os.ReadFile(a.Log)
		if strings.Contains(string(b), "DATA RACE") || strings.Contains(string(b), "panic:") {
			t.Errorf("the agent raced or panicked")
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", b)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("unix", a.Socket)
		if err == nil {
			c.Close()
			return a
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(a.Log)
			t.Fatalf("agent exited before listening: %s", strings.TrimSpace(string(b)))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not listening after 10s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Wait waits for the agent process to exit and returns its exit code, or
// false when ctx ends first.
func (a *Agent) Wait(ctx context.Context) (int, bool) {
	select {
	case <-a.exited:
		return a.Cmd.ProcessState.ExitCode(), true
	case <-ctx.Done():
		return -1, false
	}
}

// Hello opens a raw connection to the agent, says hello with the version
// range min..max, and returns the connection and the agent's reply.
func (a *Agent) Hello(t testing.TB, min, max int) (net.Conn, *protocol.HelloReply) {
	t.Helper()
	nc, err := net.Dial("unix", a.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	hello := protocol.Encode(&protocol.Hello{MinVersion: min, MaxVersion: max})
	if _, err := nc.Write(protocol.AppendFrame(nil, protocol.Header{Type: protocol.TypeHello}, hello)); err != nil {
		t.Fatal(err)
	}
	f, err := protocol.ReadFrame(nc)
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.HelloReply
	if f.Type != protocol.TypeHelloReply {
		t.Fatalf("answer to hello: %s", f.Type)
	}
	if err := protocol.Decode(f.Body, &r); err != nil {
		t.Fatal(err)
	}
	return nc, &r
}
