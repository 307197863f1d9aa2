// Package logfile keeps a log whose content something untrusted decides
// (a guest writing its console, a guest making the network policy refuse
// connections) under a bound, and reads it back.
//
// A log is its current file, path, and at most one previous file,
// path+".1": a Writer that would take the current file past its bound
// first renames it to the previous file, replacing the one there, and
// starts a new one. So a log takes at most twice its bound on disk, and
// always holds its latest output. The readers here read a log across that
// rotation. The VM runner's monitor (hostapi/vmm, in C) rotates the
// console and runner logs the same way.
package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
)

// Bounds of a log's files, for the logs a guest can make grow.
const (
	// DefaultMax is 4 MiB: hours of a chatty guest's console, and a log
	// costs the host at most 8 MiB of disk.
	DefaultMax = 4 << 20
	// MinMax is 64 KiB, above a boot's console.
	MinMax = 64 << 10
)

// PrevSuffix makes the name of a log's previous file.
const PrevSuffix = ".1"

// Prev returns the path of the previous file of the log at path.
func Prev(path string) string { return path + PrevSuffix }

// Writer appends to a log, keeping each of its files under a bound. It is
// safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

// NewWriter opens the log at path for appending, creating it (mode 0600),
// never through a symlink, with each of its files kept under max bytes.
func NewWriter(path string, max int64) (*Writer, error) {
	if max <= 0 {
		return nil, fmt.Errorf("log %s: bound of %d bytes", path, max)
	}
	w := &Writer{path: path, max: max}
	if err := w.open(os.O_APPEND); err != nil {
		return nil, err
	}
	fi, err := w.f.Stat()
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("log %s: %w", path, err)
	}
	w.size = fi.Size()
	return w, nil
}

func (w *Writer) open(flag int) error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|syscall.O_NOFOLLOW|flag, 0o600)
	if err != nil {
		return fmt.Errorf("log %s: %w", w.path, err)
	}
	w.f = f
	return nil
}

// Write appends p. When p would take the current file past the bound, the
// file is rotated first, so that a line shorter than the bound stays in
// one file; a longer p is cut at the bound. After a failed rotation the
// file starts again empty: the bound holds whatever happens.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return 0, os.ErrClosed
	}
	total := 0
	for len(p) > 0 {
		if w.size >= w.max || (w.size > 0 && w.size+int64(len(p)) > w.max && int64(len(p)) <= w.max) {
			if err := w.rotate(); err != nil {
				return total, err
			}
		}
		n, err := w.f.Write(p[:min(int64(len(p)), w.max-w.size)])
		total += n
		w.size += int64(n)
		if err != nil {
			return total, fmt.Errorf("log %s: %w", w.path, err)
		}
		p = p[n:]
	}
	return total, nil
}

// rotate makes the current file the previous one and starts a new one.
func (w *Writer) rotate() error {
	if err := os.Rename(w.path, Prev(w.path)); err != nil {
		if terr := w.f.Truncate(0); terr != nil {
			return fmt.Errorf("log %s: rotate: %w; and truncate: %w", w.path, err, terr)
		}
		w.size = 0
		return nil
	}
	w.f.Close()
	w.f, w.size = nil, 0
	return w.open(os.O_TRUNC)
}

// Close closes the log.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Close()
	w.f = nil
	return err
}

// openFile opens a log file for reading, never through a symlink.
func openFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// openBoth opens a log's current and previous files, either nil when
// absent (not both: then the error is fs.ErrNotExist). A previous file
// that is the current one seen before a rotation is dropped.
func openBoth(path string) (cur, prev *os.File, err error) {
	cur, err = openFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	prev, perr := openFile(Prev(path))
	if perr != nil && !errors.Is(perr, fs.ErrNotExist) {
		if cur != nil {
			cur.Close()
		}
		return nil, nil, perr
	}
	if cur == nil && prev == nil {
		return nil, nil, err
	}
	if cur != nil && prev != nil && sameFile(cur, prev) {
		prev.Close()
		prev = nil
	}
	return cur, prev, nil
}

func sameFile(a, b *os.File) bool {
	ai, aerr := a.Stat()
	bi, berr := b.Stat()
	return aerr == nil && berr == nil && os.SameFile(ai, bi)
}

