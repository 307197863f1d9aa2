package isolate

import (
	"bytes"
	"compress/zlib"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/krunbox/krunbox/internal/testutil/gittest"
	"github.com/krunbox/krunbox/internal/testutil/poll"
)

// The checkout is made by the host's git or by go-git (where the host has
// no git), alike; nothing of the user's repository runs.
func TestPrepare(t *testing.T) {
	for _, git := range []string{"git", ""} {
		t.Run("git="+git, func(t *testing.T) {
			defer func(g string) { gitBinary = g }(gitBinary)
			gitBinary = git
			testPrepare(t)
		})
	}
}

func testPrepare(t *testing.T) {
	repo, marker := gittest.Hostile(t)
	head := gittest.Out(t, repo, "rev-parse", "HEAD")
	ck := newCheckout(t, repo, "iso")
	if r := ck.Record; r.Base != head || r.Branch != "krunbox/iso" || r.Project != repo {
		t.Fatalf("Record = %+v, want base %s", r, head)
	}
	co := ck.path(WorkspaceDir)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the user's repository's hooks, fsmonitor or filter ran on the host")
	}
	for name, want := range map[string]string{"f": "x\n", "dir/g": "g\n", ".gitignore": "ignored\n"} {
		if b, err := os.ReadFile(filepath.Join(co, name)); err != nil || string(b) != want {
			t.Errorf("checkout's %s = %q, %v; want %q", name, b, err, want)
		}
	}
	if l, err := os.Readlink(filepath.Join(co, "link")); err != nil || l != "/etc/passwd" {
		t.Errorf("checkout's link = %q, %v", l, err)
	}
	for _, name := range []string{".env", "ignored"} {
		if _, err := os.Lstat(filepath.Join(co, name)); err == nil {
			t.Errorf("the checkout holds %s, which is not committed", name)
		}
	}
	if got := sandboxGit(t, ck, "symbolic-ref", "HEAD"); got != "refs/heads/krunbox/iso" {
		t.Errorf("checkout's HEAD = %q", got)
	}
	// git agrees that the checkout is HEAD, its index up to date.
	if got := sandboxGit(t, ck, "status", "--porcelain"); got != "" {
		t.Errorf("git status in the checkout: %q", got)
	}
	if ch, err := ck.Changes(t.Context(), nil); err != nil || len(ch) != 0 {
		t.Errorf("Changes of a fresh checkout = %v, %v", ch, err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("git status in the checkout ran something")
	}
}

// newCheckout makes the isolated checkout of the user's checkout repo
// for the sandbox name, as hostapi's Create does, in a directory of the
// test's.
func newCheckout(t testing.TB, repo, name string) *Checkout {
	t.Helper()
	project, err := filepath.EvalSymlinks(repo)
	if err != nil {
		t.Fatal(err)
	}
	gitDir, common, err := FindRepo(project)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{Project: project, GitDir: gitDir, CommonDir: common, Branch: "krunbox/" + name}
	dir := t.TempDir()
	if err := Prepare(t.Context(), dir, rec); err != nil {
		t.Fatal(err)
	}
	return &Checkout{Name: name, Dir: dir, Workspace: repo, Record: rec}
}

func TestDiff(t *testing.T) {
	repo, marker := gittest.Hostile(t)
	ck := newCheckout(t, repo, "d")
	co := ck.path(WorkspaceDir)
	if ch, err := ck.Changes(t.Context(), nil); err != nil || len(ch) != 0 {
		t.Fatalf("Changes of a fresh checkout = %v, %v; want none", ch, err)
	}
	// What the guest does: change, add, delete, add an ignored file.
	os.WriteFile(filepath.Join(co, "f"), []byte("y\n"), 0o644)
	os.WriteFile(filepath.Join(co, "new"), []byte("n\n"), 0o644)
	os.WriteFile(filepath.Join(co, "ignored"), []byte("i\n"), 0o644)
	os.Remove(filepath.Join(co, "dir/g"))
	ch, err := ck.Changes(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range ch {
		got = append(got, c.Path)
	}
	if strings.Join(got, " ") != "dir/g f new" {
		t.Errorf("Changes = %v, want dir/g f new", got)
	}
	var b strings.Builder
	if err := ck.Diff(t.Context(), &b, []string{repo + "/f"}, false); err != nil {
		t.Fatal(err)
	}
	if want := "diff --git a/f b/f\n"; !strings.HasPrefix(b.String(), want) || !strings.Contains(b.String(), "\n-x\n+y\n") {
		t.Errorf("Diff f:\n%s", b.String())
	}
	b.Reset()
	if err := ck.Diff(t.Context(), &b, nil, true); err != nil {
		t.Fatal(err)
	}
	if want := " dir/g | 1 -\n f     | 2 +-\n new   | 1 +\n 3 files changed, 2 insertions(+), 2 deletions(-)\n"; b.String() != want {
		t.Errorf("Diff --stat:\n%s\nwant\n%s", b.String(), want)
	}
	for _, p := range []string{"../x", "/etc", ".git/config"} {
		if err := ck.Diff(t.Context(), io.Discard, []string{p}, false); err == nil {
			t.Errorf("Diff %s: no error", p)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("something ran on the host")
	}
}

// sandboxGit runs git in the sandbox's checkout as the guest would (with
// the base objects where the host has them), for tests.
func sandboxGit(t *testing.T, ck *Checkout, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append(gittest.Safe, args...)...)
	cmd.Dir = ck.path(WorkspaceDir)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+cmd.Dir, "GIT_AUTHOR_NAME=g", "GIT_AUTHOR_EMAIL=g@g", "GIT_COMMITTER_NAME=g", "GIT_COMMITTER_EMAIL=g@g",
		"GIT_ALTERNATE_OBJECT_DIRECTORIES="+ck.path(BaseDir))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v\n%s%s", args, err, out, stderr.Bytes())
	}
	return strings.TrimSpace(string(out))
}

