package hostapi

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/gitattack"
	"github.com/krunbox/krunbox/internal/testutil/gittest"
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

func TestPlanGit(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		mounts  func(dir string) []Mount
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
			mounts: func(dir string) []Mount {
				return []Mount{{HostPath: filepath.Join(dir, "ws")}, {HostPath: filepath.Join(dir, "repo/.git")}}
			},
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
			name:   "read-only workspace needs nothing",
			files:  map[string]string{"ws/.git/HEAD": "x", "ws/.git/config": "", "ws/.git/hooks/": ""},
			mounts: func(dir string) []Mount { return []Mount{{HostPath: filepath.Join(dir, "ws"), ReadOnly: true}} },
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
			mounts: func(dir string) []Mount {
				return []Mount{{HostPath: filepath.Join(dir, "ws")}, {HostPath: filepath.Join(dir, "repo/.git")}}
			},
			want: []string{"repo/.git/config", "repo/.git/hooks", "ws/.git"},
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
			mounts := []Mount{{HostPath: filepath.Join(dir, "ws")}}
			if tt.mounts != nil {
				mounts = tt.mounts(dir)
			}
			plan, err := planGit(mounts)
			if tt.wantErr != "" {
				var pe *gitProtectError
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &pe) {
					t.Fatalf("planGit = %v, %v; want a refusal naming %q", protects(dir, plan), err, tt.wantErr)
				}
				if _, err := os.Stat(filepath.Join(dir, "elsewhere", "hooks")); err == nil {
					t.Error("something was made through the symlink")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := protects(dir, plan); !slices.Equal(got, tt.want) {
				t.Errorf("planGit:\n got %q\nwant %q", got, tt.want)
			}
			for _, m := range tt.made {
				if _, err := os.Lstat(filepath.Join(dir, m)); err != nil {
					t.Errorf("%s not made: %v", m, err)
				}
			}
		})
	}
}

func TestGitReadOnlyInTheGuest(t *testing.T) {
	ws := gittest.Repo(t)
	h, ref := testHost(t)
	before := gitattack.Files(t, ws)
	sb := started(t, h, Config{Image: ref, Workspace: ws})
	gp, err := sb.GitProtection()
	if err != nil || gp.Mode != GitMounts || len(gp.Paths) != 3 || len(gp.Changed) != 0 {
		t.Fatalf("GitProtection = %+v, %v; want read-only mounts of .git, its config and hooks", gp, err)
	}
	out := run(t, sb, "sh", "-c", "WS="+ws+"; "+gitattack.Attacks)
	if out != "" {
		t.Errorf("the guest changed what the host's git runs: %q", out)
	}
	if after := gitattack.Files(t, ws); !maps.Equal(before, after) {
		t.Errorf("the host's .git changed:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git2")); err == nil {
		t.Error("the guest renamed .git")
	}
	if out := run(t, sb, "sh", "-c", "WS="+ws+"; "+gitattack.CommitByHand); out != "obj\nref\nindex\nlog" {
		t.Errorf("what a commit writes, from the guest: %q", out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, ".git/refs/heads/main")); err != nil || string(b) != "1111111111111111111111111111111111111111\n" {
		t.Errorf("the guest's ref update on the host: %q, %v", b, err)
	}
}

// A workspace that is no checkout: a .git the guest makes there is the
// guest's own, hooks and config included, until the next start protects
// it; meanwhile it is reported, and the session goes on.
func TestGitAppearing(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Workspace: ws})
	// git init in the guest: the session goes on (an agent does that),
	// and the new git directory is reported.
	run(t, sb, "sh", "-c", "mkdir -p "+ws+"/.git/hooks && echo x > "+ws+"/.git/hooks/post-checkout && echo '[core]' > "+ws+"/.git/config")
	if err := sb.CheckGit(); err != nil {
		t.Fatalf("CheckGit after the guest made a .git: %v, want the session to go on", err)
	}
	if gp, err := sb.GitProtection(); err != nil || !slices.Equal(gp.Appeared, []string{filepath.Join(ws, ".git")}) {
		t.Fatalf("GitProtection after the guest made a .git: %+v, %v; want it in Appeared", gp, err)
	}
	if err := sb.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	// From the next start on, it is protected like any other.
	if err := sb.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := run(t, sb, "sh", "-c", "echo evil > "+ws+"/.git/hooks/post-checkout && echo hook-written; echo evil >> "+ws+"/.git/config && echo config-written; true"); out != "" {
		t.Errorf("after a restart, the guest's writes to the .git it made: %q, want none to succeed", out)
	}
	if gp, err := sb.GitProtection(); err != nil || len(gp.Appeared) != 0 {
		t.Errorf("GitProtection after the restart: %+v, %v; want nothing appeared", gp, err)
	}
}

