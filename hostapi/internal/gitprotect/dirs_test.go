package gitprotect

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/confine"
)

func TestDirsOutside(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root := t.TempDir()
	root, _ = filepath.EvalSymlinks(root)
	repo := filepath.Join(root, "repo")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(repo, "init", "-q")
	git(repo, "commit", "-q", "--allow-empty", "-m", "init")
	git(repo, "worktree", "add", "-q", filepath.Join(root, "wt"))
	git(repo, "worktree", "add", "-q", filepath.Join(repo, "inner-wt"))
	// A submodule checked out alone: its git directory is in the
	// superproject's .git/modules, found through core.worktree.
	super := filepath.Join(root, "super")
	os.MkdirAll(super, 0o755)
	git(super, "init", "-q")
	git(super, "-c", "protocol.file.allow=always", "submodule", "add", "-q", repo, "sub")

	tests := []struct {
		name      string
		workspace string
		want      []string
	}{
		{"ordinary checkout", repo, nil},
		{"not a checkout", mkdir(t, filepath.Join(root, "plain")), nil},
		{"worktree outside the repository", filepath.Join(root, "wt"), []string{filepath.Join(repo, ".git")}},
		{"worktree inside the repository", filepath.Join(repo, "inner-wt"), []string{filepath.Join(repo, ".git")}},
		{"submodule", filepath.Join(super, "sub"), []string{filepath.Join(super, ".git", "modules", "sub")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DirsOutside(tt.workspace)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("DirsOutside(%s) = %v, %v; want %v", tt.workspace, got, err, tt.want)
			}
		})
	}

	// A .git file is in the workspace, which the guest writes: it must not
	// get other host directories shared at the next start.
	secret := filepath.Join(root, "secret")
	os.MkdirAll(secret, 0o755)
	// A fake worktree git directory in a place the guest controls, whose
	// commondir names another repository.
	planted := filepath.Join(root, "planted", "worktrees", "x")
	os.MkdirAll(planted, 0o755)
	hostile := []struct {
		name   string
		gitdir string
		setup  func(ws string)
	}{
		{"any directory", secret, nil},
		{"another repository's git directory", filepath.Join(repo, ".git"), nil},
		{"another worktree's git directory", filepath.Join(repo, ".git", "worktrees", "wt"), nil},
		{"a common directory that does not hold the worktree", planted, func(ws string) {
			os.WriteFile(filepath.Join(planted, "gitdir"), []byte(filepath.Join(ws, ".git")+"\n"), 0o644)
			os.WriteFile(filepath.Join(planted, "commondir"), []byte(secret+"\n"), 0o644)
		}},
	}
	for _, tt := range hostile {
		t.Run("refused: "+tt.name, func(t *testing.T) {
			ws, _ := filepath.EvalSymlinks(t.TempDir())
			if tt.setup != nil {
				tt.setup(ws)
			}
			os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+tt.gitdir+"\n"), 0o644)
			got, err := DirsOutside(ws)
			var h interface{ Hint() string }
			if err == nil || !errors.As(err, &h) || !strings.Contains(err.Error(), "not sharing it") {
				t.Fatalf("DirsOutside = %v, %v; want a refusal with a hint", got, err)
			}
		})
	}

	t.Run("broken .git file", func(t *testing.T) {
		ws, _ := filepath.EvalSymlinks(t.TempDir())
		if err := os.WriteFile(filepath.Join(ws, ".git"), []byte("nonsense\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := DirsOutside(ws); err == nil || !strings.Contains(err.Error(), "gitdir") {
			t.Fatalf("error = %v, want one about the missing gitdir line", err)
		}
	})
}

