package hostapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// The file operations mirror package os. Paths are guest paths; relative
// ones are resolved against the sandbox's default working directory. Errors
// are *fs.PathError (*os.LinkError for Rename and Symlink) whose Err is
// this host's errno for the guest's, so errors.Is(err, fs.ErrNotExist),
// errors.Is(err, fs.ErrExist), errors.Is(err, fs.ErrPermission) and
// errors.Is(err, syscall.ENOTDIR) work as for local files.

// maxPrealloc bounds what ReadFile allocates ahead from the size the guest
// reports; larger files grow the buffer as their data arrives.
const maxPrealloc = 16 << 20

// ReadFile returns the content of a guest file. A FIFO reads what its
// writers write until the last one closes it, and nothing when it has none.
// A file longer than AgentLimits.MaxReadFile is a *LimitError: stream it
// with Open.
func (c *Client) ReadFile(ctx context.Context, name string) ([]byte, error) {
	f, err := c.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	// The guest's word on the size sizes the buffer only up to a bound: a
	// hostile or changing guest must not make the host allocate at will.
	if size := f.info.Size(); size > 0 && size <= min(maxPrealloc, c.opts.limits.MaxReadFile) {
		buf.Grow(int(size) + 1)
	}
	limit := c.opts.limits.MaxReadFile
	over := &LimitError{Limit: "MaxReadFile", Max: limit, What: "bytes of a file read whole"}
	if _, err := buf.ReadFrom(newLimitReader(f, limit, pathError("read", name, over))); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFile writes data to a guest file, replacing it atomically: readers
// see the old content or the new, never a part. perm applies to a new
// file; an existing file keeps its mode. See Create for other ways.
func (c *Client) WriteFile(ctx context.Context, name string, data []byte, perm fs.FileMode) error {
	w, err := c.Create(ctx, name, &WriteOptions{Perm: perm, KeepMode: true})
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// FileReader is a guest file open for reading, streamed: data comes as it is
// read, within a window, so reading a large file takes bounded memory.
type FileReader struct {
	name string
	info fs.FileInfo
	st   *stream
	stop func() bool
	once sync.Once
}

// Open opens a guest file for reading.
func (c *Client) Open(ctx context.Context, name string) (*FileReader, error) {
	return c.OpenRange(ctx, name, 0, 0)
}

// OpenRange opens a guest file for reading length bytes from offset
// (length 0: to the end).
func (c *Client) OpenRange(ctx context.Context, name string, offset, length int64) (*FileReader, error) {
	st, f, err := c.openStream(ctx, protocol.TypeReadFile, &protocol.ReadFileRequest{Path: name, Offset: offset, Limit: length}, false)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	var fi protocol.FileInfo
	if err := st.decodeReply(f, &fi); err != nil {
		st.cancel()
		return nil, pathError("open", name, err)
	}
	file := &FileReader{name: name, info: newFileInfo(path.Base(name), &fi), st: st}
	file.stop = context.AfterFunc(ctx, func() { st.cancel() })
	return file, nil
}

// openStream sends a request and waits for its first answer.
func (c *Client) openStream(ctx context.Context, t protocol.Type, req any, in bool) (*stream, protocol.Frame, error) {
	s, err := c.session(ctx)
	if err != nil {
		return nil, protocol.Frame{}, err
	}
	st, err := s.open(t, req, in)
	if err != nil {
		return nil, protocol.Frame{}, err
	}
	f, err := st.next(ctx)
	if err != nil {
		st.cancel()
		return nil, protocol.Frame{}, err
	}
	return st, f, nil
}

// Read reads the file's content.
func (f *FileReader) Read(p []byte) (int, error) {
	n, err := f.st.out.Read(p)
	if err != nil && err != io.EOF {
		err = pathError("read", f.name, err)
	}
	return n, err
}

// WriteTo writes the file's content to w, for io.Copy.
func (f *FileReader) WriteTo(w io.Writer) (int64, error) {
	n, err := f.st.out.WriteTo(w)
	if err != nil {
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			err = pathError("read", f.name, err)
		}
	}
	return n, err
}

// Stat describes the file as it was when opened.
func (f *FileReader) Stat() (fs.FileInfo, error) { return f.info, nil }

// Close stops the transfer if it is not complete.
func (f *FileReader) Close() error {
	f.once.Do(func() {
		f.stop()
		f.st.cancel()
	})
	return nil
}

// WriteOptions say how Create writes a file.
type WriteOptions struct {
	// Perm is the file's permission bits (with fs.ModeSetuid, ModeSetgid,
	// ModeSticky), applied exactly: no umask; 0 means 0644.
	Perm fs.FileMode
	// KeepMode keeps an existing file's permission bits; Perm then applies
	// only to a new file.
	KeepMode bool
	// MkdirAll creates missing parent directories.
	MkdirAll bool
	// Append writes at the end of the file, in place.
	Append bool
	// Exclusive fails with fs.ErrExist when the file exists.
	Exclusive bool
	// InPlace truncates and rewrites the file itself instead of replacing
	// it atomically (keeps its inode and hard links; readers may see a
	// partial file).
	InPlace bool
	// Sync flushes the file to stable storage before Close returns.
	Sync bool
}

// FileWriter streams content to a guest file. Nothing is visible at the
// path until Close succeeds (unless written in place); Abort, a failed
// write, or cancelling the context leaves the old file as it was.
type FileWriter struct {
	ctx  context.Context
	name string
	st   *stream
	stop func() bool
	once sync.Once
	err  error
}

// Create opens a guest file for writing; nil opts means an atomic replace
// with mode 0644.
func (c *Client) Create(ctx context.Context, name string, opts *WriteOptions) (*FileWriter, error) {
	if opts == nil {
		opts = &WriteOptions{}
	}
	req := &protocol.WriteFileRequest{
		Path: name, MkdirAll: opts.MkdirAll, Append: opts.Append, Exclusive: opts.Exclusive,
		InPlace: opts.InPlace, Sync: opts.Sync,
	}
	perm := opts.Perm
	if perm == 0 {
		perm = 0o644
	}
	mode := unixMode(perm)
	req.Mode, req.KeepMode = &mode, opts.KeepMode
	s, err := c.session(ctx)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	st, err := s.open(protocol.TypeWriteFile, req, true)
	if err != nil {
		return nil, pathError("open", name, err)
	}
	w := &FileWriter{ctx: ctx, name: name, st: st}
	w.stop = context.AfterFunc(ctx, func() { st.cancel() })
	return w, nil
}

// Write sends p; it blocks while the agent's window is full.
func (w *FileWriter) Write(p []byte) (int, error) {
	n, err := writeChannel(w.st, p)
	if err != nil {
		return n, pathError("write", w.name, err)
	}
	return n, nil
}

// ReadFrom copies r to the file in large chunks, for io.Copy.
func (w *FileWriter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, protocol.MaxChunk)
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Close completes the file and returns once the agent has put it in place.
func (w *FileWriter) Close() error {
	if err := w.ctx.Err(); err != nil {
		w.abort(err)
	}
	w.once.Do(func() {
		defer w.stop()
		st := w.st
		if err := st.s.send(protocol.Header{Stream: st.id, Type: protocol.TypeEOF, Channel: protocol.ChanIn}, nil); err != nil {
			w.err = pathError("write", w.name, err)
			return
		}
		f, err := st.next(context.Background())
		if err == nil {
			err = st.decodeReply(f, nil)
		}
		if err != nil {
			w.err = pathError("write", w.name, err)
		}
	})
	return w.err
}

// Abort discards what was written; an existing file stays as it was
// (unless written in place).
func (w *FileWriter) Abort() error {
	w.abort(errors.New("write aborted"))
	return nil
}

func (w *FileWriter) abort(cause error) {
	w.once.Do(func() {
		w.stop()
		w.st.cancel()
		w.err = pathError("write", w.name, cause)
	})
}

// Stat describes a guest file, following symbolic links.
func (c *Client) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	return c.stat(ctx, "stat", name, false)
}

