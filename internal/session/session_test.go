package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/agenttest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
	"github.com/krunbox/krunbox/internal/testutil/testimage"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
	"github.com/krunbox/krunbox/krun"
)

func TestMain(m *testing.M) { os.Exit(agenttest.Main(m)) }

// testManager returns a session on a fresh krunbox home on the libkrun test
// double, and the request of a sandbox of a busybox image.
func testManager(t *testing.T) (*Manager, *EnsureRequest) {
	t.Helper()
	if err := vmm.CheckNamespaces(); err != nil {
		t.Skipf("the libkrun test double needs namespaces: %v", err)
	}
	t.Setenv(krun.LibraryEnv, testkrun.Library(t))
	t.Setenv("KRUNBOX_AGENT", agenttest.Binary())
	t.Setenv("KRUNBOX_HOME", t.TempDir())
	layout := testimage.WriteLayout(t, filepath.Join(t.TempDir(), "image"), "latest", testimage.Busybox(t))
	h, err := hostapi.NewHost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sbs, _ := h.List()
		for _, sb := range sbs {
			sb.Remove(context.Background())
		}
	})
	req, err := ParseEnsure(&EnsureParams{Name: "sess", Workspace: t.TempDir(), Config: &ConfigParams{Image: "oci:" + layout + ":latest", ImageTrusted: true}})
	if err != nil {
		t.Fatal(err)
	}
	return New(h, slog.New(slog.DiscardHandler), Options{ClientName: "test"}), req
}

// Close kills the commands the session started, in the VM, and returns.
func TestCloseKillsCommands(t *testing.T) {
	m, req := testManager(t)
	if _, err := m.Ensure(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(req.Config.Workspace, "pid")
	e, err := m.Start(t.Context(), "sess", "e1", hostapi.Cmd{Args: []string{"/bin/sh", "-c", "echo $$ > " + pidFile + "; exec sleep 100000"}})
	if err != nil {
		t.Fatal(err)
	}
	pumped := make(chan *Exit, 1)
	go m.Pump(e, func(string, []byte) {}, func(x *Exit) { pumped <- x })
	poll.Until(t, "the command's pid file", 30*time.Second, func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.HasSuffix(string(b), "\n")
	})
	b, _ := os.ReadFile(pidFile)
	alive := func() bool {
		sb, err := m.Host().Get("sess")
		if err != nil {
			t.Fatal(err)
		}
		c := sb.Client()
		defer c.Close()
		r, err := c.Run(t.Context(), hostapi.Cmd{Args: []string{"kill", "-0", strings.TrimSpace(string(b))}})
		if err != nil {
			t.Fatal(err)
		}
		return r.ExitCode == 0
	}
	if !alive() {
		t.Fatal("the command does not run")
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(ShutdownWait + 5*time.Second):
		t.Fatal("Close did not return")
	}
	if alive() {
		t.Error("the command outlived its session")
	}
	select {
	case x := <-pumped:
		t.Errorf("an end was reported after Close: %+v", x)
	default:
	}
	if _, err := m.Start(t.Context(), "sess", "e2", hostapi.Cmd{Args: []string{"true"}}); err == nil {
		t.Error("a closed session started a command")
	}
}

// A sandbox that cannot start is an error with a hint; nothing runs.
func TestEnsureFailsClosed(t *testing.T) {
	m, req := testManager(t)
	defer m.Close()
	req.Config.Image = "oci:" + filepath.Join(t.TempDir(), "none") + ":latest"
	_, err := m.Ensure(t.Context(), req)
	var se *Error
	if !errors.As(err, &se) || se.Code != CodeStartFailed || !strings.Contains(se.Message, "none") {
		t.Fatalf("Ensure of a missing image: %v, want a start-failed error", err)
	}
	if _, err := m.Start(t.Context(), "sess", "e1", hostapi.Cmd{Args: []string{"true"}}); !errors.As(err, &se) || se.Code != CodeNotReady {
		t.Errorf("Start in a sandbox that did not start: %v, want not-ready", err)
	}
}