// Open opens the log at path for reading: its previous file, then its
// current one, as one stream (fs.ErrNotExist when it has neither).
func Open(path string) (io.ReadCloser, error) {
	cur, prev, err := openBoth(path)
	if err != nil {
		return nil, err
	}
	var r multiFile
	for _, f := range []*os.File{prev, cur} {
		if f != nil {
			r = append(r, f)
		}
	}
	return &r, nil
}

// multiFile reads files one after the other, and closes them all.
type multiFile []*os.File

func (m *multiFile) Read(p []byte) (int, error) {
	for len(*m) > 0 {
		n, err := (*m)[0].Read(p)
		if err == io.EOF {
			(*m)[0].Close()
			*m = (*m)[1:]
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
	return 0, io.EOF
}

func (m *multiFile) Close() error {
	for _, f := range *m {
		f.Close()
	}
	*m = nil
	return nil
}

// Tail returns the last limit bytes of the log at path, from its previous
// file when the current one holds fewer, and whether the log holds more.
// It reads those bytes only, however large the files: for logs whose size
// the guest decides.
func Tail(path string, limit int64) (b []byte, more bool, err error) {
	cur, prev, err := openBoth(path)
	if err != nil {
		return nil, false, err
	}
	for _, f := range []*os.File{cur, prev} {
		if f == nil {
			continue
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, false, err
		}
		if int64(len(b)) >= limit {
			more = more || fi.Size() > 0
			continue
		}
		n := limit - int64(len(b))
		off := max(fi.Size()-n, 0)
		part, err := io.ReadAll(io.NewSectionReader(f, off, n))
		if err != nil {
			return nil, false, err
		}
		more = more || off > 0
		b = append(part, b...)
	}
	return b, more, nil
}

// TailLines is Tail starting at a line: when the log holds more than
// limit bytes, the line they start in the middle of is left out.
func TailLines(path string, limit int64) ([]byte, error) {
	// One byte more, to tell a tail that starts a line from one that
	// starts in the middle of one.
	b, _, err := Tail(path, limit+1)
	if err != nil || int64(len(b)) <= limit {
		return b, err
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[i+1:], nil
	}
	return b[1:], nil
}

// Follower copies a log as it grows, across its rotations: for a reader
// that keeps up (one rotation between two copies at most), nothing is
// copied twice and nothing is lost.
type Follower struct {
	path    string
	f       *os.File
	off     int64
	started bool
}

// NewFollower returns a follower of the log at path, from its start.
func NewFollower(path string) *Follower { return &Follower{path: path} }

// Copy copies to w what the log gained since the last call: the first
// call copies its previous file and its current one; later ones the rest
// of the file they were reading and, once it was rotated away, the new
// current file from its start. A current file shorter than what was
// copied of it (truncated) is copied from its start; a new boot makes a
// new current file, copied from its start as after a rotation.
func (fl *Follower) Copy(w io.Writer) error {
	if fl.f == nil {
		cur, prev, err := openBoth(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if prev != nil {
			if !fl.started {
				_, err = io.Copy(w, prev)
			}
			prev.Close()
			if err != nil {
				cur.Close()
				return err
			}
		}
		fl.started = true
		if cur == nil {
			return nil
		}
		fl.f, fl.off = cur, 0
	}
	for {
		if err := fl.copyRest(w); err != nil {
			return err
		}
		now, err := os.Lstat(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // between a rotation's rename and its new file
		}
		if err != nil {
			return err
		}
		if fi, err := fl.f.Stat(); err == nil && os.SameFile(fi, now) {
			return nil
		}
		// Rotated away: what it gained before the rename, then the new file.
		if err := fl.copyRest(w); err != nil {
			return err
		}
		fl.f.Close()
		fl.f = nil
		f, err := openFile(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		fl.f, fl.off = f, 0
	}
}

// copyRest copies the followed file from where the last copy ended.
func (fl *Follower) copyRest(w io.Writer) error {
	fi, err := fl.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < fl.off {
		fl.off = 0
	}
	n, err := io.Copy(w, io.NewSectionReader(fl.f, fl.off, fi.Size()-fl.off))
	fl.off += n
	return err
}

// Close releases the file being followed.
func (fl *Follower) Close() error {
	if fl.f == nil {
		return nil
	}
	err := fl.f.Close()
	fl.f = nil
	return err
}
