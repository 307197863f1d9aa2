package isolate

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"

	"github.com/krunbox/krunbox/internal/testutil/gittest"
)

// Bounds of the work a command may do on a hostile isolated checkout
// before it fails: what tests of Limits assert.
const (
	hostileTime  = 10 * time.Second
	hostileAlloc = 48 << 20 // bytes allocated, all goroutines
)

// failsBounded runs f, which must fail with an error naming bound
// (e.g. "GitLimits.PathBytes") within hostileTime, having allocated at
// most hostileAlloc bytes.
func failsBounded(t *testing.T, what, bound string, f func() error) {
	t.Helper()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%s: %v, %d KiB allocated: %v", what, took.Round(time.Millisecond), alloc>>10, err)
	if err == nil || !strings.Contains(err.Error(), bound) {
		t.Errorf("%s: %v; want an error naming %s", what, err, bound)
	}
	if took > hostileTime {
		t.Errorf("%s took %v, want at most %v", what, took.Round(time.Millisecond), hostileTime)
	}
	if alloc > hostileAlloc {
		t.Errorf("%s allocated %d MiB, want at most %d", what, alloc>>20, hostileAlloc>>20)
	}
}

// writeIndexV4 writes at p, as the guest can, a version-4 index of n
// entries whose names grow by step bytes an entry. Each name is the one
// before and step more bytes, which the format compresses to those
// bytes alone: (64+step)*n bytes on disk, step*n*n/2 bytes of names.
func writeIndexV4(t *testing.T, p string, n, step int, blob plumbing.Hash) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum := sha1.New()
	w := bufio.NewWriter(io.MultiWriter(f, sum))
	w.WriteString("DIRC")
	binary.Write(w, binary.BigEndian, []uint32{4, uint32(n)})
	suffix := bytes.Repeat([]byte("a"), step)
	for i := 1; i <= n; i++ {
		var stat [40]byte // times, device, inode, mode, owner, size
		binary.BigEndian.PutUint32(stat[24:], 0o100644)
		w.Write(stat[:])
		w.Write(blob[:])
		binary.Write(w, binary.BigEndian, uint16(min(i*step, 0xfff)))
		w.WriteByte(0) // nothing stripped from the name before
		w.Write(suffix)
		w.WriteByte(0)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(sum.Sum(nil)); err != nil {
		t.Fatal(err)
	}
}

// A version-4 index of 300 KB whose prefix-compressed names grow 64
// bytes an entry names 200 MB of paths: krunbox workspaces (Changes) and
// diff refuse it while it is decoded, at once, having allocated little.
func TestHostileIndex(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	ck := newCheckout(t, repo, "index4")
	p := filepath.Join(ck.path(WorkspaceDir), ".git/index")
	writeIndexV4(t, p, 2500, 64, plumbing.NewHash(sandboxGit(t, ck, "rev-parse", "HEAD:f")))
	if fi, err := os.Stat(p); err != nil || fi.Size() > 400<<10 {
		t.Fatalf("the index: %v, %v", fi, err)
	}
	failsBounded(t, "Changes", "GitLimits.PathBytes", func() error {
		_, err := ck.Changes(t.Context(), nil)
		return err
	})
	failsBounded(t, "Diff --stat", "GitLimits.PathBytes", func() error {
		return ck.Diff(t.Context(), io.Discard, nil, true)
	})
}

// looseTree writes the tree of entries (a mode, a name, an object) as a
// loose object of the sandbox's repository and returns its hash.
func looseTree(t *testing.T, ck *Checkout, entries ...treeEntry) plumbing.Hash {
	t.Helper()
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%o %s\x00", e.mode, e.name)
		b.Write(e.hash[:])
	}
	return looseObjectOf(t, ck, plumbing.TreeObject, b.Bytes())
}

type treeEntry struct {
	mode filemode.FileMode
	name string
	hash plumbing.Hash
}

// looseObjectOf writes content as a loose object of type typ of the
// sandbox's repository and returns its hash.
func looseObjectOf(t *testing.T, ck *Checkout, typ plumbing.ObjectType, content []byte) plumbing.Hash {
	t.Helper()
	h := plumbing.ComputeHash(typ, content)
	looseObject(t, ck, h.String(), fmt.Sprintf("%s %d", typ, len(content)), content)
	return h
}