// Lstat describes a guest file; a symbolic link is described itself.
func (c *Client) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	return c.stat(ctx, "lstat", name, true)
}

func (c *Client) stat(ctx context.Context, op, name string, noFollow bool) (fs.FileInfo, error) {
	var fi protocol.FileInfo
	if err := c.call(ctx, protocol.TypeStat, &protocol.PathRequest{Path: name, NoFollow: noFollow}, &fi); err != nil {
		return nil, pathError(op, name, err)
	}
	return newFileInfo(path.Base(name), &fi), nil
}

// maxDirEntryBytes bounds one entry of a listing (a line of JSON): a name
// of 255 bytes and a link target of 4095, each byte escaped in 6, fit.
const maxDirEntryBytes = 64 << 10

// ReadDir lists a guest directory, sorted by name. Each entry's Info is
// already known (lstat), so calling it costs nothing. A listing over
// AgentLimits.MaxDirEntries or MaxDirBytes is a *LimitError.
func (c *Client) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	b := c.dirBudget()
	entries, _, err := c.readDir(ctx, name, &b)
	return entries, err
}

// dirBudget is what directory listings may still take from the guest:
// one listing's, or a walk's for the listings it holds at once.
type dirBudget struct {
	entries int
	bytes   int64
	limits  *AgentLimits
}

