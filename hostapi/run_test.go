package hostapi

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestRunHelper: Run creates, starts, runs and removes, and leaves no
// sandbox behind whether the command ran, never started, was cancelled, or
// the sandbox could not be made.
func TestRunHelper(t *testing.T) {
	h, ref := testHost(t)
	ws := t.TempDir()
	tests := []struct {
		name  string
		image string
		cmd   Cmd
		opts  []RunOption
		// cancel cancels the context once the command writes to stdout.
		cancel bool
		check  func(t *testing.T, res *RunResult, err error)
	}{
		{
			name: "ran and failed", image: ref, cmd: Command("sh", "-c", "echo out; echo err >&2; exit 3"),
			check: func(t *testing.T, res *RunResult, err error) {
				if err != nil || res == nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
					t.Errorf("Run = %+v, %v; want exit 3 with its output and no error", res, err)
				}
			},
		},
		{
			name: "with a config", image: ref, cmd: Command("sh", "-c", "echo $GREETING > greeting; hostname"),
			opts: []RunOption{RunWithConfig(Config{Name: "named-run", Workspace: ws, Env: []string{"GREETING=hi"}})},
			check: func(t *testing.T, res *RunResult, err error) {
				if err != nil || string(res.Stdout) != "named-run\n" {
					t.Fatalf("Run = %+v, %v; want the sandbox's name as hostname", res, err)
				}
				if b, err := os.ReadFile(ws + "/greeting"); err != nil || string(b) != "hi\n" {
					t.Errorf("the workspace got %q, %v; want the configured env's value", b, err)
				}
			},
		},
		{
			name: "never started", image: ref, cmd: Command("no-such-program-krunbox"),
			check: func(t *testing.T, res *RunResult, err error) {
				var se *StartError
				if !errors.As(err, &se) || res != nil {
					t.Errorf("Run = %+v, %v; want a *StartError and no result", res, err)
				}
			},
		},
		{
			name: "cancelled", image: ref, cancel: true,
			cmd: Command("sh", "-c", "echo running; exec sleep 100"),
			check: func(t *testing.T, res *RunResult, err error) {
				if !errors.Is(err, context.Canceled) || res != nil {
					t.Errorf("Run = %+v, %v; want context.Canceled", res, err)
				}
			},
		},
		{
			name: "no such image", image: "oci:" + t.TempDir(), cmd: Command("true"),
			check: func(t *testing.T, res *RunResult, err error) {
				if err == nil || res != nil {
					t.Errorf("Run = %+v, %v; want an error", res, err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if tt.cancel {
				tt.cmd.Stdout = writerFunc(func(p []byte) (int, error) { cancel(); return len(p), nil })
			}
			res, err := Run(ctx, tt.image, tt.cmd, append([]RunOption{RunOnHost(h)}, tt.opts...)...)
			tt.check(t, res, err)
			if sbs, err := h.List(); err != nil || len(sbs) != 0 {
				t.Errorf("sandboxes left: %v, %v", sbs, err)
			}
			if entries, _ := os.ReadDir(h.Dirs().Sandboxes()); len(entries) != 0 {
				t.Errorf("sandbox directories left: %v", entries)
			}
		})
	}
}

// TestRunHelperChecksTheHostFirst: on a host that cannot run VMs, Run says
// so before it pulls or creates anything.
func TestRunHelperChecksTheHostFirst(t *testing.T) {
	h, ref := testHost(t, WithLibkrun("/nonexistent/libkrun.so.1"))
	_, err := Run(t.Context(), ref, Command("true"), RunOnHost(h))
	var h2 interface{ Hint() string }
	if !errors.As(err, &h2) || h2.Hint() == "" {
		t.Fatalf("Run on a host without libkrun: %v; want the preflight error with its hint", err)
	}
	if entries, _ := os.ReadDir(h.Dirs().Sandboxes()); len(entries) != 0 {
		t.Errorf("a sandbox was made on a host that cannot run VMs: %v", entries)
	}
	if imgs, err := h.images(); err == nil {
		if list, _ := imgs.List(t.Context()); len(list) != 0 {
			t.Errorf("images pulled on a host that cannot run VMs: %v", list)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