// commitTree makes a commit of tree on the sandbox's HEAD and moves its
// branch there, as the guest's git commit would.
func commitTree(t *testing.T, ck *Checkout, tree plumbing.Hash) {
	t.Helper()
	head := sandboxGit(t, ck, "rev-parse", "HEAD")
	c := looseObjectOf(t, ck, plumbing.CommitObject, fmt.Appendf(nil, "tree %s\nparent %s\nauthor g <g@g> 1700000000 +0000\ncommitter g <g@g> 1700000000 +0000\n\nhostile\n", tree, head))
	ref := filepath.Join(ck.path(WorkspaceDir), ".git/refs/heads", ck.Record.Branch)
	if err := os.WriteFile(ref, []byte(c.String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Trees of directories nested deep, or with long names, are refused by
// land (with --squash or not) and by the check of rm (Unlanded) at
// once, nothing written into the user's repository: a path is at most
// Limits.PathBytes, through at most Limits.TreeDepth directories.
func TestHostileTrees(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	for _, tt := range []struct {
		name  string
		depth int
		dir   string // the name of each directory
	}{
		{"200 directories of 20 KB names", 200, strings.Repeat("d", 20<<10)},
		{"3000 directories deep", 3000, "d"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ck := newCheckout(t, repo, fmt.Sprintf("nested%d", tt.depth))
			blob := looseObjectOf(t, ck, plumbing.BlobObject, []byte("deep\n"))
			tree := looseTree(t, ck, treeEntry{filemode.Regular, "f", blob})
			for range tt.depth {
				tree = looseTree(t, ck, treeEntry{filemode.Dir, tt.dir, tree})
			}
			commitTree(t, ck, tree)
			before := snapshot(t, repo)
			for _, squash := range []bool{false, true} {
				failsBounded(t, fmt.Sprintf("Land (squash %v)", squash), "over the bound GitLimits.", func() error {
					_, err := ck.Land(t.Context(), squash)
					return err
				})
			}
			failsBounded(t, "Unlanded", "over the bound GitLimits.", func() error {
				_, err := ck.Unlanded(t.Context())
				return err
			})
			before.unchanged(t, repo, ck.Record.Branch)
		})
	}
}

// One small object holding 30 MiB of text, named by 10 entries of the
// index whose stat data match 10 small files (so that their content is
// taken from the object), would make diff read 300 MiB: it is refused
// before any is read, its sizes over Limits.DiffBytes.
func TestHostileBlob(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	ck := newCheckout(t, repo, "blob")
	co := ck.path(WorkspaceDir)
	blob := looseObjectOf(t, ck, plumbing.BlobObject, bytes.Repeat([]byte("x\n"), 15<<20))
	if fi, err := os.Stat(filepath.Join(co, ".git/objects", blob.String()[:2], blob.String()[2:])); err != nil || fi.Size() > 1<<20 {
		t.Fatalf("the object: %v, %v", fi, err)
	}
	idx := &index.Index{Version: 2}
	when := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 10 {
		name := fmt.Sprintf("f%d", i)
		if err := os.WriteFile(filepath.Join(co, name), []byte("y\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(filepath.Join(co, name), when, when)
		idx.Entries = append(idx.Entries, &index.Entry{Name: name, Hash: blob, Mode: filemode.Regular, Size: 2, ModifiedAt: when})
	}
	f, err := os.Create(filepath.Join(co, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	if err := index.NewEncoder(f).Encode(idx); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, stat := range []bool{true, false} {
		failsBounded(t, fmt.Sprintf("Diff (stat %v)", stat), "GitLimits.DiffBytes", func() error {
			return ck.Diff(t.Context(), io.Discard, nil, stat)
		})
	}
	// Changes reads no file: it lists them.
	ch, err := ck.Changes(t.Context(), nil)
	if err != nil || len(ch) != 10 {
		t.Errorf("Changes = %d, %v; want the 10 files", len(ch), err)
	}
}

// A .gitignore of 130k patterns, and files not tracked for them to be
// tried on, would make the walk of the checkout (krunbox workspaces)
// try each pattern on each file, 50 ms a file: it stops at
// Limits.IgnoreMatches.
func TestHostileIgnore(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	ck := newCheckout(t, repo, "ignore")
	co := ck.path(WorkspaceDir)
	var ignore bytes.Buffer
	for i := range 130000 {
		fmt.Fprintf(&ignore, "p%06d\n", i)
	}
	if err := os.WriteFile(filepath.Join(co, ".gitignore"), ignore.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(co, "new"), 0o755)
	for i := range 1000 {
		if err := os.WriteFile(filepath.Join(co, "new", fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	failsBounded(t, "Changes", "GitLimits.IgnoreMatches", func() error {
		_, err := ck.Changes(t.Context(), nil)
		return err
	})
}

// Sparse files not tracked, 256 MiB each on no disk, would make the walk
// of the checkout read and hash them all, each whole in memory: it
// hashes as it reads, and stops at Limits.HashBytes.
func TestHostileSparse(t *testing.T) {
	repo, _ := gittest.Hostile(t)
	ck := newCheckout(t, repo, "sparse")
	for i := range 5 {
		f, err := os.Create(filepath.Join(ck.path(WorkspaceDir), fmt.Sprint("sparse", i)))
		if err != nil {
			t.Fatal(err)
		}
		err = f.Truncate(256 << 20)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	failsBounded(t, "Changes", "GitLimits.HashBytes", func() error {
		_, err := ck.Changes(t.Context(), nil)
		return err
	})
}
