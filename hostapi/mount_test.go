package hostapi

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

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/internal/confine"
)

func TestParseMount(t *testing.T) {
	tests := []struct {
		in      string
		want    Mount
		wantErr string
	}{
		{in: "/src", want: Mount{HostPath: "/src"}},
		{in: "/src:ro", want: Mount{HostPath: "/src", ReadOnly: true}},
		{in: "/src:rw", want: Mount{HostPath: "/src"}},
		{in: "/src:/dst", want: Mount{HostPath: "/src", GuestPath: "/dst"}},
		{in: "/src:/dst:ro", want: Mount{HostPath: "/src", GuestPath: "/dst", ReadOnly: true}},
		{in: "rel/dir:/dst", want: Mount{HostPath: "rel/dir", GuestPath: "/dst"}},
		{in: "/src:/dst:cached", want: Mount{HostPath: "/src", GuestPath: "/dst", Cached: true}},
		{in: "/src:cached", want: Mount{HostPath: "/src", Cached: true}},
		{in: "/src:/dst:ro,cached", want: Mount{HostPath: "/src", GuestPath: "/dst", ReadOnly: true, Cached: true}},
		{in: "/src:/dst:cached,consistent", want: Mount{HostPath: "/src", GuestPath: "/dst"}}, // the last wins
		{in: "/src:/dst:consistent", want: Mount{HostPath: "/src", GuestPath: "/dst"}},
		{in: "/src:/dst:ro,delegated", wantErr: "want HOST[:GUEST][:ro]"},
		{in: "", wantErr: "empty host path"},
		{in: ":/dst", wantErr: "empty host path"},
		{in: "/src:", wantErr: "empty guest path"},
		{in: "/a:/b:/c", wantErr: "want HOST[:GUEST][:ro]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseMount(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseMount(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMount(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			// String writes what ParseMount reads back.
			if back, err := ParseMount(got.String()); err != nil || back != got {
				t.Errorf("ParseMount(%q) (String of %+v) = %+v, %v", got.String(), got, back, err)
			}
		})
	}
}