func (c *Client) dirBudget() dirBudget {
	return dirBudget{entries: c.opts.limits.MaxDirEntries, bytes: c.opts.limits.MaxDirBytes, limits: &c.opts.limits}
}

// release gives back what a listing took, once it is no longer held.
func (b *dirBudget) release(entries int, bytes int64) {
	b.entries += entries
	b.bytes += bytes
}

// readDir is ReadDir within b: it takes from b the entries it returns and
// the bytes it read (returned too, for release), and nothing on error.
func (c *Client) readDir(ctx context.Context, name string, b *dirBudget) ([]fs.DirEntry, int64, error) {
	if len(name) > protocol.MaxPath {
		return nil, 0, pathError("readdir", name, fmt.Errorf("path longer than %d bytes: a tree deeper than a path can name", protocol.MaxPath))
	}
	st, f, err := c.openStream(ctx, protocol.TypeReadDir, &protocol.PathRequest{Path: name}, false)
	if err == nil {
		err = st.decodeReply(f, nil)
	}
	if err != nil {
		return nil, 0, pathError("readdir", name, err)
	}
	stop := context.AfterFunc(ctx, func() { st.cancel() })
	defer stop()
	overBytes := &LimitError{Limit: "MaxDirBytes", Max: b.limits.MaxDirBytes, What: "bytes of directory listings"}
	lr := newLimitReader(st.out, b.bytes, overBytes)
	fail := func(err error) ([]fs.DirEntry, int64, error) {
		st.cancel()
		return nil, 0, pathError("readdir", name, err)
	}
	var out []fs.DirEntry
	// One entry a line: read through a buffer that bounds a line, so that
	// an endless entry fails at that bound, whatever the budget left.
	br := bufio.NewReaderSize(lr, maxDirEntryBytes)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return fail(&ProtocolError{Msg: fmt.Sprintf("a directory entry over %d bytes", maxDirEntryBytes)})
		}
		if err != nil && err != io.EOF {
			return fail(err)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			var fi protocol.FileInfo
			if derr := json.Unmarshal(line, &fi); derr != nil {
				return fail(&ProtocolError{Msg: fmt.Sprintf("directory entry: %v", derr)})
			}
			if len(out) >= b.entries {
				return fail(&LimitError{Limit: "MaxDirEntries", Max: int64(b.limits.MaxDirEntries), What: "directory entries"})
			}
			if fi.Name == "" || fi.Name == "." || fi.Name == ".." || strings.ContainsAny(fi.Name, "/\x00") {
				return fail(&ProtocolError{Msg: fmt.Sprintf("bad entry name %q", fi.Name)})
			}
			out = append(out, fs.FileInfoToDirEntry(newFileInfo(fi.Name, &fi)))
		}
		if err == io.EOF {
			break
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	n := b.bytes + 1 - lr.left
	b.entries -= len(out)
	b.bytes -= n
	return out, n, nil
}

// WalkDir walks the guest tree rooted at root as fs.WalkDir walks a local
// one: fn is called for root, then for each entry below it, in lexical
// order; fs.SkipDir and fs.SkipAll work as there. Directory entries are
// described by lstat (symbolic links are not followed), root as well. The
// listings held at once, from root down to the directory being walked,
// count together against AgentLimits.MaxDirEntries and MaxDirBytes, and a
// path longer than a guest path can be ends the walk.
func (c *Client) WalkDir(ctx context.Context, root string, fn fs.WalkDirFunc) error {
	info, err := c.Lstat(ctx, root)
	if err != nil {
		err = fn(root, nil, err)
	} else {
		b := c.dirBudget()
		err = c.walkDir(ctx, root, fs.FileInfoToDirEntry(info), fn, &b)
	}
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func (c *Client) walkDir(ctx context.Context, name string, d fs.DirEntry, fn fs.WalkDirFunc, b *dirBudget) error {
	if err := fn(name, d, nil); err != nil || !d.IsDir() {
		if err == fs.SkipDir && d.IsDir() {
			err = nil
		}
		return err
	}
	entries, n, err := c.readDir(ctx, name, b)
	defer b.release(len(entries), n)
	if err != nil {
		if err = fn(name, d, err); err != nil {
			if err == fs.SkipDir {
				err = nil
			}
			return err
		}
	}
	for _, e := range entries {
		if err := c.walkDir(ctx, path.Join(name, e.Name()), e, fn, b); err != nil {
			if err == fs.SkipDir {
				break
			}
			return err
		}
	}
	return nil
}

// Mkdir creates a directory; perm is subject to the guest's umask.
func (c *Client) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	return c.pathCall(ctx, "mkdir", name, protocol.TypeMkdir, &protocol.MkdirRequest{Path: name, Mode: unixMode(perm)})
}