// A git directory found through the workspace's .git file belongs to it
// when its core.worktree names it as git reads that: the last value, with
// a comment after it dropped.
func TestDirsOutsideCoreWorktree(t *testing.T) {
	tests := []struct {
		name   string
		config func(ws, other string) string
		shared bool
	}{
		{"the last of two names this checkout", func(ws, other string) string {
			return "[core]\n\tworktree = " + other + "\n\tworktree = " + ws + "\n"
		}, true},
		{"the last of two names another checkout", func(ws, other string) string {
			return "[core]\n\tworktree = " + ws + "\n\tworktree = " + other + "\n"
		}, false},
		{"a comment after it", func(ws, other string) string {
			return "[core]\n\tworktree = " + ws + " ; the submodule's checkout\n"
		}, true},
		{"in another section", func(ws, other string) string {
			return "[core \"x\"]\n\tworktree = " + ws + "\n"
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := filepath.EvalSymlinks(t.TempDir())
			ws, other, mod := mkdir(t, filepath.Join(dir, "ws")), mkdir(t, filepath.Join(dir, "other")), mkdir(t, filepath.Join(dir, "mod"))
			os.WriteFile(filepath.Join(mod, "config"), []byte(tt.config(ws, other)), 0o644)
			os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+mod+"\n"), 0o644)
			got, err := DirsOutside(ws)
			switch {
			case tt.shared && (err != nil || !slices.Equal(got, []string{mod})):
				t.Errorf("DirsOutside = %v, %v; want %s shared", got, err, mod)
			case !tt.shared && (err == nil || !strings.Contains(err.Error(), "not sharing it")):
				t.Errorf("DirsOutside = %v, %v; want a refusal", got, err)
			}
		})
	}
}

func TestDedupeWithin(t *testing.T) {
	got := dedupeWithin([]string{"/a/b", "/a", "/c", "/a/b/c", "/c", "/ab"})
	want := []string{"/a", "/ab", "/c"}
	if !slices.Equal(got, want) {
		t.Fatalf("dedupeWithin = %v, want %v", got, want)
	}
}

// TestGitDirsOutsideBoundedReads: the guest writes the workspace's .git
// and, through the shared git directories, their records. A huge or
// blocking file there costs the host neither memory nor a hung create or
// start: it is refused (or ignored) at once.
func TestDirsOutsideBoundedReads(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	// A worktree git directory that leads back to the workspace, in a
	// common directory that holds it: only the record under test is bad.
	common := filepath.Join(base, "common")
	gitdir := filepath.Join(common, "worktrees", "w")
	mkdir(t, gitdir)
	if err := os.WriteFile(filepath.Join(common, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := func(p string) {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(2 << 30); err != nil {
			t.Fatal(err)
		}
	}
	fifo := func(p string) {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		setup   func(ws string) // makes the workspace's .git and gitdir's records
		wantErr error           // nil: ignored, no directory shared
	}{
		{"a 2 GiB sparse .git file", func(ws string) { sparse(filepath.Join(ws, ".git")) }, confine.ErrTooLarge},
		{"a FIFO .git", func(ws string) { fifo(filepath.Join(ws, ".git")) }, nil},
		{"a FIFO gitdir record", func(ws string) {
			os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o644)
			fifo(filepath.Join(gitdir, "gitdir"))
		}, confine.ErrNotRegular},
		{"a 2 GiB sparse config", func(ws string) {
			os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o644)
			sparse(filepath.Join(gitdir, "config"))
		}, confine.ErrTooLarge},
		{"a FIFO commondir", func(ws string) {
			os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o644)
			os.WriteFile(filepath.Join(gitdir, "gitdir"), []byte(filepath.Join(ws, ".git")+"\n"), 0o644)
			fifo(filepath.Join(gitdir, "commondir"))
		}, confine.ErrNotRegular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range []string{"gitdir", "config", "commondir"} {
				os.Remove(filepath.Join(gitdir, f))
			}
			ws := filepath.Join(base, strings.ReplaceAll(tt.name, " ", "-"))
			mkdir(t, ws)
			tt.setup(ws)
			type result struct {
				dirs []string
				err  error
			}
			done := make(chan result, 1)
			go func() {
				dirs, err := DirsOutside(ws)
				done <- result{dirs, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("DirsOutside still reading after 10s")
			}
			if len(r.dirs) != 0 {
				t.Errorf("DirsOutside shared %v", r.dirs)
			}
			if tt.wantErr == nil && r.err != nil || tt.wantErr != nil && !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("DirsOutside = %v, want %v", r.err, tt.wantErr)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
