// Package gittest makes the git repositories that tests of krunbox's git
// handling work on (the git protection, the isolated checkouts), with the
// host's git under a configuration of the test's own.
package gittest

import (
	"bytes"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// env is the environment of the git the tests run: no system
// configuration, HOME the repository, a fixed author.
func env(dir string) []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
}

// Repo makes a git repository with one commit (f, "x\n") on branch main
// and returns its directory, symlinks resolved, skipping the test without
// git.
func Repo(t testing.TB) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "f"}, {"commit", "-q", "-m", "one"}} {
		if args[0] == "add" {
			os.WriteFile(filepath.Join(ws, "f"), []byte("x\n"), 0o644)
		}
		cmd := exec.Command(git, args...)
		cmd.Dir = ws
		cmd.Env = env(ws)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return ws
}

// Run runs git in dir, failing the test on error.
func Run(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env(dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// Safe are the options with which tests run git in a Hostile
// repository: nothing of its own runs.
var Safe = []string{"-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "filter.evil.process=", "-c", "filter.evil.clean=", "-c", "filter.evil.smudge=", "-c", "filter.evil.required=false"}

// Out runs git in dir with the user's configuration ignored, and Safe,
// and returns its output, trimmed.
func Out(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append(Safe, args...)...)
	cmd.Dir = dir
	cmd.Env = env(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Hostile makes a git repository whose config, hooks and attributes
// would write the file marker if the host's git ran them: a hook for
// every event that reads or checks out, core.fsmonitor, a filter driver
// named by the commit's .gitattributes, an alternate of no objects. It
// has one commit (f, .gitattributes, a symlink), an untracked .env and
// an ignored file, and returns its directory and the marker's path.
func Hostile(t testing.TB) (repo, marker string) {
	t.Helper()
	repo = Repo(t)
	marker = filepath.Join(t.TempDir(), "pwned")
	evil := "touch " + marker
	for name, data := range map[string]string{
		".gitattributes": "* filter=evil\n",
		".gitignore":     "ignored\n",
		"dir/g":          "g\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(repo, name)), 0o755)
		os.WriteFile(filepath.Join(repo, name), []byte(data), 0o644)
	}
	os.Symlink("/etc/passwd", filepath.Join(repo, "link"))
	Run(t, repo, "add", "-A")
	Run(t, repo, "commit", "-q", "-m", "two")
	for _, h := range []string{"post-checkout", "post-index-change", "pre-commit", "post-commit", "reference-transaction", "fsmonitor-watchman"} {
		os.WriteFile(filepath.Join(repo, ".git/hooks", h), []byte("#!/bin/sh\n"+evil+"\n"), 0o755)
	}
	cfg := "[core]\n\tfsmonitor = \"" + evil + "\"\n\thooksPath = hooks\n[filter \"evil\"]\n\tclean = " + evil + "\n\tsmudge = " + evil + "\n\tprocess = " + evil + "\n\trequired = true\n[uploadpack]\n\tpackObjectsHook = " + evil + "\n"
	f, err := os.OpenFile(filepath.Join(repo, ".git/config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(cfg)
	f.Close()
	os.WriteFile(filepath.Join(repo, ".env"), []byte("SECRET=1\n"), 0o600)
	os.WriteFile(filepath.Join(repo, "ignored"), []byte("i\n"), 0o644)
	return repo, marker
}

// BadTree makes a repository (as Repo) whose HEAD's tree names .GIT, a
// name git refuses to check out (a case variant of .git), and returns its
// directory.
func BadTree(t testing.TB) string {
	t.Helper()
	repo := Repo(t)
	blob, err := hex.DecodeString(Out(t, repo, "hash-object", "-w", "f"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("100644 .GIT\x00")
	b.Write(blob)
	cmd := exec.Command("git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin")
	cmd.Dir, cmd.Stdin = repo, &b
	tree, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	c := Out(t, repo, "commit-tree", "-m", "evil", strings.TrimSpace(string(tree)))
	Out(t, repo, "update-ref", "refs/heads/main", c)
	return repo
}