func TestResolveMounts(t *testing.T) {
	root := t.TempDir()
	root, _ = filepath.EvalSymlinks(root)
	a := filepath.Join(root, "a")
	b := filepath.Join(root, "b")
	file := filepath.Join(root, "file")
	link := filepath.Join(root, "link")
	for _, d := range []string{a, b, filepath.Join(a, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(a, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      []Mount
		want    []Mount
		wantErr string
	}{
		{name: "same path by default", in: []Mount{{HostPath: a}}, want: []Mount{{HostPath: a, GuestPath: a}}},
		{name: "symlink resolved", in: []Mount{{HostPath: link, GuestPath: "/w/"}}, want: []Mount{{HostPath: a, GuestPath: "/w"}}},
		{name: "read-only kept", in: []Mount{{HostPath: a, ReadOnly: true}, {HostPath: b, GuestPath: "/b"}}, want: []Mount{{HostPath: a, GuestPath: a, ReadOnly: true}, {HostPath: b, GuestPath: "/b"}}},
		{name: "missing host dir", in: []Mount{{HostPath: filepath.Join(root, "nope")}}, wantErr: "no such file"},
		{name: "file", in: []Mount{{HostPath: file}}, wantErr: "not a directory"},
		{name: "relative guest", in: []Mount{{HostPath: a, GuestPath: "w"}}, wantErr: "not absolute"},
		{name: "root", in: []Mount{{HostPath: a, GuestPath: "/"}}, wantErr: "shadow /"},
		{name: "proc", in: []Mount{{HostPath: a, GuestPath: "/proc"}}, wantErr: "shadow /proc"},
		{name: "under sys", in: []Mount{{HostPath: a, GuestPath: "/sys/fs/x"}}, wantErr: "shadow /sys"},
		{name: "dev via dots", in: []Mount{{HostPath: a, GuestPath: "/tmp/../dev"}}, wantErr: "shadow /dev"},
		{name: "krunbox dir", in: []Mount{{HostPath: a, GuestPath: protocol.GuestDir + "/x"}}, wantErr: "shadow " + protocol.GuestDir},
		{name: "devices is fine", in: []Mount{{HostPath: a, GuestPath: "/devices"}}, want: []Mount{{HostPath: a, GuestPath: "/devices"}}},
		{name: "duplicate", in: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/x"}}, wantErr: "overlap"},
		{name: "nested", in: []Mount{{HostPath: a}, {HostPath: filepath.Join(a, "sub")}}, wantErr: "overlap"},
		{name: "nested other order", in: []Mount{{HostPath: b, GuestPath: "/x/y"}, {HostPath: a, GuestPath: "/x"}}, wantErr: "overlap"},
		{name: "siblings with common prefix", in: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/xy"}}, want: []Mount{{HostPath: a, GuestPath: "/x"}, {HostPath: b, GuestPath: "/xy"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveMounts(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidMount) {
					t.Fatalf("error = %v, want an invalid-mount error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("resolveMounts = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestMountTagFitsLibkrun(t *testing.T) {
	if n := len(mountTag(1 << 20)); n > 36 {
		t.Fatalf("tag of %d bytes; libkrun allows 36", n)
	}
	if mountTag(0) == mountTag(1) {
		t.Fatal("tags are not distinct")
	}
}

func TestGitDirsOutside(t *testing.T) {
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
			got, err := gitDirsOutside(tt.workspace)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("gitDirsOutside(%s) = %v, %v; want %v", tt.workspace, got, err, tt.want)
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
			got, err := gitDirsOutside(ws)
			var h interface{ Hint() string }
			if err == nil || !errors.As(err, &h) || !strings.Contains(err.Error(), "not sharing it") {
				t.Fatalf("gitDirsOutside = %v, %v; want a refusal with a hint", got, err)
			}
		})
	}

	t.Run("broken .git file", func(t *testing.T) {
		ws, _ := filepath.EvalSymlinks(t.TempDir())
		if err := os.WriteFile(filepath.Join(ws, ".git"), []byte("nonsense\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := gitDirsOutside(ws); err == nil || !strings.Contains(err.Error(), "gitdir") {
			t.Fatalf("error = %v, want one about the missing gitdir line", err)
		}
	})
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
func TestGitDirsOutsideBoundedReads(t *testing.T) {
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
				dirs, err := gitDirsOutside(ws)
				done <- result{dirs, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("gitDirsOutside still reading after 10s")
			}
			if len(r.dirs) != 0 {
				t.Errorf("gitDirsOutside shared %v", r.dirs)
			}
			if tt.wantErr == nil && r.err != nil || tt.wantErr != nil && !errors.Is(r.err, tt.wantErr) {
				t.Fatalf("gitDirsOutside = %v, want %v", r.err, tt.wantErr)
			}
		})
	}
}

// TestRefuseExposureResolvesMissingDirs: krunbox's directories may not
// exist yet (the configuration directory before its first use) behind a
// symlink on the way (~/.config -> /elsewhere/config), or be a dangling
// symlink; a share holding where they would be made is refused all the
// same, or the guest would write krunbox's and the pi extension's user
// configuration (fallback = "host", trusted_projects) there.
func TestRefuseExposureResolvesMissingDirs(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	elsewhere := mkdir(t, filepath.Join(base, "elsewhere"))
	mkdir(t, filepath.Join(elsewhere, "config"))
	other := mkdir(t, filepath.Join(elsewhere, "other"))
	far := mkdir(t, filepath.Join(base, "far"))
	home := mkdir(t, filepath.Join(base, "home"))
	mkdir(t, filepath.Join(home, ".local", "state"))
	for _, l := range [][2]string{
		{filepath.Join(elsewhere, "config"), filepath.Join(home, ".config")},
		{filepath.Join(far, "kb"), filepath.Join(home, ".local", "state", "krunbox")}, // dangling
		{filepath.Join(base, "loop2"), filepath.Join(base, "loop1")},
		{filepath.Join(base, "loop1"), filepath.Join(base, "loop2")},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	own := []ownDir{
		{"configuration directory", filepath.Join(home, ".config", "krunbox")},
		{"state directory", filepath.Join(home, ".local", "state", "krunbox")},
		{"image cache", filepath.Join(base, "loop1", "krunbox")},
	}
	tests := []struct {
		name  string
		mount string
		what  string // "": accepted
	}{
		{"the target of the symlink on the way", elsewhere, "configuration directory"},
		{"the directory it would be made in", filepath.Join(elsewhere, "config"), "configuration directory"},
		{"where a dangling symlink points", far, "state directory"},
		{"the home holding them", home, "configuration directory"},
		{"a sibling", other, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := refuseExposure([]Mount{{HostPath: tt.mount, GuestPath: "/m"}}, own)
			if tt.what == "" {
				if err != nil {
					t.Fatalf("refuseExposure(%s) = %v, want nil", tt.mount, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.what) {
				t.Fatalf("refuseExposure(%s) = %v, want a refusal naming the %s", tt.mount, err, tt.what)
			}
		})
	}
}

// TestOwnDirsHoldWhatThePiExtensionTrusts: the pi extension trusts its
// user configuration file and pi's agent directory (trust.json, pi's
// settings and extensions); no share may hold them.
func TestOwnDirsHoldWhatThePiExtensionTrusts(t *testing.T) {
	base, _ := filepath.EvalSymlinks(t.TempDir())
	h, err := NewHost(WithDirs(Dirs{State: filepath.Join(base, "s"), Cache: filepath.Join(base, "c"), Config: filepath.Join(base, "k")}))
	if err != nil {
		t.Fatal(err)
	}
	agent := mkdir(t, filepath.Join(base, "pi", "agent"))
	conf := filepath.Join(mkdir(t, filepath.Join(base, "piconf")), "pi.toml")
	t.Setenv("PI_CODING_AGENT_DIR", agent)
	t.Setenv("KRUNBOX_PI_CONFIG", conf)
	for _, tt := range []struct{ mount, what string }{
		{filepath.Join(base, "pi"), "pi agent directory"},
		{filepath.Dir(conf), "pi extension's configuration file"},
	} {
		if err := refuseExposure([]Mount{{HostPath: tt.mount}}, h.ownDirs()); !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), tt.what) {
			t.Errorf("refuseExposure(%s) = %v, want a refusal naming the %s", tt.mount, err, tt.what)
		}
	}
	t.Setenv("PI_CODING_AGENT_DIR", "")
	t.Setenv("HOME", base)
	if err := refuseExposure([]Mount{{HostPath: filepath.Join(base, ".pi")}}, h.ownDirs()); !errors.Is(err, ErrInvalidMount) {
		t.Errorf("a share of ~/.pi: %v, want a refusal", err)
	}
}
