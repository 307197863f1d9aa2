package isolate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fdiff "github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/krunbox/krunbox/internal/confine"
)

// gitIndex makes, with the host's git, an index of version v naming
// paths, and returns its bytes.
func gitIndex(t *testing.T, v int, paths []string, extended bool) []byte {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("needs git")
	}
	dir := t.TempDir()
	run := func(stdin string, args ...string) string {
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	run("", "init", "-q")
	blob := run("x\n", "hash-object", "-w", "--stdin")
	var in strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&in, "100644 %s\t%s\n", blob, p)
	}
	run(in.String(), "update-index", "--add", "--index-info")
	if extended {
		run("", append([]string{"update-index", "--skip-worktree"}, paths[:len(paths)/2]...)...)
	}
	run("", "update-index", fmt.Sprintf("--index-version=%d", v))
	b, err := os.ReadFile(filepath.Join(dir, ".git/index"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readIndex decodes what go-git decodes, in every version and form of
// entry (long names, extended flags, prefix compression with strips of
// several varint bytes), fed a byte at a time or at once, and refuses
// an index at its bounds, not below.
func TestReadIndex(t *testing.T) {
	long := strings.Repeat("l", 300)
	paths := []string{
		"a", "ab", "b/" + long + "/x", "b/" + long + "/y", "c", // strips of 1, of 2 varint bytes
		strings.Repeat("n", 0xfff), strings.Repeat("n", 0xfff+10), // names of 12 bits and more
		"z/" + strings.Repeat("z", 5000),
	}
	slices.Sort(paths)
	longest, total := 0, 0
	for _, p := range paths {
		longest, total = max(longest, len(p)), total+len(p)
	}
	for _, tt := range []struct {
		version  int
		extended bool
	}{{2, false}, {3, true}, {4, false}, {4, true}} {
		t.Run(fmt.Sprintf("v%d extended %v", tt.version, tt.extended), func(t *testing.T) {
			b := gitIndex(t, tt.version, paths, tt.extended)
			want := &index.Index{}
			if err := index.NewDecoder(bytes.NewReader(b)).Decode(want); err != nil {
				t.Fatal(err)
			}
			lim := Limits{Files: len(paths), PathBytes: longest, PathsBytes: int64(total)}
			for _, r := range []io.Reader{bytes.NewReader(b), &oneByte{b}} {
				got, err := readIndex(r, lim)
				if err != nil || !equalIndexes(got, want) {
					t.Errorf("readIndex from a %T: %v, or not what go-git decodes", r, err)
				}
			}
			for _, over := range []struct {
				bound string
				lim   Limits
			}{
				{"Files", Limits{Files: len(paths) - 1, PathBytes: longest, PathsBytes: int64(total)}},
				{"PathBytes", Limits{Files: len(paths), PathBytes: longest - 1, PathsBytes: int64(total)}},
				{"PathsBytes", Limits{Files: len(paths), PathBytes: longest, PathsBytes: int64(total) - 1}},
			} {
				_, err := readIndex(bytes.NewReader(b), over.lim)
				var le *LimitError
				if !errors.As(err, &le) || le.Limit != over.bound || !errors.Is(err, confine.ErrTooLarge) {
					t.Errorf("readIndex with %s one under: %v", over.bound, err)
				}
			}
		})
	}
}

func equalIndexes(a, b *index.Index) bool {
	return a.Version == b.Version && slices.EqualFunc(a.Entries, b.Entries, func(x, y *index.Entry) bool {
		return x.Name == y.Name && x.Hash == y.Hash && x.Mode == y.Mode && x.SkipWorktree == y.SkipWorktree
	})
}

// oneByte reads a byte at a time.
type oneByte struct{ b []byte }

func (r *oneByte) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}

// treeFiles walks a tree naming another many times as many times,
// directories counted with files; it refuses a tree at each of its
// bounds, not below.
func TestTreeFilesBounds(t *testing.T) {
	st := memory.NewStorage()
	put := func(o interface {
		Encode(plumbing.EncodedObject) error
	}) plumbing.Hash {
		e := st.NewEncodedObject()
		if err := o.Encode(e); err != nil {
			t.Fatal(err)
		}
		h, err := st.SetEncodedObject(e)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	blob := st.NewEncodedObject()
	blob.SetType(plumbing.BlobObject)
	bh, _ := st.SetEncodedObject(blob)
	tree := put(&object.Tree{Entries: []object.TreeEntry{{Name: "f", Mode: filemode.Regular, Hash: bh}}})
	treeBytes, _ := st.EncodedObjectSize(tree)
	// Four levels of 10 directories, each the same tree: 10^4 files.
	files, dirs, paths := 1, 0, int64(1)
	for range 4 {
		var entries []object.TreeEntry
		for i := range 10 {
			entries = append(entries, object.TreeEntry{Name: fmt.Sprintf("d%d", i), Mode: filemode.Dir, Hash: tree})
		}
		tree = put(&object.Tree{Entries: entries})
		size, _ := st.EncodedObjectSize(tree)
		// Each level puts "dN/" before every path below and adds 10 directories.
		paths = 10*(paths+3*int64(files+dirs)) + 20
		files, dirs = 10*files, 10*dirs+10
		treeBytes = 10*treeBytes + size
	}
	c := &object.Commit{TreeHash: tree}
	lim := Limits{Files: files + dirs, PathBytes: len("d0/d0/d0/d0/f"), TreeDepth: 4, PathsBytes: max(paths, treeBytes)}
	got, err := treeFiles(st, c, lim)
	if err != nil || len(got) != files {
		t.Fatalf("treeFiles = %d files, %v; want %d", len(got), err, files)
	}
	for _, over := range []struct {
		bound string
		lim   Limits
	}{
		{"Files", Limits{Files: files + dirs - 1, PathBytes: lim.PathBytes, TreeDepth: 4, PathsBytes: lim.PathsBytes}},
		{"PathBytes", Limits{Files: lim.Files, PathBytes: lim.PathBytes - 1, TreeDepth: 4, PathsBytes: lim.PathsBytes}},
		{"TreeDepth", Limits{Files: lim.Files, PathBytes: lim.PathBytes, TreeDepth: 3, PathsBytes: lim.PathsBytes}},
		{"PathsBytes", Limits{Files: lim.Files, PathBytes: lim.PathBytes, TreeDepth: 4, PathsBytes: min(paths, treeBytes) - 1}},
	} {
		_, err := treeFiles(st, c, over.lim)
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != over.bound {
			t.Errorf("treeFiles with %s one under: %v", over.bound, err)
		}
	}
}

// The walk of the checkout refuses one at each of its bounds, not below.
func TestScanBounds(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/bb/ccc", "d"} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// a, a/bb, a/bb/ccc, d
	lim := Limits{Files: 4, PathBytes: 8, PathsBytes: 1 + 4 + 8 + 1}
	w := &work{root: root, lim: lim.withDefaults()}
	if err := w.scan(t.Context(), &index.Index{}, nil); err != nil || len(w.files) != 2 {
		t.Fatalf("scan: %v, %d files", err, len(w.files))
	}
	for _, over := range []struct {
		bound string
		lim   Limits
	}{
		{"Files", Limits{Files: 3, PathBytes: 8, PathsBytes: 14}},
		{"PathBytes", Limits{Files: 4, PathBytes: 7, PathsBytes: 14}},
		{"PathsBytes", Limits{Files: 4, PathBytes: 8, PathsBytes: 13}},
	} {
		w := &work{root: root, lim: over.lim.withDefaults()}
		err := w.scan(t.Context(), &index.Index{}, nil)
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != over.bound {
			t.Errorf("scan with %s one under: %v", over.bound, err)
		}
	}
}

// Past its deadline, a diff is coarse (what differs is one deletion and
// one insertion) but still turns the old text into the new.
func TestDiffChunksDeadline(t *testing.T) {
	var from, to strings.Builder
	for i := range 200 {
		fmt.Fprintf(&from, "line %d\n", i)
		if i%10 == 5 {
			fmt.Fprintf(&to, "changed %d\n", i)
		} else {
			fmt.Fprintf(&to, "line %d\n", i)
		}
	}
	text := func(chunks []chunk, skip fdiff.Operation) string {
		var b strings.Builder
		for _, c := range chunks {
			if c.op != skip {
				b.WriteString(c.text)
			}
		}
		return b.String()
	}
	small := diffChunks(from.String(), to.String(), time.Now().Add(time.Minute))
	coarse := diffChunks(from.String(), to.String(), time.Now().Add(-time.Second))
	for _, c := range [][]chunk{small, coarse} {
		if text(c, fdiff.Add) != from.String() || text(c, fdiff.Delete) != to.String() {
			t.Errorf("the chunks do not turn the old text into the new")
		}
	}
	if len(small) != 61 || len(coarse) != 4 {
		t.Errorf("%d chunks before the deadline, %d after; want 61 and 4", len(small), len(coarse))
	}
}

// The walk of the checkout applies a directory's ignore patterns below
// it (and its parents'), never to its siblings, skips an ignored
// directory and goes on with the next; it refuses a checkout one under
// each of its bounds on ignore files and hashing, not at them.
func TestScanIgnores(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		".gitignore":      "*.log\nbuild/\n",
		"a.log":           "ignored\n",
		"build/x":         "ignored\n",
		"c":               "kept\n",
		"sub1/.gitignore": "secret\n",
		"sub1/k":          "kept\n",
		"sub1/secret":     "ignored\n",
		"sub2/secret":     "kept\n",
		"sub2/z.log":      "ignored\n",
	}
	for p, data := range files {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ignoreBytes := int64(len(files[".gitignore"]) + len(files["sub1/.gitignore"]))
	// Tried on: 6 names at the top under 2 patterns, 3 in sub1 under 3,
	// 2 in sub2 under 2.
	matches := int64(6*2 + 3*3 + 2*2)
	var hashed int64
	for _, p := range []string{".gitignore", "c", "sub1/.gitignore", "sub1/k", "sub2/secret"} {
		hashed += int64(len(files[p]))
	}
	lim := Limits{IgnoreBytes: ignoreBytes, IgnoreMatches: matches, HashBytes: hashed}
	w := &work{root: root, lim: lim.withDefaults()}
	if err := w.scan(t.Context(), &index.Index{}, nil); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(maps.Keys(w.files))
	if want := []string{".gitignore", "c", "sub1/.gitignore", "sub1/k", "sub2/secret"}; !slices.Equal(got, want) {
		t.Errorf("scan found %q, want %q", got, want)
	}
	for _, over := range []struct {
		bound string
		lim   Limits
	}{
		{"IgnoreBytes", Limits{IgnoreBytes: ignoreBytes - 1, IgnoreMatches: matches, HashBytes: hashed}},
		{"IgnoreMatches", Limits{IgnoreBytes: ignoreBytes, IgnoreMatches: matches - 1, HashBytes: hashed}},
		{"HashBytes", Limits{IgnoreBytes: ignoreBytes, IgnoreMatches: matches, HashBytes: hashed - 1}},
	} {
		w := &work{root: root, lim: over.lim.withDefaults()}
		err := w.scan(t.Context(), &index.Index{}, nil)
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != over.bound {
			t.Errorf("scan with %s one under: %v", over.bound, err)
		}
	}
}
