package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/hostchange"
	"github.com/krunbox/krunbox/internal/testutil/testkrun"
)

// testLiveWorkspace: each host change to the workspace and to a -v mount
// is seen by the guest's first access after it, however the guest had
// cached what it touched; and when the user saves a file on the host (an
// editor's atomic save) and the agent edits it in the guest right after, as
// agents' edit tools do (read, change, write back), both changes are kept.
// One sandbox for all: a VM start costs most of a real-VM test.
func testLiveWorkspace(t *testing.T, e *env) {
	e.needCoherent()
	ws, mnt := realDir(t), realDir(t)
	e.started("live", "--workspace", ws, "-v", mnt+":/data")
	for _, share := range []struct{ name, host, guest string }{{"workspace", ws, ws}, {"mount", mnt, "/data"}} {
		for _, c := range hostchange.All {
			t.Run(share.name+"/"+c.Name, func(t *testing.T) {
				must(t, c.Before(share.host))
				e.ok("exec", "live", "sh", "-c", "cd "+share.guest+" && { "+c.Prime+"; } >/dev/null 2>&1; true")
				must(t, c.Apply(share.host))
				if got := e.ok("exec", "live", "sh", "-c", "cd "+share.guest+" && "+c.Check); got != c.Want {
					t.Errorf("the guest's first read after it gave %q, want %q", got, c.Want)
				}
			})
		}
	}
	t.Run("NoLostEdit", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(ws, "cfg.txt"), []byte("color = red\n"), 0o644))
		if got := e.ok("exec", "live", "cat", "cfg.txt"); got != "color = red\n" {
			t.Fatalf("cfg.txt in the guest: %q", got)
		}
		must(t, hostchange.Save(ws, "cfg.txt", "color = red\nsize = 10\n"))
		e.ok("exec", "live", "sed", "-i", "s/red/blue/", "cfg.txt")
		b, err := os.ReadFile(filepath.Join(ws, "cfg.txt"))
		must(t, err)
		if want := "color = blue\nsize = 10\n"; string(b) != want {
			t.Errorf("cfg.txt on the host after the host's save and the guest's edit: %q, want both changes %q", b, want)
		}
	})
}

// realDir is a new temporary directory, symlinks resolved (a workspace is
// shared at its real path).
func realDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testStaleWorkspaceSaid: with a libkrun that cannot make shares coherent
// (an upstream one: the double built as one), a sandbox still starts; start
// warns that the workspace may be stale, once, and inspect says it, running
// or not; a sandbox whose only mount is :cached is not warned about.
func testStaleWorkspaceSaid(t *testing.T, e *env) {
	if e.suite.mode != double {
		t.Skip("needs a libkrun without krun_set_virtiofs_cache: the test double built as one")
	}
	e.extra = append(e.extra, "KRUNBOX_LIBKRUN="+testkrun.Build(t, "-DTESTKRUN_STOCK"))
	const warning = "the workspace may be stale in the guest"
	ws := realDir(t)
	e.pull()
	e.ok("create", "--name", "stale", "--workspace", ws, image)
	if got, _ := e.inspect("stale")["stale_shares"].(string); !strings.Contains(got, "up to 5s stale") || !strings.Contains(got, "krun_set_virtiofs_cache") {
		t.Errorf("inspect of a stopped sandbox: stale_shares %q, want the 5 s and why", got)
	}
	r := e.krunbox("start", "stale")
	if r.code != 0 || strings.Count(r.stderr, warning) != 1 || !strings.Contains(r.stderr, "make libkrun") {
		t.Errorf("start: %s; want one warning %q saying where a coherent libkrun comes from", r, warning)
	}
	if got, _ := e.inspect("stale")["stale_shares"].(string); !strings.Contains(got, "up to 5s stale") {
		t.Errorf("inspect of the running sandbox: stale_shares %q", got)
	}
	e.ok("create", "--name", "cached", "-v", realDir(t)+":/deps:cached", image)
	if r := e.krunbox("start", "cached"); r.code != 0 || strings.Contains(r.stderr, warning) {
		t.Errorf("start of a sandbox with only a :cached mount: %s; want no warning", r)
	}
	if got, ok := e.inspect("cached")["stale_shares"]; ok {
		t.Errorf("inspect of a sandbox with only a :cached mount: stale_shares %v", got)
	}
}
