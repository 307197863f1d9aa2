package hostapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/victim"
)

// TestStartRechecksShares: the guest writes the workspace, so between a
// stop and the next start it can replace a shared directory there, or a
// directory on the way to one, with a symlink to any host directory, or
// rewrite the .git file. Every start checks the shares again, as Create
// did: such a start is refused, says which share and what to do, leaves
// the sandbox stopped, and the directory the link leads to is never
// shared nor changed.
func TestStartRechecksShares(t *testing.T) {
	h, ref := testHost(t)
	v := victim.New(t)
	state := h.Dirs().State
	tests := []struct {
		name   string
		tamper string // run by the guest in the workspace W before it stops
		want   string // in the error
	}{
		{"a share replaced by a symlink to a victim", "rm -r data && ln -s VICTIM data", "it is now a symlink"},
		{"a share replaced by a symlink to krunbox's state", "rm -r data && ln -s STATE data", "it is now a symlink"},
		{"a directory on the way replaced by a symlink", "rm -r a && ln -s VICTIM a", "a directory on its way is now a symlink"},
		{"a share replaced by a file", "rm -r data && echo x > data", "no longer a directory"},
		{"a share removed", "rm -r data", "no longer exists"},
		{"the .git file naming a victim", "echo gitdir: VICTIM > .git", "not sharing it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, _ := filepath.EvalSymlinks(t.TempDir())
			mkdir(t, filepath.Join(ws, "data"))
			mkdir(t, filepath.Join(ws, "a", "b"))
			sb, err := h.Create(t.Context(), Config{Image: ref, Workspace: ws, Mounts: []Mount{
				{HostPath: filepath.Join(ws, "data"), GuestPath: "/data", ReadOnly: true},
				{HostPath: filepath.Join(ws, "a", "b"), GuestPath: "/b"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sb.Remove(context.Background()) })
			if err := sb.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			script := strings.NewReplacer("VICTIM", v.Path, "STATE", state).Replace(tt.tamper)
			run(t, sb, "sh", "-c", "cd "+ws+" && "+script)
			// A .git that appeared is a git change too, reported at
			// stop: accepted here, to reach the start's own check.
			err = sb.Stop(t.Context())
			if changed := (*GitChangedError)(nil); errors.As(err, &changed) {
				err = sb.AcceptGitChanges()
			}
			if err != nil {
				t.Fatal(err)
			}

			err = sb.Start(t.Context())
			var hint interface{ Hint() string }
			if !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.want) || !errors.As(err, &hint) || !strings.Contains(hint.Hint(), "krunbox rm "+sb.Name()) {
				t.Fatalf("start after the guest ran %q: %v; want a refusal saying %q, with a hint to recreate the sandbox", script, err, tt.want)
			}
			if st, err := sb.Status(t.Context()); err != nil || st.State != StateStopped {
				t.Errorf("status after the refused start: %+v, %v; want stopped", st, err)
			}
			v.Check(t, "after the refused start")
		})
	}
}

// TestStartFollowsTheUsersOwnSymlinks: the workspace the user names may
// hold symlinks on the way (/home -> /var/home): they are resolved at
// create, and every start opens the resolved path.
func TestStartFollowsTheUsersOwnSymlinks(t *testing.T) {
	h, ref := testHost(t)
	base, _ := filepath.EvalSymlinks(t.TempDir())
	ws := mkdir(t, filepath.Join(base, "var", "home", "proj"))
	if err := os.Symlink(filepath.Join(base, "var", "home"), filepath.Join(base, "home")); err != nil {
		t.Fatal(err)
	}
	named := filepath.Join(base, "home", "proj")
	sb := started(t, h, Config{Image: ref, Workspace: named})
	if got := sb.Mounts()[0].HostPath; got != ws {
		t.Errorf("recorded workspace %s, want the resolved %s", got, ws)
	}
	run(t, sb, "sh", "-c", "echo hi > "+named+"/f")
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatalf("second start: %v", err)
	}
	if got := run(t, sb, "cat", named+"/f"); got != "hi" {
		t.Errorf("the workspace after a restart holds %q", got)
	}
}
