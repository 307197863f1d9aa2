package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// isolatedRepo makes a git repository with one commit (a, dir/b,
// .gitignore), an untracked .env and an ignored file, with go-git (the
// real-VM machine has no git), and returns it.
func isolatedRepo(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a": "x\n", "dir/b": "b\n", ".gitignore": "ignored\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
		os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644)
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddGlob("."); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "t", Email: "t@t", When: time.Now()}
	if _, err := wt.Commit("one", &git.CommitOptions{Author: sig}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ".env"), []byte("SECRET=1\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "ignored"), []byte("i\n"), 0o644)
	return dir
}

// branchFile returns the content of file on branch of repo.
func branchFile(t *testing.T, repo, branch, file string) string {
	t.Helper()
	r, err := git.PlainOpen(repo)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		t.Fatalf("branch %s: %v", branch, err)
	}
	c, err := r.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.File(file)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	s, _ := f.Contents()
	return s
}

// Two isolated sandboxes of one repository work side by side on their
// own checkouts of HEAD, never the user's; diff, export and land take
// their work out, each as its own branch; rm keeps work not landed.
func testIsolated(t *testing.T, e *env) {
	repo := isolatedRepo(t)
	e.started("iso1", "--isolate", "--workspace", repo)
	e.started("iso2", "--isolate", "--workspace", repo)
	out := e.ok("exec", "iso1", "sh", "-c", "cd "+repo+" && cat a && ls -a && echo one > a && echo new > new && sync")
	if !strings.HasPrefix(out, "x\n") || strings.Contains(out, ".env") || strings.Contains(out, "ignored") || !strings.Contains(out, ".git") {
		t.Errorf("iso1's checkout: %q (want a = x, .git, no .env, no ignored)", out)
	}
	if out := e.ok("exec", "iso2", "sh", "-c", "cd "+repo+" && cat a && echo two > a && rm dir/b && sync"); out != "x\n" {
		t.Errorf("iso2 sees %q, want the base's a, not iso1's edit", out)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "a")); string(b) != "x\n" {
		t.Errorf("the user's checkout changed: a = %q", b)
	}
	if _, err := os.Lstat(filepath.Join(repo, "new")); err == nil {
		t.Error("the guest's new file is in the user's checkout")
	}
	if out := e.ok("diff", "--stat", "iso1"); out != " a   | 2 +-\n new | 1 +\n 2 files changed, 2 insertions(+), 1 deletions(-)\n" {
		t.Errorf("diff --stat iso1:\n%s", out)
	}
	if out := e.ok("diff", "iso2", "a"); !strings.Contains(out, "--- a/a\n+++ b/a\n") || !strings.Contains(out, "-x\n+two\n") {
		t.Errorf("diff iso2 a:\n%s", out)
	}
	var ws []struct {
		Name, Project, Base, Branch string
		Changed                     int
	}
	if err := json.Unmarshal([]byte(e.ok("workspaces", "--json", "--project", repo)), &ws); err != nil || len(ws) != 2 {
		t.Fatalf("workspaces --json: %v, %v", ws, err)
	}
	for i, w := range ws {
		if name := fmt.Sprintf("iso%d", i+1); w.Name != name || w.Project != repo || w.Branch != "krunbox/"+name || len(w.Base) != 40 || w.Changed != 2 {
			t.Errorf("workspaces[%d] = %+v", i, w)
		}
	}
	if iso, _ := e.inspect("iso1")["isolation"].(map[string]any); iso["branch"] != "krunbox/iso1" || iso["project"] != repo || iso["base"] != ws[0].Base {
		t.Errorf("inspect's isolation: %v", iso)
	}
	dst := filepath.Join(t.TempDir(), "out")
	e.ok("export", "iso1", "new", repo+"/a", "--to", dst)
	for name, want := range map[string]string{"new": "new\n", "a": "one\n"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("exported %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if r := e.krunbox("export", "iso1", "new", "--to", dst); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("export to an existing directory: %s", r)
	}
	if r := e.krunbox("export", "iso1", "../etc", "--to", dst+"2"); r.code == 0 || !strings.Contains(r.stderr, "outside the project") {
		t.Errorf("export of a path outside the project: %s", r)
	}
	e.ok("stop", "iso1")
	if r := e.krunbox("rm", "iso1"); r.code == 0 || !strings.Contains(r.stderr, "not landed") {
		t.Errorf("rm of a sandbox with work not landed: %s", r)
	}
	for _, name := range []string{"iso1", "iso2"} {
		if out := e.ok("land", name); !strings.Contains(out, "Landed krunbox/"+name) {
			t.Errorf("land %s: %q", name, out)
		}
	}
	if got := branchFile(t, repo, "krunbox/iso1", "new"); got != "new\n" {
		t.Errorf("new on krunbox/iso1: %q", got)
	}
	if got := branchFile(t, repo, "krunbox/iso2", "a"); got != "two\n" {
		t.Errorf("a on krunbox/iso2: %q", got)
	}
	if got := branchFile(t, repo, "krunbox/iso2", "dir/b"); !strings.Contains(got, "not found") {
		t.Errorf("dir/b on krunbox/iso2: %q, want it deleted", got)
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "a")); string(b) != "x\n" {
		t.Errorf("land changed the user's checkout: a = %q", b)
	}
	e.ok("rm", "iso1")
	e.ok("rm", "-f", "iso2")
}
