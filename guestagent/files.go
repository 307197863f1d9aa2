//go:build linux

package guestagent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"golang.org/x/sys/unix"
)

// fileChunk is the most read from a file at a time.
const fileChunk = protocol.MaxChunk

// abs resolves a request path against the configured workdir.
func (a *Agent) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	base := a.cfg.Workdir
	if base == "" {
		base = "/"
	}
	return filepath.Join(base, p)
}

// file handles every file request.
func (c *conn) file(st *stream, req any) {
	var err error
	var op, path string
	switch r := req.(type) {
	case *protocol.ReadFileRequest:
		c.readFile(st, r)
		return
	case *protocol.WriteFileRequest:
		c.writeFile(st, r)
		return
	case *protocol.PathRequest:
		op, path = st.typ.String(), c.a.abs(r.Path)
		switch st.typ {
		case protocol.TypeReadDir:
			c.readDir(st, path)
			return
		case protocol.TypeReadlink:
			var target string
			if target, err = os.Readlink(path); err == nil {
				c.reply(st, protocol.TypeReply, &protocol.ReadlinkResult{Target: target}, true)
				return
			}
		default:
			var fi *protocol.FileInfo
			if r.NoFollow {
				op = "lstat"
				fi, err = statFile(path, unix.Lstat)
			} else {
				fi, err = statFile(path, unix.Stat)
			}
			if err == nil {
				fi.Name = r.Path
				c.reply(st, protocol.TypeReply, fi, true)
				return
			}
		}
	case *protocol.MkdirRequest:
		op, path = "mkdir", c.a.abs(r.Path)
		if r.All {
			err = os.MkdirAll(path, fs.FileMode(r.Mode&0o777))
		} else {
			err = syscall.Mkdir(path, r.Mode)
		}
	case *protocol.RemoveRequest:
		op, path = "remove", c.a.abs(r.Path)
		if r.All {
			err = os.RemoveAll(path)
		} else {
			err = os.Remove(path)
		}
	case *protocol.RenameRequest:
		op, path = "rename", c.a.abs(r.OldPath)
		err = os.Rename(path, c.a.abs(r.NewPath))
	case *protocol.SymlinkRequest:
		op, path = "symlink", c.a.abs(r.NewPath)
		err = os.Symlink(r.Target, path)
	case *protocol.ChmodRequest:
		op, path = "chmod", c.a.abs(r.Path)
		err = syscall.Chmod(path, r.Mode)
	}
	if err != nil {
		c.replyError(st, errorFor(op, path, err))
		return
	}
	c.reply(st, protocol.TypeReply, nil, true)
}

// statFile describes path with stat or lstat.
func statFile(path string, stat func(string, *unix.Stat_t) error) (*protocol.FileInfo, error) {
	var s unix.Stat_t
	if err := stat(path, &s); err != nil {
		return nil, err
	}
	fi := infoOf(filepath.Base(path), &s)
	if s.Mode&unix.S_IFMT == unix.S_IFLNK {
		fi.Target, _ = os.Readlink(path)
	}
	return fi, nil
}

func infoOf(name string, s *unix.Stat_t) *protocol.FileInfo {
	return &protocol.FileInfo{
		Name:    name,
		Size:    s.Size,
		Mode:    s.Mode,
		ModTime: s.Mtim.Nano(),
		Uid:     s.Uid,
		Gid:     s.Gid,
		Nlink:   uint64(s.Nlink),
		Ino:     s.Ino,
	}
}

// readFile streams a file: Reply{FileInfo}, data, EOF.
func (c *conn) readFile(st *stream, r *protocol.ReadFileRequest) {
	path := c.a.abs(r.Path)
	// O_NONBLOCK: opening a FIFO must not wait for a writer, which nothing
	// could cancel. A FIFO then reads what its writers write until the last
	// one closes (nothing when none has it open), through the poller, so a
	// cancelled stream stops waiting for data too.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		c.replyError(st, errorFor("open", path, err))
		return
	}
	defer f.Close()
	defer context.AfterFunc(st.ctx, func() { f.SetReadDeadline(time.Now()) })()
	var s unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &s); err != nil {
		c.replyError(st, errorFor("stat", path, err))
		return
	}
	if s.Mode&unix.S_IFMT == unix.S_IFDIR {
		c.replyError(st, errorFor("read", path, syscall.EISDIR))
		return
	}
	fi := infoOf(r.Path, &s)
	if s.Mode&unix.S_IFMT == unix.S_IFREG && c.readSmallFile(st, f, fi, r) {
		return
	}
	if err := c.reply(st, protocol.TypeReply, fi, false); err != nil {
		return
	}
	if r.Offset > 0 {
		if _, err := f.Seek(r.Offset, io.SeekStart); err != nil {
			c.replyError(st, errorFor("seek", path, err))
			return
		}
	}
	if _, err := c.sendFrom(st, protocol.ChanOut, f, r.Limit, fileChunk, nil); err != nil {
		if st.ctx.Err() == nil {
			c.replyError(st, errorFor("read", path, err))
		}
		return
	}
	c.sendEOF(st, protocol.ChanOut, true)
}

// smallFile is the size up to which a file is read at once and sent with
// its Reply and EOF in one write: one round trip, one wake-up of the host.
const smallFile = 64 << 10