func TestGitWritable(t *testing.T) {
	ws := gittest.Repo(t)
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Workspace: ws, GitWritable: true})
	if gp, err := sb.GitProtection(); err != nil || gp.Mode != GitOff || len(gp.Paths) != 0 {
		t.Fatalf("GitProtection = %+v, %v; want off", gp, err)
	}
	if out := run(t, sb, "sh", "-c", "WS="+ws+"; "+gitattack.Attacks); out != strings.TrimSuffix(gitattack.AllSucceeded, "\n") {
		t.Errorf("with GitWritable, the guest's writes: %q", out)
	}
	if target, err := os.Readlink(filepath.Join(ws, ".git2/hooks")); err != nil || target != "/tmp" {
		t.Errorf("hooks symlinked by the guest: %q, %v", target, err)
	}
}

// Where the runner has no mount namespace, the guest can write git's
// hooks and config; what it changed is found at stop and at every start,
// and refused until accepted.
func TestGitFingerprintFallback(t *testing.T) {
	ws := gittest.Repo(t)
	h, ref := testHost(t)
	h.protectsPaths = func(vmm.Root) bool { return false }
	sb := started(t, h, Config{Image: ref, Workspace: ws})
	if gp, err := sb.GitProtection(); err != nil || gp.Mode != GitFingerprint || len(gp.Changed) != 0 {
		t.Fatalf("GitProtection = %+v, %v; want a fingerprint and no change", gp, err)
	}
	if err := sb.CheckGit(); err != nil {
		t.Fatalf("CheckGit before any change: %v", err)
	}
	run(t, sb, "sh", "-c", "echo 'echo pwned' > "+ws+"/.git/hooks/pre-commit")
	var ge *GitChangedError
	if err := sb.CheckGit(); !errors.As(err, &ge) || !slices.Equal(ge.Changed, []string{filepath.Join(ws, ".git/hooks/pre-commit")}) {
		t.Fatalf("CheckGit after the guest wrote a hook: %v", err)
	}
	if err := sb.Stop(t.Context()); !errors.As(err, &ge) {
		t.Fatalf("Stop after the guest wrote a hook: %v, want a GitChangedError", err)
	}
	if err := sb.Start(t.Context()); !errors.As(err, &ge) || !strings.Contains(ge.Hint(), "--accept-git-changes") {
		t.Fatalf("Start after the guest wrote a hook: %v, want a GitChangedError", err)
	}
	if st, _ := sb.Status(t.Context()); st.State != StateStopped {
		t.Errorf("refused start left the sandbox %s", st.State)
	}
	if gp, _ := sb.GitProtection(); !slices.Contains(gp.Changed, filepath.Join(ws, ".git/hooks/pre-commit")) {
		t.Errorf("GitProtection().Changed = %v", gp.Changed)
	}
	if err := sb.AcceptGitChanges(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t.Context()); err != nil {
		t.Fatalf("Start once accepted: %v", err)
	}
	// Replacing .git shows too.
	run(t, sb, "sh", "-c", "cd "+ws+" && mv .git .git2 && cp -a .git2 .git")
	if err := sb.CheckGit(); !errors.As(err, &ge) || !slices.Contains(ge.Changed, filepath.Join(ws, ".git")) {
		t.Fatalf("CheckGit after the guest replaced .git: %v", err)
	}
	sb.Stop(context.Background())
}

// A worktree's workspace shares its repository's git directory: its
// hooks and config are read-only there too, the .git file cannot be
// pointed elsewhere, and what git writes for the worktree still works.
func TestGitWorktreeReadOnly(t *testing.T) {
	repo := gittest.Repo(t)
	wt := filepath.Join(filepath.Dir(repo), filepath.Base(repo)+"-wt")
	gittest.Run(t, repo, "worktree", "add", "-q", wt)
	t.Cleanup(func() { os.RemoveAll(wt) })
	common := filepath.Join(repo, ".git")
	before := gitattack.Files(t, repo)
	dotgit, _ := os.ReadFile(filepath.Join(wt, ".git"))
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Workspace: wt})
	out := run(t, sb, "sh", "-c", `cd `+wt+`
echo evil > `+common+`/hooks/post-checkout && echo hook-written
echo evil >> `+common+`/config && echo config-appended
echo 'gitdir: /tmp/evil' > .git && echo dotgit-rewritten
mv `+common+`/worktrees/`+filepath.Base(wt)+` /tmp/x && echo gitdir-moved
echo ref: refs/heads/other > `+common+`/worktrees/`+filepath.Base(wt)+`/HEAD && echo head-written
echo blob > `+common+`/objects/new && echo object-written`)
	if out != "head-written\nobject-written" {
		t.Errorf("the guest, in a worktree: %q; want only HEAD and an object written", out)
	}
	if after := gitattack.Files(t, repo); !maps.Equal(before, after) {
		t.Errorf("the repository's hooks or config changed:\nbefore %v\nafter  %v", before, after)
	}
	if b, _ := os.ReadFile(filepath.Join(wt, ".git")); string(b) != string(dotgit) {
		t.Errorf("the worktree's .git file is now %q, was %q", b, dotgit)
	}
}