// commitBlob commits the file name, of content, in the sandbox and
// returns its blob.
func commitBlob(t *testing.T, ck *Checkout, name, content string) string {
	t.Helper()
	os.WriteFile(filepath.Join(ck.path(WorkspaceDir), name), []byte(content), 0o644)
	sandboxGit(t, ck, "add", name)
	sandboxGit(t, ck, "commit", "-qm", name)
	return sandboxGit(t, ck, "rev-parse", "HEAD:"+name)
}

// userState is what Land must not change in the user's repository: its
// refs (but krunbox/*), HEAD, index and files.
func userState(t *testing.T, repo string) string {
	t.Helper()
	var refs []string
	for _, l := range strings.Split(gittest.Out(t, repo, "for-each-ref"), "\n") {
		if !strings.Contains(l, "refs/heads/krunbox/") {
			refs = append(refs, l)
		}
	}
	return strings.Join(refs, "\n") + "\n" + gittest.Out(t, repo, "rev-parse", "HEAD") + "\n" + gittest.Out(t, repo, "status", "--porcelain", "--ignored")
}

func TestLand(t *testing.T) {
	repo, marker := gittest.Hostile(t)
	before := userState(t, repo)
	for _, squash := range []bool{false, true} {
		name := "land"
		if squash {
			name = "squash"
		}
		t.Run(name, func(t *testing.T) {
			ck := newCheckout(t, repo, name)
			co := ck.path(WorkspaceDir)
			if l, err := ck.Land(t.Context(), squash); err != nil || !l.Unchanged {
				t.Fatalf("Land of no work = %+v, %v; want unchanged", l, err)
			}
			if u, err := ck.Unlanded(t.Context()); err != nil || u {
				t.Fatalf("Unlanded of no work = %v, %v", u, err)
			}
			os.WriteFile(filepath.Join(co, "f"), []byte("committed\n"), 0o644)
			sandboxGit(t, ck, "commit", "-qam", "in the sandbox")
			os.WriteFile(filepath.Join(co, "f"), []byte("uncommitted\n"), 0o644)
			os.MkdirAll(filepath.Join(co, "sub/deep"), 0o755)
			os.WriteFile(filepath.Join(co, "sub/deep/n"), []byte("new\n"), 0o755)
			if u, err := ck.Unlanded(t.Context()); err != nil || !u {
				t.Fatalf("Unlanded with work = %v, %v", u, err)
			}
			l, err := ck.Land(t.Context(), squash)
			if err != nil {
				t.Fatal(err)
			}
			wantCommits := 2
			if squash {
				wantCommits = 1
			}
			if l.Branch != "krunbox/"+name || l.Commits != wantCommits || l.Unchanged {
				t.Errorf("Land = %+v", l)
			}
			br := "krunbox/" + name
			if got := gittest.Out(t, repo, "rev-parse", br); got != l.Commit {
				t.Errorf("branch %s = %s, want %s", br, got, l.Commit)
			}
			if got := gittest.Out(t, repo, "show", br+":f"); got != "uncommitted" {
				t.Errorf("f on %s = %q", br, got)
			}
			if got := gittest.Out(t, repo, "ls-tree", br, "sub/deep/n"); !strings.HasPrefix(got, "100755 blob") {
				t.Errorf("sub/deep/n on %s: %q", br, got)
			}
			if got := gittest.Out(t, repo, "rev-list", "--count", "HEAD.."+br); got != fmt.Sprint(wantCommits) {
				t.Errorf("commits on %s: %s, want %d", br, got, wantCommits)
			}
			gittest.Out(t, repo, "fsck", "--strict", "--no-dangling")
			if after := userState(t, repo); after != before {
				t.Errorf("the user's repository changed beyond the branch:\n%s\nthen\n%s", before, after)
			}
			if u, err := ck.Unlanded(t.Context()); err != nil || u {
				t.Errorf("Unlanded after Land = %v, %v", u, err)
			}
			// Landing the same work again changes nothing, in another
			// second too (a commit made anew would have another time).
			landed := time.Now().Unix()
			poll.Until(t, "the next second", 3*time.Second, func() bool { return time.Now().Unix() > landed })
			if l2, err := ck.Land(t.Context(), squash); err != nil || l2.Commit != l.Commit || !l2.Unchanged && !squash {
				t.Errorf("Land again = %+v, %v; want unchanged, %s", l2, err, l.Commit)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("something ran on the host")
	}
}

// objectFiles lists the files of repo's object store.
func objectFiles(t *testing.T, repo string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(filepath.Join(repo, ".git/objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// refused is what Land must leave of the user's repository when it
// refuses: its state (userState) and the files of its object store.
type refused struct {
	state   string
	objects []string
}

func snapshot(t *testing.T, repo string) refused {
	t.Helper()
	return refused{userState(t, repo), objectFiles(t, repo)}
}

// unchanged fails the test when the user's repository repo changed since
// was, or holds branch.
func (was refused) unchanged(t *testing.T, repo, branch string) {
	t.Helper()
	if after := userState(t, repo); after != was.state {
		t.Errorf("the user's repository changed:\n%s\nthen\n%s", was.state, after)
	}
	if after := objectFiles(t, repo); !slices.Equal(after, was.objects) {
		t.Errorf("objects were written into the user's repository: %d files, then %d", len(was.objects), len(after))
	}
	if out, _ := exec.Command("git", "-C", repo, "rev-parse", "--verify", "-q", branch).Output(); len(out) > 0 {
		t.Errorf("branch %s made", branch)
	}
}

// looseObject writes a loose object file for name, with the given
// header and content, into the sandbox's repository.
func looseObject(t *testing.T, ck *Checkout, name, header string, content []byte) {
	t.Helper()
	var b bytes.Buffer
	z := zlib.NewWriter(&b)
	z.Write(append([]byte(header+"\x00"), content...))
	z.Close()
	p := filepath.Join(ck.path(WorkspaceDir), ".git/objects", name[:2], name[2:])
	os.MkdirAll(filepath.Dir(p), 0o755)
	os.Remove(p)
	if err := os.WriteFile(p, b.Bytes(), 0o444); err != nil {
		t.Fatal(err)
	}
}

// What the guest can do to its repository makes Diff and Land refuse,
// with the user's repository unchanged and nothing run on the host.
func TestHostileRepository(t *testing.T) {
	repo, marker := gittest.Hostile(t)
	other := gittest.Repo(t) // a repository of the host's the guest must not reach
	os.WriteFile(filepath.Join(other, "secret"), []byte("the host's secret\n"), 0o644)
	otherBlob := gittest.Out(t, other, "hash-object", "-w", "secret")
	tests := []struct {
		name    string
		attack  func(t *testing.T, ck *Checkout)
		wantErr string // of Land; "" when Land succeeds, running nothing
		diffErr bool
	}{
		{"hooks, fsmonitor, filters", func(t *testing.T, ck *Checkout) {
			co := ck.path(WorkspaceDir)
			evil := "touch " + marker
			for _, hk := range []string{"pre-commit", "post-commit", "post-checkout", "reference-transaction", "pre-auto-gc"} {
				os.WriteFile(filepath.Join(co, ".git/hooks", hk), []byte("#!/bin/sh\n"+evil+"\n"), 0o755)
			}
			f, _ := os.OpenFile(filepath.Join(co, ".git/config"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("[core]\n\tfsmonitor = " + evil + "\n\tsshCommand = " + evil + "\n[filter \"x\"]\n\tclean = " + evil + "\n\trequired = true\n[uploadpack]\n\tpackObjectsHook = " + evil + "\n[include]\n\tpath = /etc/passwd\n")
			f.Close()
			os.WriteFile(filepath.Join(co, ".gitattributes"), []byte("* filter=x diff=x\n"), 0o644)
		}, "", false},
		{"alternates to a host repository", func(t *testing.T, ck *Checkout) {
			os.WriteFile(filepath.Join(ck.path(WorkspaceDir), ".git/objects/info/alternates"), []byte(filepath.Join(other, ".git/objects")+"\n"), 0o644)
			// The index names the other repository's blob, unchanged.
			cmd := exec.Command("git", "update-index", "--add", "--cacheinfo", "100644,"+otherBlob+",stolen")
			cmd.Dir = ck.path(WorkspaceDir)
			cmd.Env = append(os.Environ(), "GIT_ALTERNATE_OBJECT_DIRECTORIES="+filepath.Join(other, ".git/objects"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			sandboxGit(t, ck, "-c", "core.alternateRefsCommand=true", "commit", "-qm", "steal")
		}, "not found", false},
		{"corrupt object", func(t *testing.T, ck *Checkout) {
			blob := commitBlob(t, ck, "c", "content\n")
			looseObject(t, ck, blob, "blob 6", []byte("bogus\n"))
		}, "corrupt", true},
		{"oversize object", func(t *testing.T, ck *Checkout) {
			blob := commitBlob(t, ck, "c", "content\n")
			looseObject(t, ck, blob, "blob 1099511627776", []byte("x"))
		}, "too large", true},
		{"a zlib bomb", func(t *testing.T, ck *Checkout) {
			// Says 6 bytes, inflates to 300 MiB: read no further than 6.
			blob := commitBlob(t, ck, "c", "bomb!\n")
			looseObject(t, ck, blob, "blob 6", make([]byte, 300<<20))
		}, "corrupt", true},
		{"a tree naming .git", func(t *testing.T, ck *Checkout) {
			blob := sandboxGit(t, ck, "hash-object", "-w", "f")
			var b bytes.Buffer
			b.WriteString("100644 .GIT\x00")
			b.Write(mustHex(t, blob))
			cmd := exec.Command("git", "hash-object", "-w", "-t", "tree", "--literally", "--stdin")
			cmd.Dir = ck.path(WorkspaceDir)
			cmd.Env = append(os.Environ(), "GIT_ALTERNATE_OBJECT_DIRECTORIES="+ck.path(BaseDir))
			cmd.Stdin = &b
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			c := sandboxGit(t, ck, "commit-tree", "-m", "evil", "-p", "HEAD", strings.TrimSpace(string(out)))
			sandboxGit(t, ck, "update-ref", "HEAD", c)
		}, "refuses", false},
		{".git a symlink to the user's", func(t *testing.T, ck *Checkout) {
			co := ck.path(WorkspaceDir)
			os.RemoveAll(filepath.Join(co, ".git"))
			os.Symlink(filepath.Join(repo, ".git"), filepath.Join(co, ".git"))
		}, "the repository of", true},
		{".git a file naming the user's", func(t *testing.T, ck *Checkout) {
			co := ck.path(WorkspaceDir)
			os.RemoveAll(filepath.Join(co, ".git"))
			os.WriteFile(filepath.Join(co, ".git"), []byte("gitdir: "+filepath.Join(repo, ".git")+"\n"), 0o644)
		}, "the repository of", true},
		{"HEAD a symlink", func(t *testing.T, ck *Checkout) {
			p := filepath.Join(ck.path(WorkspaceDir), ".git/HEAD")
			os.Remove(p)
			os.Symlink(filepath.Join(repo, ".git/HEAD"), p)
		}, "HEAD", true},
		{"index a FIFO", func(t *testing.T, ck *Checkout) {
			p := filepath.Join(ck.path(WorkspaceDir), ".git/index")
			os.Remove(p)
			syscall.Mkfifo(p, 0o644)
		}, "not a regular file", true},
		{"index garbage", func(t *testing.T, ck *Checkout) {
			p := filepath.Join(ck.path(WorkspaceDir), ".git/index")
			os.Remove(p)
			os.WriteFile(p, append([]byte("DIRC\x00\x00\x00\x02\x7f\xff\xff\xff"), bytes.Repeat([]byte{0xff}, 4096)...), 0o644)
		}, "index", true},
		{"a work file a FIFO", func(t *testing.T, ck *Checkout) {
			p := filepath.Join(ck.path(WorkspaceDir), "f")
			os.Remove(p)
			syscall.Mkfifo(p, 0o644)
		}, "", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ck := newCheckout(t, repo, fmt.Sprintf("h%d", i))
			os.WriteFile(filepath.Join(ck.path(WorkspaceDir), "work"), []byte("w\n"), 0o644)
			tt.attack(t, ck)
			before := snapshot(t, repo)
			err := ck.Diff(t.Context(), io.Discard, nil, false)
			if (err != nil) != tt.diffErr {
				t.Errorf("Diff: %v, want an error: %v", err, tt.diffErr)
			}
			l, err := ck.Land(t.Context(), false)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Land: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Land = %+v, %v; want an error with %q", l, err, tt.wantErr)
			case tt.wantErr != "":
				before.unchanged(t, repo, ck.Record.Branch)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("something the guest wrote ran on the host")
			}
		})
	}
}

func mustHex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A user's repository whose HEAD names a path git refuses (.GIT, a
// case variant of .git) is refused with a clear error, by the host's git
// and by go-git alike, and .GIT is not checked out.
func TestPrepareRefusesBadTree(t *testing.T) {
	repo := gittest.BadTree(t)
	gitDir := filepath.Join(repo, ".git")
	for _, git := range []string{"git", ""} {
		t.Run("git="+git, func(t *testing.T) {
			defer func(g string) { gitBinary = g }(gitBinary)
			gitBinary = git
			dir := t.TempDir()
			err := Prepare(t.Context(), dir, &Record{Project: repo, GitDir: gitDir, CommonDir: gitDir, Branch: "krunbox/bad"})
			if err == nil || !strings.Contains(err.Error(), ".GIT") {
				t.Errorf("Prepare of a HEAD naming .GIT: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, WorkspaceDir, ".GIT")); err == nil {
				t.Error(".GIT was checked out")
			}
		})
	}
}

// Symlinks the guest plants in its checkout are read as symlinks: Diff
// and Land take the link, never what it points to; Export copies neither
// it nor anything through it.
func TestSymlinks(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	ck := newCheckout(t, repo, "links")
	co := ck.path(WorkspaceDir)
	os.RemoveAll(filepath.Join(co, "dir"))
	os.Symlink("/etc", filepath.Join(co, "dir"))           // a directory replaced by a link out
	os.Symlink("/etc/passwd", filepath.Join(co, "passwd")) // a new link out
	var b strings.Builder
	if err := ck.Diff(t.Context(), &b, nil, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "root:") {
		t.Errorf("Diff read through a symlink:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "+/etc/passwd") || !strings.Contains(b.String(), "deleted file mode 100644") {
		t.Errorf("Diff:\n%s", b.String())
	}
	if _, err := ck.Land(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if got := gittest.Out(t, repo, "cat-file", "-p", "krunbox/links:passwd"); got != "/etc/passwd" {
		t.Errorf("passwd on the branch: %q, want the link's target", got)
	}
	if got := gittest.Out(t, repo, "ls-tree", "krunbox/links", "dir"); !strings.HasPrefix(got, "120000 blob") {
		t.Errorf("dir on the branch: %q, want a symlink", got)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := ck.Export(t.Context(), dst, []string{"passwd", "f"}); err == nil || !strings.Contains(err.Error(), "passwd") {
		t.Errorf("Export of a symlink: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "passwd")); err == nil {
		t.Error("the symlink was exported")
	}
	if err := ck.Export(t.Context(), filepath.Join(t.TempDir(), "out2"), []string{"dir/passwd"}); err == nil {
		t.Error("Export through a symlinked directory: no error")
	}
}

// A worktree of a repository is isolated from its own HEAD, and lands in
// its repository.
func TestFromAWorktree(t *testing.T) {
	repo := gittest.Repo(t)
	wt := filepath.Join(t.TempDir(), "wt")
	gittest.Out(t, repo, "worktree", "add", "-q", "-b", "side", wt)
	os.WriteFile(filepath.Join(wt, "f"), []byte("side\n"), 0o644)
	gittest.Out(t, wt, "commit", "-qam", "side")
	for _, git := range []string{"git", ""} {
		t.Run("git="+git, func(t *testing.T) {
			defer func(g string) { gitBinary = g }(gitBinary)
			gitBinary = git
			ck := newCheckout(t, wt, "wt"+git)
			if ck.Record.Base != gittest.Out(t, wt, "rev-parse", "HEAD") {
				t.Errorf("base %s, want the worktree's HEAD", ck.Record.Base)
			}
			co := ck.path(WorkspaceDir)
			if b, _ := os.ReadFile(filepath.Join(co, "f")); string(b) != "side\n" {
				t.Errorf("f = %q", b)
			}
			os.WriteFile(filepath.Join(co, "g"), []byte("g\n"), 0o644)
			if _, err := ck.Land(t.Context(), false); err != nil {
				t.Fatal(err)
			}
			if got := gittest.Out(t, repo, "show", "krunbox/wt"+git+":g"); got != "g" {
				t.Errorf("g on the branch, from the main checkout: %q", got)
			}
		})
	}
}
