package isolate

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/krunbox/krunbox/internal/testutil/gittest"
)

// Every name git refuses to check out with core.protectNTFS and
// core.protectHFS on is refused, and no other but the names of dots and
// spaces alone (which Windows reads as . or ..): the host's git, where
// there is one, is asked about each.
func TestCheckTreeName(t *testing.T) {
	const (
		file = filemode.Regular
		link = filemode.Symlink
	)
	tests := []struct {
		name   string
		mode   filemode.FileMode
		refuse bool
		// git is how git is asked: "" as is, "-" not (not a name it can
		// take as a path), "stricter" when krunbox refuses what git takes.
		git string
	}{
		// Not names at all.
		{"", file, true, "-"},
		{"a/b", file, true, "-"},
		{"a\x00b", file, true, "-"},
		{".", file, true, ""},
		{"..", file, true, ""},
		// Dots and spaces alone: . or .. on Windows.
		{"...", file, true, "stricter"},
		{". ", file, true, "stricter"},
		{".. ", file, true, "stricter"},
		{" .", file, true, "stricter"},
		{". . .", file, true, "stricter"},
		// .git in any case.
		{".git", file, true, ""},
		{".GIT", file, true, ""},
		{".Git", file, true, ""},
		{".gIt", filemode.Dir, true, "-"}, // a directory: git takes no mode 040000 in the index
		// NTFS: trailing dots and spaces, streams, the short name, a
		// backslash separating names.
		{".git.", file, true, ""},
		{".git ", file, true, ""},
		{".git. .", file, true, ""},
		{".GIT . .", file, true, ""},
		{"git~1", file, true, ""},
		{"GIT~1", file, true, ""},
		{"Git~1. ", file, true, ""},
		{".git:x", file, true, ""},
		{".git::$INDEX_ALLOCATION", file, true, ""},
		{"git~1::$INDEX_ALLOCATION", file, true, ""},
		{"a\\.git", file, true, ""},
		{".git\\x", file, true, ""},
		{"x\\git~1", file, true, ""},
		{"a\\.GIT.\\b", file, true, ""},
		// HFS+: the code points it ignores, anywhere.
		{".g\u200cit", file, true, ""},
		{".\u200dgit", file, true, ""},
		{"\u200f.git", file, true, ""},
		{".git\u200e", file, true, ""},
		{".gi\u202at", file, true, ""},
		{".gi\u202et", file, true, ""},
		{".g\u206ait", file, true, ""},
		{".g\u206fit", file, true, ""},
		{".git\ufeff", file, true, ""},
		{".G\u200cI\u200dT", file, true, ""},
		{".git\xff", file, true, ""}, // not UTF-8 after .git: git refuses it too
		// .gitmodules a symlink, in every form.
		{".gitmodules", link, true, ""},
		{".GITMODULES", link, true, ""},
		{".gitmodules.", link, true, ""},
		{".gitmodules ", link, true, ""},
		{".gitmodules::$DATA", link, true, ""},
		{"gitmod~1", link, true, ""},
		{"GITMOD~4", link, true, ""},
		{"gi7eba~1", link, true, ""},
		{"GI7EBA~9", link, true, ""},
		{"gi7eb~12", link, true, ""},
		{"~1234567", link, true, ""},
		{".gitmodu\u200cles", link, true, ""},
		{"a\\.gitmodules", link, true, ""},
		// Names git takes.
		{"f", file, false, ""},
		{".gitx", file, false, ""},
		{".git foo", file, false, ""},
		{"foo.git", file, false, ""},
		{".g.it", file, false, ""},
		{"git~2", file, false, ""},
		{"git~1x", file, false, ""},
		{".gi\u200bt", file, false, ""}, // a zero-width space HFS+ keeps
		{".git\u00e9", file, false, ""},
		{".g\xffit", file, false, ""},
		{"a:b", file, false, ""},
		{"..a", file, false, ""},
		{"a..", file, false, ""},
		{" ", file, false, ""},
		{".gitmodules", file, false, ""},
		{"gitmod~1", file, false, ""},
		{"gitmod~5", link, false, ""},
		{"gi7eba~1", file, false, ""},
		{".gitignore", link, false, ""},
		{".gitattributes", link, false, ""},
		{"a\\.gitmodules", file, false, ""},
	}
	oracle := gitVerifyPath(t)
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q %o", tt.name, tt.mode), func(t *testing.T) {
			err := checkTreeName(tt.name, tt.mode)
			if (err != nil) != tt.refuse {
				t.Errorf("checkTreeName(%q, %o) = %v, want refused: %v", tt.name, tt.mode, err, tt.refuse)
			}
			if oracle == nil || tt.git == "-" {
				return
			}
			want := tt.refuse && tt.git != "stricter"
			if got := oracle(tt.name, tt.mode); got != want {
				t.Errorf("git refuses %q (mode %o): %v, want %v", tt.name, tt.mode, got, want)
			}
		})
	}
}

// gitVerifyPath returns a function that asks the host's git whether it
// refuses a path of a mode in its index, with core.protectNTFS and
// core.protectHFS on; nil without git.
func gitVerifyPath(t *testing.T) func(name string, mode filemode.FileMode) bool {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil
	}
	dir := t.TempDir()
	run := func(stdin string, args ...string) ([]byte, error) {
		cmd := exec.Command(git, append([]string{"-c", "core.protectNTFS=true", "-c", "core.protectHFS=true"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		return cmd.Output()
	}
	if out, err := run("", "init", "-q"); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	blob, err := run("x\n", "hash-object", "-w", "--stdin")
	if err != nil {
		t.Fatalf("git hash-object: %v", err)
	}
	return func(name string, mode filemode.FileMode) bool {
		_, err := run("", "update-index", "--add", "--cacheinfo", fmt.Sprintf("%o,%s,%s", mode, bytes.TrimSpace(blob), name))
		run("", "rm", "-q", "--cached", "--ignore-unmatch", "--", name)
		return err != nil
	}
}

// Land refuses a path of the checkout with a name git refuses (.git in
// any form a file system reads as .git, .gitmodules a symlink), with
// --squash or not, nothing written into the user's repository.
func TestLandRefusesGitNames(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	for i, p := range []string{
		".GIT/hooks/post-checkout",
		".git. /config",
		"sub/.Git./config",
		"git~1/config",
		".git::$INDEX_ALLOCATION/config",
		".g\u200cit/config",
		"sub/x\\.git\\config",
		".gitmodules@", // a symlink
		"GITMOD~1@",
		".. /x",
	} {
		t.Run(p, func(t *testing.T) {
			ck := newCheckout(t, repo, fmt.Sprintf("names%d", i))
			co := ck.path(WorkspaceDir)
			full := filepath.Join(co, strings.TrimSuffix(p, "@"))
			os.MkdirAll(filepath.Dir(full), 0o755)
			var err error
			if strings.HasSuffix(p, "@") {
				err = os.Symlink("/etc/passwd", full)
			} else {
				err = os.WriteFile(full, []byte("#!/bin/sh\necho pwned\n"), 0o755)
			}
			if err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, repo)
			for _, squash := range []bool{false, true} {
				l, err := ck.Land(t.Context(), squash)
				if err == nil || !strings.Contains(err.Error(), "refuses") {
					t.Errorf("Land (squash %v) = %+v, %v; want a name git refuses", squash, l, err)
				}
			}
			before.unchanged(t, repo, ck.Record.Branch)
		})
	}
}
