package hostapi

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
)

// Sizes of the repository of the isolated-workspace benchmarks.
const (
	benchFiles   = 10000
	benchCommits = 40
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
// benchChanged files with random content each), made once per run with
// git fast-import and packed as git gc leaves a repository.
func benchRepo(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	benchRepoOnce.Do(func() {
		dir, err := os.MkdirTemp("", "krunbox-bench-repo-")
		if err != nil {
			benchRepoOnce.err = err
			return
		}
		benchRepoOnce.dir, benchRepoOnce.err = dir, makeBenchRepo(dir)
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
// of the same repository, in the same run.
func BenchmarkIsolatedCheckout(b *testing.B) {
	repo := benchRepo(b)
	run := func(b *testing.B, dir string, args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	b.Run("git-worktree-add", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			dst := filepath.Join(b.TempDir(), "wt")
			run(b, repo, "worktree", "add", "-q", "--detach", dst)
			b.StopTimer()
			run(b, repo, "worktree", "remove", "--force", dst)
			b.StartTimer()
		}
	})
	b.Run("git-clone-local", func(b *testing.B) {
		for b.Loop() {
			run(b, repo, "clone", "-q", "--local", repo, filepath.Join(b.TempDir(), "clone"))
		}
	})
	b.Run("krunbox", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			dir := b.TempDir()
			rec := &record{Isolate: &isolateRecord{Project: repo, GitDir: filepath.Join(repo, ".git"), CommonDir: filepath.Join(repo, ".git"), Branch: "krunbox/bench"}}
			b.StartTimer()
			if err := prepareIsolated(b.Context(), dir, rec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
