package isolate

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sizes of the repository of the isolated-workspace benchmarks.
const (
	benchFiles   = 10000
	benchCommits = 85
	benchChanged = 250     // files each commit rewrites
	benchBlob    = 8 << 10 // bytes of a rewritten file, random
)

var benchRepoOnce struct {
	sync.Once
	dir string
	err error
}

// benchRepo returns a git repository of benchFiles files whose history
// holds about 100 MB of objects (benchCommits commits rewriting
// benchChanged files with random content each), made with git
// fast-import and packed as git gc leaves a repository, once, in the
// temporary directory, where later runs find it.
func benchRepo(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	benchRepoOnce.Do(func() {
		// Kept for the next run: making it takes a minute.
		dir := filepath.Join(os.TempDir(), "krunbox-bench-isolate-repo-1")
		benchRepoOnce.dir = dir
		if _, err := os.Stat(filepath.Join(dir, ".git", "krunbox-bench-done")); err == nil {
			return
		}
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			benchRepoOnce.err = err
			return
		}
		if benchRepoOnce.err = makeBenchRepo(dir); benchRepoOnce.err == nil {
			benchRepoOnce.err = os.WriteFile(filepath.Join(dir, ".git", "krunbox-bench-done"), nil, 0o644)
		}
	})
	if benchRepoOnce.err != nil {
		b.Fatal(benchRepoOnce.err)
	}
	return benchRepoOnce.dir
}

func makeBenchRepo(dir string) error {
	git := func(stdin io.Reader, args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Stdin = stdin
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v: %s", args, err, out)
		}
		return nil
	}
	if err := git(nil, "init", "-q", "-b", "main"); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		rnd := rand.New(rand.NewPCG(1, 2))
		buf := make([]byte, benchBlob)
		for c := 0; c < benchCommits; c++ {
			fmt.Fprintf(w, "commit refs/heads/main\ncommitter b <b@b> %d +0000\ndata 2\nc%d", 1700000000+c, c%10)
			fmt.Fprintln(w)
			if c == 0 {
				for i := 0; i < benchFiles; i++ {
					content := fmt.Sprintf("file %d\n%s\n", i, strings.Repeat("line of text\n", 100))
					fmt.Fprintf(w, "M 644 inline %s\ndata %d\n%s\n", benchPath(i), len(content), content)
				}
				continue
			}
			for j := 0; j < benchChanged; j++ {
				for k := range buf {
					buf[k] = 'a' + byte(rnd.IntN(26))
				}
				i := rnd.IntN(benchFiles)
				fmt.Fprintf(w, "M 644 inline %s\ndata %d\n%s\n", benchPath(i), len(buf), buf)
			}
		}
		w.Flush()
		pw.Close()
	}()
	if err := git(pr, "fast-import", "--quiet"); err != nil {
		return err
	}
	if err := git(nil, "repack", "-adq"); err != nil {
		return err
	}
	return git(nil, "reset", "-q", "--hard")
}

// benchPath is the path of the i-th file: 100 directories of 100.
func benchPath(i int) string { return fmt.Sprintf("d%02d/sub/f%04d.txt", i%100, i) }

// BenchmarkIsolatedCheckout measures making an isolated sandbox's
// checkout of benchRepo against git worktree add and git clone --local
// of the same repository, taking turns in each iteration so that the
// load of a shared machine weighs on all alike. It reports each one's
// mean (ms) and krunbox's ratio to the faster of the two.
func BenchmarkIsolatedCheckout(b *testing.B) {
	repo := benchRepo(b)
	run := func(b *testing.B, dir string, args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	krunbox := func(git string) func(b *testing.B, dst string) {
		return func(b *testing.B, dst string) {
			defer func(g string) { gitBinary = g }(gitBinary)
			gitBinary = git
			os.Mkdir(dst, 0o755)
			rec := &Record{Project: repo, GitDir: filepath.Join(repo, ".git"), CommonDir: filepath.Join(repo, ".git"), Branch: "krunbox/bench"}
			if err := Prepare(b.Context(), dst, rec); err != nil {
				b.Fatal(err)
			}
		}
	}
	ways := []struct {
		name string
		make func(b *testing.B, dst string)
		undo func(b *testing.B, dst string)
	}{
		{"worktree-add", func(b *testing.B, dst string) { run(b, repo, "worktree", "add", "-q", "--detach", dst) },
			func(b *testing.B, dst string) { run(b, repo, "worktree", "remove", "--force", dst) }},
		{"clone-local", func(b *testing.B, dst string) { run(b, repo, "clone", "-q", "--local", repo, dst) }, nil},
		{"krunbox", krunbox("git"), nil},
		{"krunbox-no-host-git", krunbox(""), nil},
	}
	total := make([]time.Duration, len(ways))
	n := 0
	for b.Loop() {
		b.StopTimer()
		for i, w := range ways {
			dst := filepath.Join(b.TempDir(), "dst")
			start := time.Now()
			w.make(b, dst)
			total[i] += time.Since(start)
			if w.undo != nil {
				w.undo(b, dst)
			}
			os.RemoveAll(dst)
		}
		n++
		b.StartTimer()
	}
	ms := func(i int) float64 { return float64(total[i].Milliseconds()) / float64(n) }
	for i, w := range ways {
		b.ReportMetric(ms(i), w.name+"-ms")
	}
	faster := min(ms(0), ms(1))
	b.ReportMetric(ms(2)/faster, "krunbox/faster")
	b.ReportMetric(ms(3)/faster, "no-host-git/faster")
}

// BenchmarkIsolatedDiff measures Checkout.Diff (Sandbox.Diff) of an isolated checkout
// of benchRepo with 100 files changed against git diff of a plain
// checkout (git clone --local) with the same changes, taking turns in
// each iteration. It reports each one's mean (ms) and krunbox's ratio.
func BenchmarkIsolatedDiff(b *testing.B) {
	repo := benchRepo(b)
	change := func(b *testing.B, dir string) {
		for i := 0; i < 100; i++ {
			p := filepath.Join(dir, benchPath(i*97))
			if err := os.WriteFile(p, []byte(fmt.Sprintf("changed %d\n", i)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	clone := filepath.Join(b.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "-q", "--local", repo, clone).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	change(b, clone)
	dir := b.TempDir()
	rec := &Record{Project: repo, GitDir: filepath.Join(repo, ".git"), CommonDir: filepath.Join(repo, ".git"), Branch: "krunbox/bench"}
	if err := Prepare(b.Context(), dir, rec); err != nil {
		b.Fatal(err)
	}
	change(b, filepath.Join(dir, WorkspaceDir))
	ck := &Checkout{Name: "bench", Dir: dir, Workspace: repo, Record: rec}
	var out strings.Builder
	if err := ck.Diff(b.Context(), &out, nil, true); err != nil || strings.Count(out.String(), "\n") != 101 {
		b.Fatalf("Diff --stat: %v\n%s", err, out.String())
	}
	var gitT, krunboxT time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command("git", "diff")
		cmd.Dir = clone
		cmd.Stdout = io.Discard
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		gitT += time.Since(start)
		start = time.Now()
		if err := ck.Diff(b.Context(), io.Discard, nil, false); err != nil {
			b.Fatal(err)
		}
		krunboxT += time.Since(start)
		n++
	}
	b.ReportMetric(float64(gitT.Milliseconds())/float64(n), "git-diff-ms")
	b.ReportMetric(float64(krunboxT.Milliseconds())/float64(n), "krunbox-ms")
	b.ReportMetric(float64(krunboxT)/float64(gitT), "krunbox/git")
}
