package hostapi

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/krunbox/krunbox/hostapi/internal/gitprotect"
	"github.com/krunbox/krunbox/hostapi/internal/isolate"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/testutil/gitattack"
	"github.com/krunbox/krunbox/internal/testutil/gittest"
)

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

// The git protection covers the sandbox's own read-write shares: not a
// read-only one (the guest cannot write it), nor an isolated checkout's
// (the host's git never runs there).
func TestGitShares(t *testing.T) {
	mounts := []Mount{{HostPath: "/state/workspace"}, {HostPath: "/state/base/objects", ReadOnly: true}, {HostPath: "/ws"}, {HostPath: "/ro", ReadOnly: true}, {HostPath: "/rw"}}
	for _, tt := range []struct {
		name string
		rec  *record
		want []string
	}{
		{"isolated", &record{Mounts: mounts, Isolate: &isolate.Record{}}, []string{"/ws", "/rw"}},
		{"not isolated", &record{Mounts: mounts}, []string{"/state/workspace", "/ws", "/rw"}},
	} {
		sb := &Sandbox{rec: tt.rec}
		if got := sb.gitShares(); !slices.Equal(got, tt.want) {
			t.Errorf("%s: gitShares = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// What the protection records is what GitProtection reports.
func TestGitProtectionModes(t *testing.T) {
	for sdk, internal := range map[GitProtectionMode]gitprotect.Mode{GitMounts: gitprotect.ModeMounts, GitFingerprint: gitprotect.ModeFingerprint, GitOff: gitprotect.ModeOff} {
		if string(sdk) != string(internal) {
			t.Errorf("GitProtectionMode %q is recorded as %q", sdk, internal)
		}
	}
}
