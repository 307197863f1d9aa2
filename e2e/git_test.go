package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/internal/testutil/gitattack"
)

// gitWorkspace makes a workspace holding a git directory as git init
// leaves it (made by hand: the real-VM machine has no git), and returns
// it.
func gitWorkspace(t *testing.T) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		".git/HEAD":                    "ref: refs/heads/main\n",
		".git/config":                  "[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
		".git/hooks/pre-commit.sample": "#!/bin/sh\nexit 0\n",
		".git/refs/heads/main":         "0000000000000000000000000000000000000000\n",
		".git/objects/info/exclude":    "",
		".git/logs/HEAD":               "",
		"src/main.c":                   "int main(void) { return 0; }\n",
	} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

func testGitReadOnly(t *testing.T, e *env) {
	ws := gitWorkspace(t)
	before := gitattack.Files(t, ws)
	e.started("git", "--workspace", ws)
	git := e.inspect("git")["git"].(map[string]any)
	if git["mode"] != "read-only" || len(git["paths"].([]any)) != 3 {
		t.Errorf("inspect's git: %v; want read-only .git/hooks and .git/config, and .git pinned", git)
	}
	if out := e.ok("exec", "git", "sh", "-c", "WS="+ws+"\n"+gitattack.Attacks); out != "" {
		t.Errorf("the guest changed what the host's git runs: %q", out)
	}
	if after := gitattack.Files(t, ws); !maps.Equal(before, after) {
		t.Errorf("the host's .git changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git2")); err == nil {
		t.Error("the guest renamed .git")
	}
	if out := e.ok("exec", "git", "sh", "-c", "WS="+ws+"\n"+gitattack.CommitByHand); out != "obj\nref\nindex\nlog\n" {
		t.Errorf("what a commit writes, from the guest: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, ".git/refs/heads/main")); err != nil || !strings.HasPrefix(string(b), "1111") {
		t.Errorf("the guest's ref update on the host: %q, %v", b, err)
	}
	// Where they could not be made read-only (simulated: the fingerprint
	// of a start without the runner's mount namespace, which one of the
	// guest's changes no longer matches), every command refuses until the
	// user accepted the changes.
	state := filepath.Join(e.sandboxDir("git"), "git.json")
	var st map[string]any
	b, err := os.ReadFile(state)
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("git.json: %q, %v", b, err)
	}
	hook := filepath.Join(ws, ".git/hooks/pre-commit.sample")
	tamper := func() {
		st["mode"], st["fingerprint"] = "fingerprint", map[string]string{hook: "-rwxr-xr-x 17 sha256:0"}
		b, _ := json.Marshal(st)
		if err := os.WriteFile(state, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tamper()
	for _, args := range [][]string{{"exec", "git", "true"}, {"start", "git"}} {
		r := e.krunbox(args...)
		if r.code == 0 || !strings.Contains(r.stderr, hook) || !strings.Contains(r.stderr, "--accept-git-changes") {
			t.Errorf("with a changed hook: %s; want a refusal naming it", r)
		}
	}
	if git := e.inspect("git")["git"].(map[string]any); git["changed"] == nil || !slices.Contains(git["changed"].([]any), any(hook)) {
		t.Errorf("inspect's git.changed: %v, want %s", git["changed"], hook)
	}
	e.ok("start", "--accept-git-changes", "git")
	e.ok("exec", "git", "true")
	// rm removes it all the same, but says what changed, one last time.
	tamper()
	r := e.krunbox("rm", "-f", "git")
	if r.code == 0 || !strings.Contains(r.stderr, hook) || !strings.Contains(r.stderr, "review them") {
		t.Errorf("rm with a changed hook: %s; want the change said", r)
	}
	if _, ok := e.ls()["git"]; ok {
		t.Error("rm with a changed hook did not remove the sandbox")
	}
}

func testGitWritable(t *testing.T, e *env) {
	ws := gitWorkspace(t)
	e.started("gitrw", "--workspace", ws, "--git-writable")
	in := e.inspect("gitrw")
	if in["config"].(map[string]any)["git_writable"] != true || in["git"].(map[string]any)["mode"] != "off" {
		t.Errorf("inspect of a --git-writable sandbox: config %v, git %v", in["config"], in["git"])
	}
	if out := e.ok("exec", "gitrw", "sh", "-c", "WS="+ws+"\n"+gitattack.Attacks); out != gitattack.AllSucceeded {
		t.Errorf("with --git-writable, the guest's writes: %q", out)
	}
}