// A submodule's git directory, under .git/modules, is protected like the
// workspace's own, and its checkout's .git file cannot be pointed
// elsewhere.
func TestGitSubmoduleReadOnly(t *testing.T) {
	sub := gittest.Repo(t)
	ws := gittest.Repo(t)
	gittest.Run(t, ws, "-c", "protocol.file.allow=always", "submodule", "add", "-q", sub, "lib")
	mod := filepath.Join(ws, ".git/modules/lib")
	config, _ := os.ReadFile(filepath.Join(mod, "config"))
	libGit, _ := os.ReadFile(filepath.Join(ws, "lib/.git"))
	h, ref := testHost(t)
	sb := started(t, h, Config{Image: ref, Workspace: ws})
	out := run(t, sb, "sh", "-c", `cd `+ws+`
echo evil > .git/modules/lib/hooks/post-checkout && echo hook-written
echo evil >> .git/modules/lib/config && echo config-appended
echo 'gitdir: /tmp/evil' > lib/.git && echo dotgit-rewritten
mv .git/modules/lib .git/modules/lib2 && echo moddir-moved
echo blob > .git/modules/lib/objects/new && echo object-written`)
	if out != "object-written" {
		t.Errorf("the guest, on a submodule: %q; want only an object written", out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "lib/.git")); string(b) != string(libGit) {
		t.Errorf("the submodule's .git file is now %q, was %q", b, libGit)
	}
	if b, _ := os.ReadFile(filepath.Join(mod, "config")); string(b) != string(config) {
		t.Errorf("the submodule's config is now %q, was %q", b, config)
	}
	if ents, _ := os.ReadDir(filepath.Join(mod, "hooks")); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "post-checkout" }) {
		t.Error("the guest wrote a hook of the submodule")
	}
}

// A fingerprint sees every change the guest can make to a protected path,
// opens nothing that could block, follows no symlink, and is bounded.
func TestFingerprint(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	makeTree(t, dir, map[string]string{".git/config": "[core]\n", ".git/hooks/a": "#!/bin/sh\n", "elsewhere/a": "#!/bin/sh\n"})
	g := filepath.Join(dir, ".git")
	paths := []vmm.Protect{{Path: g, Writable: true}, {Path: filepath.Join(g, "config")}, {Path: filepath.Join(g, "hooks")}}
	base, err := fingerprint(paths)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"same size, other content", func() { os.WriteFile(filepath.Join(g, "hooks/a"), []byte("#!/bin/zz\n"), 0o644) }, "hooks/a"},
		{"mode", func() { os.Chmod(filepath.Join(g, "hooks/a"), 0o755) }, "hooks/a"},
		{"new symlink", func() { os.Symlink("/bin/true", filepath.Join(g, "hooks/post-checkout")) }, "hooks/post-checkout"},
		{"FIFO", func() { syscall.Mkfifo(filepath.Join(g, "hooks/fifo"), 0o644) }, "hooks/fifo"},
		{"config", func() { os.WriteFile(filepath.Join(g, "config"), []byte("[core]\n\tfsmonitor = x\n"), 0o644) }, "config"},
		{"hooks replaced by a symlink", func() {
			os.RemoveAll(filepath.Join(g, "hooks"))
			os.Symlink("../elsewhere", filepath.Join(g, "hooks"))
		}, "hooks"},
		{".git replaced by a symlink to a copy", func() {
			os.Rename(g, filepath.Join(dir, "copy"))
			os.Symlink("copy", g)
		}, ".git"},
	}
	for _, st := range steps {
		st.change()
		now, err := fingerprint(paths)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := fingerprintDiff(base, now); !slices.Contains(diff, filepath.Join(g, st.want)) && !(st.want == ".git" && slices.Contains(diff, g)) {
			t.Errorf("%s: changes %q, want %s among them", st.name, diff, st.want)
		}
		base = now
	}

	many := filepath.Join(dir, "many")
	os.Mkdir(many, 0o755)
	for i := range maxFingerprintEntries + 1 {
		os.WriteFile(filepath.Join(many, strconv.Itoa(i)), nil, 0o644)
	}
	if _, err := fingerprint([]vmm.Protect{{Path: many}}); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("fingerprint of %d entries: %v, want a bound", maxFingerprintEntries+1, err)
	}
}
