package hostapi

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

// clientCalls is every Client call that talks to the guest agent.
func clientCalls(t *testing.T) []struct {
	name string
	call func(context.Context, *Client) error
} {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	out, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return []struct {
		name string
		call func(context.Context, *Client) error
	}{
		{"Run", func(ctx context.Context, c *Client) error { _, err := c.Run(ctx, Command("true")); return err }},
		{"Output", func(ctx context.Context, c *Client) error { _, err := c.Output(ctx, "true"); return err }},
		{"Start", func(ctx context.Context, c *Client) error {
			p, err := c.Start(ctx, Cmd{Args: []string{"cat"}, Stdin: bytes.NewReader(nil)})
			if err == nil {
				p.Close()
			}
			return err
		}},
		{"Info", func(ctx context.Context, c *Client) error { _, err := c.Info(ctx); return err }},
		{"Ping", func(ctx context.Context, c *Client) error { _, err := c.Ping(ctx); return err }},
		{"Health", func(ctx context.Context, c *Client) error { _, err := c.Health(ctx); return err }},
		{"Shutdown", func(ctx context.Context, c *Client) error { return c.Shutdown(ctx, 0) }},
		{"ReadFile", func(ctx context.Context, c *Client) error { _, err := c.ReadFile(ctx, "/etc/hostname"); return err }},
		{"WriteFile", func(ctx context.Context, c *Client) error { return c.WriteFile(ctx, "/tmp/x", []byte("x"), 0o644) }},
		{"Open", func(ctx context.Context, c *Client) error {
			f, err := c.Open(ctx, "/etc/hostname")
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"OpenRange", func(ctx context.Context, c *Client) error {
			f, err := c.OpenRange(ctx, "/etc/hostname", 0, 1)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"Create", func(ctx context.Context, c *Client) error {
			w, err := c.Create(ctx, "/tmp/x", nil)
			if err == nil {
				w.Abort()
			}
			return err
		}},
		{"Stat", func(ctx context.Context, c *Client) error { _, err := c.Stat(ctx, "/"); return err }},
		{"Lstat", func(ctx context.Context, c *Client) error { _, err := c.Lstat(ctx, "/"); return err }},
		{"ReadDir", func(ctx context.Context, c *Client) error { _, err := c.ReadDir(ctx, "/"); return err }},
		{"Mkdir", func(ctx context.Context, c *Client) error { return c.Mkdir(ctx, "/tmp/d", 0o755) }},
		{"MkdirAll", func(ctx context.Context, c *Client) error { return c.MkdirAll(ctx, "/tmp/d/e", 0o755) }},
		{"Remove", func(ctx context.Context, c *Client) error { return c.Remove(ctx, "/tmp/x") }},
		{"RemoveAll", func(ctx context.Context, c *Client) error { return c.RemoveAll(ctx, "/tmp/d") }},
		{"Chmod", func(ctx context.Context, c *Client) error { return c.Chmod(ctx, "/tmp", 0o1777) }},
		{"Readlink", func(ctx context.Context, c *Client) error { _, err := c.Readlink(ctx, "/bin/sh"); return err }},
		{"Rename", func(ctx context.Context, c *Client) error { return c.Rename(ctx, "/tmp/x", "/tmp/y") }},
		{"Symlink", func(ctx context.Context, c *Client) error { return c.Symlink(ctx, "x", "/tmp/l") }},
		{"CopyIn", func(ctx context.Context, c *Client) error { return c.CopyIn(ctx, src, "/tmp/in") }},
		{"CopyOut", func(ctx context.Context, c *Client) error {
			return c.CopyOut(ctx, "/etc/hostname", filepath.Join(dst, "h"))
		}},
		{"CopyOutAt", func(ctx context.Context, c *Client) error { return c.CopyOutAt(ctx, "/etc/hostname", out, "h2") }},
	}
}

// TestCallsOnASandboxNotRunning: every call of a sandbox's Client, made
// when its VM does not run (never started; stopped, also through a client
// connected while it ran; killed; removed), fails with an error matching
// ErrNotRunning that says which state it is in, never with a bare dial
// error.
func TestCallsOnASandboxNotRunning(t *testing.T) {
	h, ref := testHost(t)
	ctx := t.Context()
	created, err := h.Create(ctx, Config{Name: "never", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { created.Remove(context.Background()) })
	stopped := started(t, h, Config{Name: "stopped", Image: ref})
	// A client made while it ran, with a live connection: it dials again.
	stoppedLive := stopped.Client()
	defer stoppedLive.Close()
	if _, err := stoppedLive.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	dead := started(t, h, Config{Name: "dead", Image: ref})
	if err := vmm.Open(dead.Dir()).Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := dead.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	removed, err := h.Create(ctx, Config{Name: "removed", Image: ref})
	if err != nil {
		t.Fatal(err)
	}
	if err := removed.Remove(ctx); err != nil {
		t.Fatal(err)
	}

	sandboxes := []struct {
		name   string
		client *Client
		state  State
		want   string
	}{
		{"created", created.Client(), StateCreated, "sandbox never is not running: it was never started"},
		{"stopped", stopped.Client(), StateStopped, "sandbox stopped is not running: it was stopped"},
		{"stopped, client made while it ran", stoppedLive, StateStopped, "sandbox stopped is not running: it was stopped"},
		{"dead", dead.Client(), StateDead, "sandbox dead stopped (runner killed by SIGKILL)"},
		{"removed", removed.Client(), "", "sandbox removed: no such sandbox"},
	}
	for _, sb := range sandboxes {
		defer sb.client.Close()
		for _, tt := range clientCalls(t) {
			t.Run(sb.name+"/"+tt.name, func(t *testing.T) {
				err := tt.call(ctx, sb.client)
				if !errors.Is(err, ErrNotRunning) {
					t.Fatalf("err = %v, want one matching ErrNotRunning", err)
				}
				if !strings.Contains(err.Error(), sb.want) || strings.Contains(err.Error(), "dial unix") {
					t.Errorf("err = %q, want it to say %q, without the dial error", err, sb.want)
				}
				var nr *NotRunningError
				var de *DeadError
				switch sb.state {
				case "":
					if !errors.Is(err, ErrNotFound) {
						t.Errorf("err = %v, want one matching ErrNotFound too", err)
					}
				case StateDead:
					if !errors.As(err, &de) || de.Exit == nil || de.Exit.Signal != "SIGKILL" {
						t.Errorf("err = %v, want a *DeadError saying SIGKILL", err)
					}
				default:
					if !errors.As(err, &nr) || nr.State != sb.state {
						t.Errorf("err = %v, want a *NotRunningError in state %s", err, sb.state)
					}
				}
			})
		}
	}
}
