package gitconf

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Parse reads what git reads of the keys that name files, whatever the
// spelling; a line it cannot read is skipped, never an error.
func TestParse(t *testing.T) {
	conf := strings.Join([]string{
		"# a comment",
		"[Core]",
		"\tHooksPath = .githooks ; a comment",
		"\tbare",
		"[core] worktree = \"../a b\"",
		"[includeIf \"gitdir:~/x\"]",
		"\tpath = \"quo\\\"ted\\\\\" # a comment",
		"[remote.origin]",
		"\turl = \"a;b#c\" ; a comment",
		"[broken",
		"\tkey = skipped",
		"[extensions]",
		"\tworktreeConfig = yes",
		"",
	}, "\n")
	want := []Entry{
		{"core", "", "hookspath", ".githooks"},
		{"core", "", "bare", "true"},
		{"core", "", "worktree", "../a b"},
		{"includeif", "gitdir:~/x", "path", `quo"ted\`},
		{"remote", "origin", "url", "a;b#c"},
		{"extensions", "", "worktreeconfig", "yes"},
	}
	if got := Parse([]byte(conf)); !slices.Equal(got, want) {
		t.Errorf("Parse:\n got %q\nwant %q", got, want)
	}
	entries := Parse([]byte(conf))
	if got := Values(entries, "includeif", "*", "path"); !slices.Equal(got, []string{`quo"ted\`}) {
		t.Errorf("Values(includeif.*.path) = %q", got)
	}
	if got := Values(entries, "includeif", "", "path"); len(got) != 0 {
		t.Errorf("Values(includeif..path) = %q, want none: the subsection differs", got)
	}
	if got, ok := Last(entries, "extensions", "", "worktreeconfig"); !ok || !Bool(got) {
		t.Errorf("extensions.worktreeConfig = %q, %v; want a true boolean", got, ok)
	}
	two := Parse([]byte("[core]\n\tworktree = a\n[core]\n\tworktree = b\n"))
	if got, ok := Last(two, "core", "", "worktree"); !ok || got != "b" {
		t.Errorf("Last(core.worktree) of two = %q, %v; want the last, b", got, ok)
	}
	if got, ok := Last(two, "core", "", "bare"); ok {
		t.Errorf("Last(core.bare) = %q, want none", got)
	}
}

func TestBool(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "YES": true, "On": true, "1": true, "false": false, "0": false, "": false, "tru": false} {
		if got := Bool(v); got != want {
			t.Errorf("Bool(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestGitdir(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"gitdir: ../repo/.git/worktrees/w\n", "../repo/.git/worktrees/w", true},
		{"other\ngitdir:   /abs  \n", "/abs", true},
		{"gitdir:\n", "", false},
		{"nonsense\n", "", false},
	}
	for _, tt := range tests {
		got, ok := Gitdir([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("Gitdir(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		_, err := GitdirLine("/w/.git", []byte(tt.in))
		if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), "/w/.git") {
			t.Errorf("GitdirLine(%q) = %v", tt.in, err)
		}
	}
}

// Resolve takes a relative path from the directory of the file that
// names it, and resolves the symlinks on the way.
func TestResolve(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "real/sub"), 0o755)
	os.Symlink("real", filepath.Join(dir, "link"))
	for _, tt := range []struct{ from, p, want string }{
		{dir, "link/sub", filepath.Join(dir, "real/sub")},
		{filepath.Join(dir, "real/sub"), "..", filepath.Join(dir, "real")},
		{"/elsewhere", filepath.Join(dir, "link"), filepath.Join(dir, "real")},
	} {
		if got, err := Resolve(tt.from, tt.p); err != nil || got != tt.want {
			t.Errorf("Resolve(%s, %s) = %q, %v; want %q", tt.from, tt.p, got, err, tt.want)
		}
	}
	for _, p := range []string{"", "absent"} {
		if got, err := Resolve(dir, p); err == nil {
			t.Errorf("Resolve(%q) = %q, want an error", p, got)
		}
	}
}
