package e2e

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CoherentEnv, set to 1, makes the scenarios that need coherent shares
// run, and fail, with a libkrun that cannot make them coherent, rather than
// skip: hack/realvm/test.sh sets it when the library is krunbox's own.
const CoherentEnv = "KRUNBOX_E2E_COHERENT"

// needCoherent skips a scenario that needs the guest to see host changes at
// once when the suite's libkrun cannot do it (it lacks
// krun_set_virtiofs_cache, as upstream releases do), saying why, unless
// CoherentEnv asks for it.
func (e *env) needCoherent() {
	e.t.Helper()
	if e.suite.stale != "" && os.Getenv(CoherentEnv) != "1" {
		e.t.Skipf("SKIP: this libkrun cannot make the workspace coherent (krunbox doctor: %s); build krunbox's own with make libkrun and point KRUNBOX_LIBKRUN at it, or set %s=1 to run this anyway", e.suite.stale, CoherentEnv)
	}
}

// guestSees checks that the guest's first look at a host change, script run
// in sandbox name at once, prints want.
func (e *env) guestSees(what, name, script, want string) {
	e.t.Helper()
	if got := e.ok("exec", name, "sh", "-c", script); got != want {
		e.t.Errorf("%s: the guest's first read after it gave %q, want %q", what, got, want)
	}
}

func testWorkspace(t *testing.T, e *env) {
	e.needCoherent()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.started("ws", "--workspace", ws)
	sh := func(script string) string {
		t.Helper()
		return e.ok("exec", "ws", "sh", "-c", script)
	}
	// Same absolute path, and the default working directory.
	if got := sh("pwd"); got != ws+"\n" {
		t.Errorf("pwd in the guest: %q, want the workspace %q", got, ws)
	}
	// A guest write is on the host at once (no sync, no copy-back).
	sh("echo from-guest > " + ws + "/g; mkdir -p " + ws + "/d/e; echo deep > " + ws + "/d/e/f")
	for p, want := range map[string]string{"g": "from-guest\n", "d/e/f": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("guest write of %s seen on the host as %q, %v", p, b, err)
		}
	}
	// Host edits are seen in the guest at once.
	if err := os.WriteFile(filepath.Join(ws, "g"), []byte("edited on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.guestSees("host edit", "ws", "cat g", "edited on the host\n")
	// Deletions, both ways.
	sh("rm -r d")
	if _, err := os.Stat(filepath.Join(ws, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("guest deletion not seen on the host: %v", err)
	}
	if err := os.Remove(filepath.Join(ws, "g")); err != nil {
		t.Fatal(err)
	}
	e.guestSees("host deletion", "ws", "test -e g && echo present || echo gone", "gone\n")
	// -v . shares the current directory at the same path.
	e.pull()
	cmd := e.command("run", "-v", ".", "-w", ws, image, "--", "sh", "-c", "pwd; echo dot > dot")
	cmd.Dir = ws
	out, err := cmd.Output()
	if err != nil || string(out) != ws+"\n" {
		t.Errorf("run -v . in %s: %q, %v", ws, out, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "dot")); err != nil || string(b) != "dot\n" {
		t.Errorf("write through -v .: %q, %v", b, err)
	}
}

func testGitWorktree(t *testing.T, e *env) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	base, _ := filepath.EvalSymlinks(t.TempDir())
	repo, wt := filepath.Join(base, "repo"), filepath.Join(base, "wt")
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(repo, 0o755)
	run(repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644)
	run(repo, "add", "f")
	run(repo, "commit", "-q", "-m", "one")
	run(repo, "worktree", "add", "-q", wt)
	// The worktree's .git points outside it: krunbox shares what it needs.
	e.started("gitws", "--workspace", wt)
	mounts := e.inspect("gitws")["mounts"].([]any)
	var shared []string
	for _, m := range mounts {
		shared = append(shared, m.(map[string]any)["guest_path"].(string))
	}
	if len(shared) < 2 || shared[0] != wt || !strings.Contains(strings.Join(shared, " "), filepath.Join(repo, ".git")) {
		t.Errorf("mounts of a worktree workspace: %v; want it and the repository's .git", shared)
	}
	// The guest has no git; it can follow the pointers git follows.
	out := e.ok("exec", "gitws", "sh", "-c", "gd=$(sed 's/gitdir: //' .git); cat $gd/HEAD $gd/$(cat $gd/commondir)/HEAD")
	if out != "ref: refs/heads/wt\nref: refs/heads/main\n" {
		t.Errorf("the worktree's git directories in the guest: %q", out)
	}
}