// readSmallFile answers a read of a small regular file in one write. It
// returns false, having sent nothing, when the file is not small after all.
func (c *conn) readSmallFile(st *stream, f *os.File, fi *protocol.FileInfo, r *protocol.ReadFileRequest) bool {
	want := fi.Size - r.Offset
	if r.Limit > 0 {
		want = min(want, r.Limit)
	}
	if want < 0 || want > smallFile {
		return false
	}
	// Read one byte more than stat said, to see that the file did not grow.
	buf := make([]byte, want+1)
	n, err := f.ReadAt(buf, r.Offset)
	if err != nil && err != io.EOF {
		return false
	}
	if int64(n) > want {
		if r.Limit == 0 || r.Limit > want {
			return false // the file grew: stream it
		}
		n = int(want)
	}
	if n > 0 {
		if got, err := st.out.Take(st.ctx.Done(), n); err != nil || got < n {
			st.out.Add(uint32(got))
			return false // never with the initial window; stream it then
		}
	}
	frame := protocol.AppendFrame(nil, protocol.Header{Stream: st.id, Type: protocol.TypeReply}, protocol.Encode(fi))
	if n > 0 {
		frame = protocol.AppendFrame(frame, protocol.Header{Stream: st.id, Type: protocol.TypeData, Channel: protocol.ChanOut}, buf[:n])
	}
	frame = protocol.AppendFrame(frame, protocol.Header{Stream: st.id, Type: protocol.TypeEOF, Channel: protocol.ChanOut, Flags: protocol.FlagEnd}, nil)
	c.write(frame)
	c.end(st)
	return true
}

// readDir streams a directory's entries as JSON lines of FileInfo (lstat).
func (c *conn) readDir(st *stream, path string) {
	d, err := os.Open(path)
	if err != nil {
		c.replyError(st, errorFor("open", path, err))
		return
	}
	defer d.Close()
	// An empty Reply first, so a non-directory fails before any data.
	if fi, err := d.Stat(); err != nil {
		c.replyError(st, errorFor("readdir", path, err))
		return
	} else if !fi.IsDir() {
		c.replyError(st, errorFor("readdir", path, syscall.ENOTDIR))
		return
	}
	if c.reply(st, protocol.TypeReply, nil, false) != nil {
		return
	}
	w := bufio.NewWriterSize(&channelWriter{c: c, st: st, ch: protocol.ChanOut}, 64<<10)
	enc := json.NewEncoder(w)
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			fi, serr := statFile(filepath.Join(path, name), unix.Lstat)
			if serr != nil {
				continue // removed meanwhile
			}
			fi.Name = name
			if enc.Encode(fi) != nil {
				return
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			c.replyError(st, errorFor("readdir", path, err))
			return
		}
	}
	if w.Flush() != nil {
		return
	}
	c.sendEOF(st, protocol.ChanOut, true)
}

// channelWriter sends what is written to it as Data within the credit.
type channelWriter struct {
	c   *conn
	st  *stream
	ch  protocol.Channel
	buf []byte
}

func (w *channelWriter) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n, err := w.st.window(w.ch).Take(w.st.ctx.Done(), min(len(p), protocol.MaxChunk))
		if err != nil {
			return total, err
		}
		w.buf = append(w.buf[:0], make([]byte, protocol.HeaderSize)...)
		w.buf = append(w.buf, p[:n]...)
		if err := w.c.sendData(w.st, w.ch, w.buf, n); err != nil {
			return total, err
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// writeFile writes a file from the host's data; see WriteFileRequest.
func (c *conn) writeFile(st *stream, r *protocol.WriteFileRequest) {
	path := c.a.abs(r.Path)
	// Writing through a symlink replaces the file it points to.
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
	}
	if r.MkdirAll {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			c.replyError(st, errorFor("mkdir", filepath.Dir(path), err))
			return
		}
	}
	inPlace := r.InPlace || r.Append || r.Exclusive
	var old unix.Stat_t
	exists := unix.Stat(path, &old) == nil
	if exists && old.Mode&unix.S_IFMT == unix.S_IFDIR {
		c.replyError(st, errorFor("open", path, syscall.EISDIR))
		return
	}
	mode := uint32(0o644)
	if r.Mode != nil {
		mode = *r.Mode
	}
	keepMode := exists && r.KeepMode
	if keepMode {
		mode = old.Mode & 0o7777
	}

	var f *os.File
	var err error
	target := path
	if inPlace {
		flags := os.O_WRONLY | os.O_CREATE
		switch {
		case r.Exclusive:
			flags |= os.O_EXCL
		case r.Append:
			flags |= os.O_APPEND
		default:
			flags |= os.O_TRUNC
		}
		f, err = os.OpenFile(path, flags, 0o600)
	} else {
		f, err = os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".krunbox-*")
	}
	if err != nil {
		c.replyError(st, errorFor("open", path, err))
		return
	}
	committed := false
	defer func() {
		f.Close()
		if !committed && !inPlace {
			os.Remove(f.Name())
		}
	}()
	// Exact mode, umask aside; for a replace, the old file's owner too.
	if !inPlace || !keepMode {
		if err := unix.Fchmod(int(f.Fd()), mode); err != nil {
			c.replyError(st, errorFor("chmod", path, err))
			return
		}
	}
	if !inPlace && exists && os.Geteuid() == 0 {
		f.Chown(int(old.Uid), int(old.Gid))
	}
	n, err := st.in.WriteTo(f)
	if err != nil {
		if st.ctx.Err() == nil {
			c.replyError(st, errorFor("write", path, err))
		}
		return
	}
	if r.Sync {
		if err := f.Sync(); err != nil {
			c.replyError(st, errorFor("sync", path, err))
			return
		}
	}
	if err := f.Close(); err != nil {
		c.replyError(st, errorFor("close", path, err))
		return
	}
	if !inPlace {
		if err := os.Rename(f.Name(), target); err != nil {
			c.replyError(st, errorFor("rename", path, err))
			return
		}
		if r.Sync {
			if d, err := os.Open(filepath.Dir(target)); err == nil {
				d.Sync()
				d.Close()
			}
		}
	}
	committed = true
	c.reply(st, protocol.TypeReply, &protocol.WriteFileResult{Written: n}, true)
}