// MkdirAll creates a directory and its missing parents; it succeeds when
// the directory exists.
func (c *Client) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	return c.pathCall(ctx, "mkdir", name, protocol.TypeMkdir, &protocol.MkdirRequest{Path: name, Mode: unixMode(perm), All: true})
}

// Remove removes a file or an empty directory.
func (c *Client) Remove(ctx context.Context, name string) error {
	return c.pathCall(ctx, "remove", name, protocol.TypeRemove, &protocol.RemoveRequest{Path: name})
}

// RemoveAll removes name and everything it contains; it succeeds when name
// does not exist.
func (c *Client) RemoveAll(ctx context.Context, name string) error {
	return c.pathCall(ctx, "removeall", name, protocol.TypeRemove, &protocol.RemoveRequest{Path: name, All: true})
}

// Chmod changes a file's permission bits, following symbolic links.
func (c *Client) Chmod(ctx context.Context, name string, mode fs.FileMode) error {
	return c.pathCall(ctx, "chmod", name, protocol.TypeChmod, &protocol.ChmodRequest{Path: name, Mode: unixMode(mode)})
}

// Readlink returns a symbolic link's target.
func (c *Client) Readlink(ctx context.Context, name string) (string, error) {
	var r protocol.ReadlinkResult
	if err := c.call(ctx, protocol.TypeReadlink, &protocol.PathRequest{Path: name}, &r); err != nil {
		return "", pathError("readlink", name, err)
	}
	return r.Target, nil
}

// Rename renames (moves) oldpath to newpath, replacing newpath.
func (c *Client) Rename(ctx context.Context, oldpath, newpath string) error {
	if err := c.call(ctx, protocol.TypeRename, &protocol.RenameRequest{OldPath: oldpath, NewPath: newpath}, nil); err != nil {
		return linkError("rename", oldpath, newpath, err)
	}
	return nil
}

// Symlink creates newname as a symbolic link to oldname.
func (c *Client) Symlink(ctx context.Context, oldname, newname string) error {
	if err := c.call(ctx, protocol.TypeSymlink, &protocol.SymlinkRequest{Target: oldname, NewPath: newname}, nil); err != nil {
		return linkError("symlink", oldname, newname, err)
	}
	return nil
}

func (c *Client) pathCall(ctx context.Context, op, name string, t protocol.Type, req any) error {
	if err := c.call(ctx, t, req, nil); err != nil {
		return pathError(op, name, err)
	}
	return nil
}

// Unix file type and mode bits (the same on every Unix krunbox runs on).
const (
	sIFMT   = 0o170000
	sIFSOCK = 0o140000
	sIFLNK  = 0o120000
	sIFBLK  = 0o060000
	sIFDIR  = 0o040000
	sIFCHR  = 0o020000
	sIFIFO  = 0o010000
	sISUID  = 0o4000
	sISGID  = 0o2000
	sISVTX  = 0o1000
)

// unixMode converts permission bits (and setuid, setgid, sticky).
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= sISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= sISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= sISVTX
	}
	return u
}

// fileMode converts an st_mode.
func fileMode(u uint32) fs.FileMode {
	m := fs.FileMode(u & 0o777)
	switch u & sIFMT {
	case sIFDIR:
		m |= fs.ModeDir
	case sIFLNK:
		m |= fs.ModeSymlink
	case sIFIFO:
		m |= fs.ModeNamedPipe
	case sIFSOCK:
		m |= fs.ModeSocket
	case sIFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case sIFBLK:
		m |= fs.ModeDevice
	}
	if u&sISUID != 0 {
		m |= fs.ModeSetuid
	}
	if u&sISGID != 0 {
		m |= fs.ModeSetgid
	}
	if u&sISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// FileSys is what FileInfo.Sys returns for a guest file.
type FileSys struct {
	Uid, Gid uint32
	Nlink    uint64
	Ino      uint64
	// LinkTarget is a symbolic link's target (Lstat and ReadDir only).
	LinkTarget string
}

// fileInfo implements fs.FileInfo for a guest file.
type fileInfo struct {
	name string
	size int64
	mode fs.FileMode
	mod  time.Time
	sys  FileSys
}

func newFileInfo(name string, p *protocol.FileInfo) *fileInfo {
	return &fileInfo{
		name: name,
		size: p.Size,
		mode: fileMode(p.Mode),
		mod:  time.Unix(0, p.ModTime),
		sys:  FileSys{Uid: p.Uid, Gid: p.Gid, Nlink: p.Nlink, Ino: p.Ino, LinkTarget: p.Target},
	}
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.size }
func (fi *fileInfo) Mode() fs.FileMode  { return fi.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.mod }
func (fi *fileInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return &fi.sys }
