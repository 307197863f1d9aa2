package session

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"path"
	"syscall"

	"github.com/krunbox/krunbox/hostapi"
)

// The file calls of a session (docs/serve-protocol.md §7). Paths are
// absolute guest paths; every call goes through the sandbox's guest agent.

// fsCall checks a sandbox name and an absolute guest path and returns the
// sandbox's agent client.
func (m *Manager) fsCall(ctx context.Context, sandbox, p string) (*hostapi.Client, error) {
	if err := CheckName("sandbox", sandbox); err != nil {
		return nil, err
	}
	if !path.IsAbs(p) {
		return nil, InvalidParams("path %q: want an absolute guest path", p)
	}
	return m.client(ctx, sandbox)
}

// PermBits checks a mode param: permission bits only, def when absent.
func PermBits(mode *int64, def fs.FileMode) (fs.FileMode, error) {
	if mode == nil {
		return def, nil
	}
	if *mode < 0 || *mode > 0o777 {
		return 0, InvalidParams("mode %#o: want permission bits, 0 to 0o777", *mode)
	}
	return fs.FileMode(*mode), nil
}

// ReadFileResult is a part of a file: its Data from the offset asked, the
// file's Size, and whether the part reaches its end.
type ReadFileResult struct {
	Data []byte `json:"data"`
	Size int64  `json:"size"`
	EOF  bool   `json:"eof"`
}

// ReadFile reads at most length bytes of a file from offset. The caller
// bounds length: the answer is held in memory.
func (m *Manager) ReadFile(ctx context.Context, sandbox, name string, offset, length int64) (*ReadFileResult, error) {
	if offset < 0 {
		return nil, InvalidParams("offset %d: want 0 or more", offset)
	}
	if length < 0 {
		return nil, InvalidParams("length %d: want 0 or more", length)
	}
	c, err := m.fsCall(ctx, sandbox, name)
	if err != nil {
		return nil, err
	}
	if length == 0 {
		fi, err := c.Stat(ctx, name)
		if err != nil {
			return nil, m.guestError(ctx, sandbox, err)
		}
		if fi.IsDir() {
			return nil, NewError(CodeIsDir, nil, "read %s: is a directory", name)
		}
		return &ReadFileResult{Data: []byte{}, Size: fi.Size(), EOF: offset >= fi.Size()}, nil
	}
	f, err := c.OpenRange(ctx, name, offset, length)
	if err != nil {
		return nil, m.guestError(ctx, sandbox, err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var buf bytes.Buffer
	buf.Grow(int(min(length, max(0, fi.Size()-offset))))
	if _, err := buf.ReadFrom(io.LimitReader(f, length)); err != nil {
		return nil, m.guestError(ctx, sandbox, err)
	}
	n := int64(buf.Len())
	return &ReadFileResult{Data: buf.Bytes(), Size: fi.Size(), EOF: offset+n >= fi.Size()}, nil
}

// maxLinks bounds the symbolic links a write follows, as the kernel does.
const maxLinks = 40

// WriteFile replaces a file atomically with data (a new file gets perm, an
// existing one keeps its mode; mkdirs creates missing parents). A final
// symbolic link is followed (at most maxLinks), so that the link stays and
// its target is replaced. The caller bounds data.
func (m *Manager) WriteFile(ctx context.Context, sandbox, name string, data []byte, perm fs.FileMode, mkdirs bool) error {
	c, err := m.fsCall(ctx, sandbox, name)
	if err != nil {
		return err
	}
	// The write replaces a file atomically (a new file renamed over it):
	// for a symbolic link that would replace the link, so write its
	// target instead.
	target := name
	for i := 0; ; i++ {
		fi, err := c.Lstat(ctx, target)
		if err != nil {
			if errno, guest := guestErrno(err); guest && errno == syscall.ENOENT {
				break // a new file
			}
			return m.guestError(ctx, sandbox, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if i == maxLinks {
			return NewError(CodeIO, nil, "write %s: %v", name, syscall.ELOOP)
		}
		link := fi.Sys().(*hostapi.FileSys).LinkTarget
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(target), link)
		}
		target = link
	}
	w, err := c.Create(ctx, target, &hostapi.WriteOptions{Perm: perm, KeepMode: true, MkdirAll: mkdirs})
	if err != nil {
		return m.guestError(ctx, sandbox, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return m.guestError(ctx, sandbox, err)
	}
	if err := w.Close(); err != nil {
		return m.guestError(ctx, sandbox, err)
	}
	return nil
}

// StatResult describes a file: Type is "file", "dir", "symlink" or
// "other", Mode its permission bits.
type StatResult struct {
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MtimeMs int64  `json:"mtimeMs"`
}

// FileType names the type of a file mode as the protocol does.
func FileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// Stat describes a file; lstat does not follow a final symbolic link.
func (m *Manager) Stat(ctx context.Context, sandbox, name string, lstat bool) (*StatResult, error) {
	c, err := m.fsCall(ctx, sandbox, name)
	if err != nil {
		return nil, err
	}
	stat := c.Stat
	if lstat {
		stat = c.Lstat
	}
	fi, err := stat(ctx, name)
	if err != nil {
		return nil, m.guestError(ctx, sandbox, err)
	}
	return &StatResult{Type: FileType(fi.Mode()), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MtimeMs: fi.ModTime().UnixMilli()}, nil
}

// DirEntry is an entry of a directory; Type as StatResult's, a symbolic
// link being "symlink".
type DirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// ReadDir lists a directory: every entry but . and .., in any order.
func (m *Manager) ReadDir(ctx context.Context, sandbox, name string) ([]DirEntry, error) {
	c, err := m.fsCall(ctx, sandbox, name)
	if err != nil {
		return nil, err
	}
	entries, err := c.ReadDir(ctx, name)
	if err != nil {
		return nil, m.guestError(ctx, sandbox, err)
	}
	out := make([]DirEntry, len(entries))
	for i, e := range entries {
		out[i] = DirEntry{Name: e.Name(), Type: FileType(e.Type())}
	}
	return out, nil
}

// MkdirAll creates a directory and its missing parents with perm (subject
// to the guest's umask); an existing directory is not an error.
func (m *Manager) MkdirAll(ctx context.Context, sandbox, name string, perm fs.FileMode) error {
	c, err := m.fsCall(ctx, sandbox, name)
	if err != nil {
		return err
	}
	if err := c.MkdirAll(ctx, name, perm); err != nil {
		return m.guestError(ctx, sandbox, err)
	}
	return nil
}
