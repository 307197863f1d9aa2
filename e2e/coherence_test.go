package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/hostchange"
)

// testHostChangesSeen: each host change to the workspace and to a -v mount
// is seen by the guest's first access after it, however the guest had
// cached what it touched.
func testHostChangesSeen(t *testing.T, e *env) {
	e.needCoherent()
	ws, mnt := realDir(t), realDir(t)
	e.started("coh", "--workspace", ws, "-v", mnt+":/data")
	for _, share := range []struct{ name, host, guest string }{{"workspace", ws, ws}, {"-v mount", mnt, "/data"}} {
		for _, c := range hostchange.All {
			must(t, c.Before(share.host))
			e.ok("exec", "coh", "sh", "-c", "cd "+share.guest+" && { "+c.Prime+"; } >/dev/null 2>&1; true")
			must(t, c.Apply(share.host))
			e.guestSees(share.name+": "+c.Name, "coh", "cd "+share.guest+" && "+c.Check, c.Want)
		}
	}
}

// testNoLostEdit: the user saves a file on the host (an editor's atomic
// save) and the agent edits it in the guest right after, as agents' edit
// tools do (read, change, write back): both changes are kept.
func testNoLostEdit(t *testing.T, e *env) {
	e.needCoherent()
	ws := realDir(t)
	must(t, os.WriteFile(filepath.Join(ws, "cfg.txt"), []byte("color = red\n"), 0o644))
	e.started("edit", "--workspace", ws)
	if got := e.ok("exec", "edit", "cat", "cfg.txt"); got != "color = red\n" {
		t.Fatalf("cfg.txt in the guest: %q", got)
	}
	must(t, hostchange.Save(ws, "cfg.txt", "color = red\nsize = 10\n"))
	e.ok("exec", "edit", "sed", "-i", "s/red/blue/", "cfg.txt")
	b, err := os.ReadFile(filepath.Join(ws, "cfg.txt"))
	must(t, err)
	if want := "color = blue\nsize = 10\n"; string(b) != want {
		t.Errorf("cfg.txt on the host after the host's save and the guest's edit: %q, want both changes %q", b, want)
	}
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
