package isolate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	fdiff "github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/utils/diff"
	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/krunbox/krunbox/internal/confine"
)

// Change is a file of an isolated checkout that differs from its base
// commit, committed in the sandbox or not: hostapi.Change.
type Change struct {
	// Path is relative to the project.
	Path string
	// From and To are the blob hashes (empty for an added or a deleted
	// file) and FromMode and ToMode the git modes, e.g. 0100644.
	From, To         string
	FromMode, ToMode uint32
}

// changes compares the checkout with its base.
func (w *work) changes(paths []string) ([]Change, map[string][2]entry, error) {
	base, err := object.GetCommit(w.objects, plumbing.NewHash(w.iso.Base))
	if err != nil {
		return nil, nil, fmt.Errorf("base %s: %w", w.iso.Base, err)
	}
	was, err := treeFiles(w.objects, base, w.lim)
	if err != nil {
		return nil, nil, err
	}
	pairs := map[string][2]entry{}
	for p, e := range was {
		if now, ok := w.files[p]; !ok || now.Hash != e.Hash || now.Mode != e.Mode {
			pairs[p] = [2]entry{e, now}
		}
	}
	for p, e := range w.files {
		if _, ok := was[p]; !ok {
			pairs[p] = [2]entry{{}, e}
		}
	}
	var out []Change
	for p, pr := range pairs {
		if !underAny(p, paths) {
			delete(pairs, p)
			continue
		}
		c := Change{Path: p, FromMode: uint32(pr[0].Mode), ToMode: uint32(pr[1].Mode)}
		if !pr[0].Hash.IsZero() {
			c.From = pr[0].Hash.String()
		}
		if !pr[1].Hash.IsZero() {
			c.To = pr[1].Hash.String()
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return out, pairs, nil
}

// underAny reports whether p is one of paths or lies below one; every p
// is, when paths is empty.
func underAny(p string, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, q := range paths {
		if q == "." || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// projectPaths makes paths (relative to the project, or absolute below
// it) clean and relative, refusing any outside the project.
func (c *Checkout) projectPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		q := p
		if path.IsAbs(q) {
			if !confine.Within(c.Workspace, path.Clean(q)) && !confine.Within(c.Record.Project, path.Clean(q)) {
				return nil, fmt.Errorf("%s is outside the project %s", p, c.Workspace)
			}
			q = strings.TrimPrefix(strings.TrimPrefix(path.Clean(q), c.Workspace), c.Record.Project)
			q = strings.TrimPrefix(q, "/")
			if q == "" {
				q = "."
			}
		}
		q = path.Clean(q)
		if q == ".." || strings.HasPrefix(q, "../") {
			return nil, fmt.Errorf("%s is outside the project %s", p, c.Workspace)
		}
		if q == ".git" || strings.HasPrefix(q, ".git/") {
			return nil, fmt.Errorf("%s is the sandbox's repository, not the project's files", p)
		}
		out = append(out, q)
	}
	return out, nil
}

// Changes lists the files of the checkout that differ from its base
// commit, committed in the sandbox or not (untracked files that
// .gitignore does not ignore count), below paths (relative to the
// project, or absolute below it; all when empty). The checkout is read
// as open says: nothing the guest wrote runs.
func (c *Checkout) Changes(ctx context.Context, paths []string) (_ []Change, err error) {
	defer recoverParse(c.Name, &err)
	w, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	defer w.close()
	rel, err := c.projectPaths(paths)
	if err != nil {
		return nil, err
	}
	out, _, err := w.changes(rel)
	return out, err
}

// Diff writes the difference between the base commit and the checkout
// now, as git diff does (a unified patch with a/ and b/ paths, or with
// stat a summary), for the files Changes lists below paths.
//
// The files are read and diffed one at a time, and written (or counted,
// for the summary) before the next is read: at most Limits.DiffBytes
// in all, the sizes of every file's two sides checked before any is
// read.
func (c *Checkout) Diff(ctx context.Context, out io.Writer, paths []string, stat bool) (err error) {
	defer recoverParse(c.Name, &err)
	w, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer w.close()
	rel, err := c.projectPaths(paths)
	if err != nil {
		return err
	}
	changes, pairs, err := w.changes(rel)
	if err != nil {
		return err
	}
	d, err := w.differ(changes, pairs)
	if err != nil {
		return err
	}
	var stats []fileStat
	enc := fdiff.NewUnifiedEncoder(out, fdiff.DefaultContextLines)
	for _, c := range changes {
		if err := ctx.Err(); err != nil {
			return err
		}
		fp, err := d.file(c.Path, pairs[c.Path])
		if err != nil {
			return err
		}
		if stat {
			stats = append(stats, fp.stat())
			continue
		}
		if err := enc.Encode(&patch{files: []*filePatch{fp}}); err != nil {
			return err
		}
	}
	if stat {
		return writeStat(out, stats)
	}
	return nil
}

// differ reads and diffs the files of one Diff.
type differ struct {
	w *work
	// left is what it may still read, in bytes (Limits.DiffBytes).
	left int64
	// deadline ends the search for the smallest patches (Limits.DiffTime).
	deadline time.Time
}

// differ returns the differ of changes, having checked that the two
// sides of every file hold at most lim.DiffBytes in all, as their sizes
// say (an object's header, a file's size), before any is read.
func (w *work) differ(changes []Change, pairs map[string][2]entry) (*differ, error) {
	var sum int64
	for _, c := range changes {
		for _, e := range pairs[c.Path] {
			n, err := w.blobSize(c.Path, e)
			if err != nil {
				return nil, err
			}
			if sum += n; sum > w.lim.DiffBytes {
				return nil, &LimitError{What: fmt.Sprintf("the %d files changed hold %d bytes or more", len(changes), sum), Limit: "DiffBytes", Max: w.lim.DiffBytes}
			}
		}
	}
	return &differ{w: w, left: w.lim.DiffBytes, deadline: time.Now().Add(w.lim.DiffTime)}, nil
}

// file reads both sides of the file p and returns their patch.
func (d *differ) file(p string, pr [2]entry) (*filePatch, error) {
	fp := &filePatch{}
	var from, to []byte
	var err error
	if !pr[0].Hash.IsZero() {
		fp.from = &patchFile{p, pr[0]}
		if from, err = d.read(p, pr[0]); err != nil {
			return nil, err
		}
	}
	if !pr[1].Hash.IsZero() {
		fp.to = &patchFile{p, pr[1]}
		if to, err = d.read(p, pr[1]); err != nil {
			return nil, err
		}
	}
	if isBinary(from) || isBinary(to) {
		fp.binary = true
		return fp, nil
	}
	fp.chunks = diffChunks(string(from), string(to), d.deadline)
	return fp, nil
}

// read reads the file p in the state e, within what is left to read.
func (d *differ) read(p string, e entry) ([]byte, error) {
	b, err := d.w.blob(p, e, min(d.left, maxBlob))
	if err != nil {
		return nil, err
	}
	d.left -= int64(len(b))
	return b, nil
}

// diffChunks returns the line diff of from and to, the smallest until
// deadline; past it, what is not yet compared is one deletion and one
// insertion.
func diffChunks(from, to string, deadline time.Time) []chunk {
	var out []chunk
	// A timeout of 0 would mean none.
	for _, d := range diff.DoWithTimeout(from, to, max(time.Until(deadline), time.Nanosecond)) {
		op := fdiff.Equal
		switch d.Type {
		case diffmatchpatch.DiffDelete:
			op = fdiff.Delete
		case diffmatchpatch.DiffInsert:
			op = fdiff.Add
		}
		out = append(out, chunk{d.Text, op})
	}
	return out
}

func isBinary(b []byte) bool {
	if len(b) > 8000 {
		b = b[:8000]
	}
	return bytes.IndexByte(b, 0) >= 0
}

// fileStat is what git's --stat says of a file.
type fileStat struct {
	path       string
	adds, dels int
	binary     bool
}

// stat counts the lines f adds and deletes.
func (f *filePatch) stat() fileStat {
	st := fileStat{path: f.path(), binary: f.binary}
	for _, c := range f.chunks {
		n := strings.Count(c.text, "\n")
		if !strings.HasSuffix(c.text, "\n") {
			n++
		}
		switch c.op {
		case fdiff.Add:
			st.adds += n
		case fdiff.Delete:
			st.dels += n
		}
	}
	return st
}

// writeStat writes git's --stat of files.
func writeStat(out io.Writer, files []fileStat) error {
	var b strings.Builder
	adds, dels := 0, 0
	width := 0
	for _, f := range files {
		width = max(width, len(f.path))
	}
	for _, f := range files {
		adds, dels = adds+f.adds, dels+f.dels
		if f.binary {
			fmt.Fprintf(&b, " %-*s | Bin\n", width, f.path)
			continue
		}
		fmt.Fprintf(&b, " %-*s | %d %s%s\n", width, f.path, f.adds+f.dels, strings.Repeat("+", min(f.adds, 40)), strings.Repeat("-", min(f.dels, 40)))
	}
	if len(files) > 0 {
		fmt.Fprintf(&b, " %d files changed, %d insertions(+), %d deletions(-)\n", len(files), adds, dels)
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// patch is a fdiff.Patch of a checkout against its base.
type patch struct{ files []*filePatch }

func (p *patch) FilePatches() []fdiff.FilePatch {
	out := make([]fdiff.FilePatch, len(p.files))
	for i, f := range p.files {
		out[i] = f
	}
	return out
}
func (p *patch) Message() string { return "" }

type filePatch struct {
	from, to *patchFile
	binary   bool
	chunks   []chunk
}

func (f *filePatch) path() string {
	if f.to != nil {
		return f.to.path
	}
	return f.from.path
}

func (f *filePatch) IsBinary() bool { return f.binary }
func (f *filePatch) Files() (fdiff.File, fdiff.File) {
	var from, to fdiff.File
	if f.from != nil {
		from = f.from
	}
	if f.to != nil {
		to = f.to
	}
	return from, to
}
func (f *filePatch) Chunks() []fdiff.Chunk {
	out := make([]fdiff.Chunk, len(f.chunks))
	for i := range f.chunks {
		out[i] = f.chunks[i]
	}
	return out
}

type patchFile struct {
	path string
	e    entry
}

func (f *patchFile) Hash() plumbing.Hash     { return f.e.Hash }
func (f *patchFile) Mode() filemode.FileMode { return f.e.Mode }
func (f *patchFile) Path() string            { return f.path }

type chunk struct {
	text string
	op   fdiff.Operation
}

func (c chunk) Content() string       { return c.text }
func (c chunk) Type() fdiff.Operation { return c.op }
