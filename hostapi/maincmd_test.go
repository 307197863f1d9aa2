package hostapi

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A main command outlives the connection that started it, then its exit
// shuts the agent down (which stops a VM); an ordinary one dies with its
// connection, and the agent serves on.
func TestMainCommandOutlivesItsConnection(t *testing.T) {
	for _, main := range []bool{true, false} {
		t.Run(map[bool]string{true: "main", false: "ordinary"}[main], func(t *testing.T) {
			c, a := newTestClient(t, nil)
			ctx := testContext(t)
			mark := filepath.Join(t.TempDir(), "mark")
			p, err := c.Start(ctx, Cmd{Args: []string{"sh", "-c", "echo $$; sleep 0.5; echo ended > " + mark}, Main: main})
			if err != nil {
				t.Fatal(err)
			}
			pid := readPid(t, p.Stdout())
			c.Close() // the connection ends: no cancel
			waitGone(t, pid)
			b, err := os.ReadFile(mark)
			if !main {
				if err == nil {
					t.Error("an ordinary command ran on after its connection ended")
				}
				if _, err := NewUnixClient(a.Socket).Ping(ctx); err != nil {
					t.Errorf("the agent stopped with an ordinary command: %v", err)
				}
				return
			}
			if err != nil || string(b) != "ended\n" {
				t.Errorf("the main command did not run to its end: %q, %v", b, err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if code, ok := a.Wait(waitCtx); !ok || code != 0 {
				t.Fatalf("agent exit %d (exited %v), want a shutdown with 0 once the main command ended", code, ok)
			}
		})
	}
}

// Detach starts a main command and returns at once; its end shuts the
// agent down.
func TestDetach(t *testing.T) {
	c, a := newTestClient(t, nil)
	ctx := testContext(t)
	mark := filepath.Join(t.TempDir(), "mark")
	pid, err := c.Detach(ctx, Command("sh", "-c", "echo to-the-console; sleep 0.3; echo ended > "+mark))
	if err != nil || pid <= 0 {
		t.Fatalf("Detach: %d, %v", pid, err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if code, ok := a.Wait(waitCtx); !ok || code != 0 {
		t.Fatalf("agent exit %d (exited %v), want a shutdown with 0 once the detached command ended", code, ok)
	}
	if b, err := os.ReadFile(mark); err != nil || string(b) != "ended\n" {
		t.Errorf("the detached command did not run to its end: %q, %v", b, err)
	}
	if _, err := c.Detach(ctx, Cmd{Args: []string{"cat"}, OpenStdin: true}); err == nil {
		t.Error("Detach took a command with stdin")
	}
}
