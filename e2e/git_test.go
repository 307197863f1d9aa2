package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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

// gitFiles reads what the host's git runs or obeys in ws/.git: hooks and
// config, with their modes.
func gitFiles(t *testing.T, ws string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range []string{"config", "hooks"} {
		filepath.Walk(filepath.Join(ws, ".git", p), func(path string, fi os.FileInfo, err error) error {
			if err != nil {
				out[path] = err.Error()
				return nil
			}
			b, _ := os.ReadFile(path)
			out[path] = fi.Mode().String() + " " + string(b)
			return nil
		})
	}
	return out
}

// The guest's attempts at what the host's git would run: each line prints
// only when it succeeds.
const gitAttacks = `cd $WS
echo 'echo pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo hook-written
printf '[core]\n\tfsmonitor = "echo pwned"\n' >> .git/config && echo config-appended
echo x > .git/config.new && mv .git/config.new .git/config && echo config-replaced
rm -rf .git/hooks && ln -s /tmp .git/hooks && echo hooks-symlinked
mv .git .git2 && mkdir -p .git/hooks && echo moved
true`

// What a commit writes (the test image has no git).
const gitCommit = `cd $WS
mkdir -p .git/objects/ab && echo blob > .git/objects/ab/cdef && echo obj
echo 1111111111111111111111111111111111111111 > .git/refs/heads/main.lock && mv .git/refs/heads/main.lock .git/refs/heads/main && echo ref
echo index > .git/index.lock && mv .git/index.lock .git/index && echo index
echo log >> .git/logs/HEAD && echo log`

func testGitReadOnly(t *testing.T, e *env) {
	ws := gitWorkspace(t)
	before := gitFiles(t, ws)
	e.started("git", "--workspace", ws)
	git := e.inspect("git")["git"].(map[string]any)
	if git["mode"] != "read-only" || len(git["paths"].([]any)) != 3 {
		t.Errorf("inspect's git: %v; want read-only .git/hooks and .git/config, and .git pinned", git)
	}
	if out := e.ok("exec", "git", "sh", "-c", "WS="+ws+"\n"+gitAttacks); out != "" {
		t.Errorf("the guest changed what the host's git runs: %q", out)
	}
	if after := gitFiles(t, ws); !maps.Equal(before, after) {
		t.Errorf("the host's .git changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git2")); err == nil {
		t.Error("the guest renamed .git")
	}
	if out := e.ok("exec", "git", "sh", "-c", "WS="+ws+"\n"+gitCommit); out != "obj\nref\nindex\nlog\n" {
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
	if out := e.ok("exec", "gitrw", "sh", "-c", "WS="+ws+"\n"+gitAttacks); out != "hook-written\nconfig-appended\nconfig-replaced\nhooks-symlinked\nmoved\n" {
		t.Errorf("with --git-writable, the guest's writes: %q", out)
	}
}
