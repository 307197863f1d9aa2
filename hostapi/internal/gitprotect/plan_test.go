package gitprotect

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi/vmm"
)

// makeTree writes files (path: content; a path ending in "/" is a
// directory, content "->X" a symlink to X) below dir.
func makeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch c := files[n]; {
		case strings.HasSuffix(n, "/"):
			err = os.MkdirAll(p, 0o755)
		case strings.HasPrefix(c, "->"):
			err = os.Symlink(c[2:], p)
		default:
			err = os.WriteFile(p, []byte(c), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// protects renders a plan as "path" (read-only) and "path (pinned)",
// relative to dir.
func protects(dir string, plan []vmm.Protect) []string {
	var out []string
	for _, p := range plan {
		rel, _ := filepath.Rel(dir, p.Path)
		if p.Writable {
			rel += " (pinned)"
		}
		out = append(out, rel)
	}
	return out
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		shares  func(dir string) []string
		want    []string
		wantErr string
		made    []string // created empty by the plan
	}{
		{
			name:  "ordinary repository",
			files: map[string]string{"ws/.git/HEAD": "ref: refs/heads/main\n", "ws/.git/config": "[core]\n", "ws/.git/hooks/pre-commit.sample": "#!/bin/sh\n", "ws/.git/objects/": ""},
			want:  []string{"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks"},
		},
		{
			name:  "missing hooks and config are made empty first",
			files: map[string]string{"ws/.git/HEAD": "ref: refs/heads/main\n"},
			want:  []string{"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks"},
			made:  []string{"ws/.git/hooks", "ws/.git/config"},
		},
		{
			name:  "not a checkout",
			files: map[string]string{"ws/f": "x"},
		},
		{
			name: "worktree",
			files: map[string]string{
				"repo/.git/HEAD": "ref: refs/heads/main\n", "repo/.git/config": "[core]\n\tbare = false\n[extensions]\n\tworktreeConfig = true\n",
				"repo/.git/hooks/": "", "repo/.git/worktrees/ws/HEAD": "x", "repo/.git/worktrees/ws/commondir": "../..\n",
				"ws/.git": "gitdir: ../repo/.git/worktrees/ws\n",
			},
			shares: func(dir string) []string { return []string{filepath.Join(dir, "ws"), filepath.Join(dir, "repo/.git")} },
			// The common directory is a share's root: nothing to pin.
			want: []string{"repo/.git/config", "repo/.git/config.worktree", "repo/.git/hooks", "repo/.git/worktrees/ws (pinned)", "repo/.git/worktrees/ws/config.worktree", "ws/.git"},
			made: []string{"repo/.git/config.worktree", "repo/.git/worktrees/ws/config.worktree"},
		},
		{
			name: "submodules, nested, with their checkouts' .git files",
			files: map[string]string{
				"ws/.git/HEAD": "x", "ws/.git/config": "", "ws/.git/hooks/": "",
				"ws/.git/modules/lib/a/HEAD": "x", "ws/.git/modules/lib/a/config": "[core]\n\tworktree = ../../../../lib/a\n",
				"ws/.git/modules/lib/a/modules/b/HEAD": "x", "ws/.git/modules/lib/a/modules/b/config": "[core]\n\tworktree = ../../../../../../lib/a/b\n",
				"ws/lib/a/.git": "gitdir: ../../.git/modules/lib/a\n", "ws/lib/a/b/.git": "gitdir: ../../../.git/modules/lib/a/modules/b\n",
			},
			want: []string{
				"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks",
				"ws/.git/modules/lib/a (pinned)", "ws/.git/modules/lib/a/config", "ws/.git/modules/lib/a/hooks",
				"ws/.git/modules/lib/a/modules/b (pinned)", "ws/.git/modules/lib/a/modules/b/config", "ws/.git/modules/lib/a/modules/b/hooks",
				"ws/lib/a/.git", "ws/lib/a/b/.git",
			},
		},
		{
			name: "hooksPath and includes in the workspace",
			files: map[string]string{
				"ws/.git/HEAD": "x", "ws/.git/hooks/": "",
				"ws/.git/config":      "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig.local ; a comment\n[includeIf \"gitdir:~/\"]\n\tpath = \"../conf/extra\"\n",
				"ws/.gitconfig.local": "",
			},
			want: []string{"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks", "ws/.gitconfig.local", "ws/.githooks", "ws/conf/extra"},
			made: []string{"ws/.githooks", "ws/conf/extra"},
		},
		{
			name:  "hooksPath outside the shares is left alone",
			files: map[string]string{"ws/.git/HEAD": "x", "ws/.git/hooks/": "", "ws/.git/config": "[core]\n\thooksPath = /nonexistent/hooks\n"},
			want:  []string{"ws/.git (pinned)", "ws/.git/config", "ws/.git/hooks"},
		},
		{
			name:    "hooks is a symlink",
			files:   map[string]string{"elsewhere/": "", "ws/.git/HEAD": "x", "ws/.git/config": "", "ws/.git/hooks": "->../../elsewhere"},
			wantErr: "symlink",
		},
		{
			name:    "config is a symlink",
			files:   map[string]string{"elsewhere": "", "ws/.git/HEAD": "x", "ws/.git/config": "->../../elsewhere", "ws/.git/hooks/": ""},
			wantErr: "symlink",
		},
		{
			name:    ".git is a symlink",
			files:   map[string]string{"repo/HEAD": "x", "ws/.git": "->../repo"},
			wantErr: "symlink",
		},
		{
			name: ".git file through a symlink in the workspace",
			files: map[string]string{
				"ws/real/gd/HEAD": "x", "ws/real/gd/config": "", "ws/real/gd/hooks/": "",
				"ws/link": "->real", "ws/.git": "gitdir: link/gd\n",
			},
			wantErr: "symlink",
		},
		{
			name: ".git file through the host's symlink outside the shares",
			files: map[string]string{
				"repo/.git/HEAD": "x", "repo/.git/config": "", "repo/.git/hooks/": "",
				"hostlink": "->repo", "ws/.git": "gitdir: ../hostlink/.git\n",
			},
			shares: func(dir string) []string { return []string{filepath.Join(dir, "ws"), filepath.Join(dir, "repo/.git")} },
			want:   []string{"repo/.git/config", "repo/.git/hooks", "ws/.git"},
		},
		{
			name:    "hooksPath through a symlink in the workspace",
			files:   map[string]string{"ws/real/": "", "ws/link": "->real", "ws/.git/HEAD": "x", "ws/.git/hooks/": "", "ws/.git/config": "[core]\n\thooksPath = link/hooks\n"},
			wantErr: "symlink",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			makeTree(t, dir, tt.files)
			shares := []string{filepath.Join(dir, "ws")}
			if tt.shares != nil {
				shares = tt.shares(dir)
			}
			paths, err := plan(shares)
			if tt.wantErr != "" {
				var pe *protectError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &pe) {
					t.Fatalf("plan = %v, %v; want a refusal naming %q", protects(dir, paths), err, tt.wantErr)
				}
				if _, err := os.Stat(filepath.Join(dir, "elsewhere", "hooks")); err == nil {
					t.Error("something was made through the symlink")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := protects(dir, paths); !slices.Equal(got, tt.want) {
				t.Errorf("plan:\n got %q\nwant %q", got, tt.want)
			}
			for _, m := range tt.made {
				if _, err := os.Lstat(filepath.Join(dir, m)); err != nil {
					t.Errorf("%s not made: %v", m, err)
				}
			}
		})
	}
}
