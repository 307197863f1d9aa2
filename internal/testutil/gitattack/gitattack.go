// Package gitattack holds what tests of git protection share: the guest's
// attempts at the files the host's git runs or obeys, what a commit writes,
// and a snapshot of those files to compare.
package gitattack

import (
	"os"
	"path/filepath"
	"testing"
)

// Attacks is a guest shell script (WS set to the workspace) trying to
// change what the host's git runs: each line prints its word only when it
// succeeds, and the script exits 0.
const Attacks = `cd $WS
echo 'echo pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo hook-written
printf '[core]\n\tfsmonitor = "echo pwned"\n' >> .git/config && echo config-appended
echo x > .git/config.new && mv .git/config.new .git/config && echo config-replaced
rm -rf .git/hooks && ln -s /tmp .git/hooks && echo hooks-symlinked
mv .git .git2 && mkdir -p .git/hooks && echo moved
true`

// AllSucceeded is the output of Attacks when the guest may change
// everything (--git-writable).
const AllSucceeded = "hook-written\nconfig-appended\nconfig-replaced\nhooks-symlinked\nmoved\n"

// CommitByHand is a guest shell script (WS set) writing what git writes in
// a commit, for images without git: it prints "obj ref index log", a line
// each.
const CommitByHand = `cd $WS
mkdir -p .git/objects/ab && echo blob > .git/objects/ab/cdef && echo obj
echo 1111111111111111111111111111111111111111 > .git/refs/heads/main.lock && mv .git/refs/heads/main.lock .git/refs/heads/main && echo ref
echo index > .git/index.lock && mv .git/index.lock .git/index && echo index
echo log >> .git/logs/HEAD && echo log`

// Files reads what the host's git runs or obeys in ws/.git, hooks and
// config, with their modes (an error text where one cannot be read).
func Files(t testing.TB, ws string) map[string]string {
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
