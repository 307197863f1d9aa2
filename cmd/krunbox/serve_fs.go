package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"path"
	"syscall"

	"github.com/krunbox/krunbox/hostapi"
)

// The file methods of the serve protocol (docs/serve-protocol.md §7).

// fsParams are the params every file method has.
type fsParams struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
}

// fsRequest is the params of a file method.
type fsRequest interface{ common() *fsParams }

func (p *fsParams) common() *fsParams { return p }

func (p *fsParams) check() error {
	if err := checkName("sandbox", p.Sandbox); err != nil {
		return err
	}
	if !path.IsAbs(p.Path) {
		return invalidParams("path %q: want an absolute guest path", p.Path)
	}
	return nil
}

// fsCall decodes params into p (which embeds fsParams), checks them and
// returns the sandbox's agent client.
func (s *server) fsCall(ctx context.Context, raw json.RawMessage, p fsRequest) (*hostapi.Client, error) {
	if err := decodeParams(raw, p); err != nil {
		return nil, err
	}
	fp := p.common()
	if err := fp.check(); err != nil {
		return nil, err
	}
	return s.client(ctx, fp.Sandbox)
}

// permBits checks a mode param: permission bits only.
func permBits(mode *int64, def fs.FileMode) (fs.FileMode, error) {
	if mode == nil {
		return def, nil
	}
	if *mode < 0 || *mode > 0o777 {
		return 0, invalidParams("mode %#o: want permission bits, 0 to 0o777", *mode)
	}
	return fs.FileMode(*mode), nil
}

type readFileResult struct {
	Data []byte `json:"data"`
	Size int64  `json:"size"`
	EOF  bool   `json:"eof"`
}

func (s *server) fsReadFile(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
	}
	c, err := s.fsCall(ctx, raw, &p)
	if err != nil {
		return nil, nil, err
	}
	var offset, length int64 = 0, maxReadBytes
	if p.Offset != nil {
		if *p.Offset < 0 {
			return nil, nil, invalidParams("offset %d: want 0 or more", *p.Offset)
		}
		offset = *p.Offset
	}
	if p.Length != nil {
		if *p.Length < 0 {
			return nil, nil, invalidParams("length %d: want 0 or more", *p.Length)
		}
		if *p.Length > maxReadBytes {
			return nil, nil, newError(codeTooLarge, nil, "length %d is more than the %d bytes one read may return: read in parts", *p.Length, maxReadBytes)
		}
		length = *p.Length
	}
	if length == 0 {
		fi, err := c.Stat(ctx, p.Path)
		if err != nil {
			return nil, nil, s.guestError(ctx, p.Sandbox, err)
		}
		if fi.IsDir() {
			return nil, nil, newError(codeIsDir, nil, "read %s: is a directory", p.Path)
		}
		return &readFileResult{Data: []byte{}, Size: fi.Size(), EOF: offset >= fi.Size()}, nil, nil
	}
	f, err := c.OpenRange(ctx, p.Path, offset, length)
	if err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	var buf bytes.Buffer
	buf.Grow(int(min(length, max(0, fi.Size()-offset))))
	if _, err := buf.ReadFrom(io.LimitReader(f, length)); err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	n := int64(buf.Len())
	return &readFileResult{Data: buf.Bytes(), Size: fi.Size(), EOF: offset+n >= fi.Size()}, nil, nil
}

// maxLinks bounds the symbolic links a write follows, as the kernel does.
const maxLinks = 40

func (s *server) fsWriteFile(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Data   *string `json:"data"`
		Mode   *int64  `json:"mode"`
		Mkdirs bool    `json:"mkdirs"`
	}
	c, err := s.fsCall(ctx, raw, &p)
	if err != nil {
		return nil, nil, err
	}
	if p.Data == nil {
		return nil, nil, invalidParams("data: required (base64)")
	}
	if base64.StdEncoding.DecodedLen(len(*p.Data)) > maxWriteBytes+2 {
		return nil, nil, newError(codeTooLarge, nil, "write %s: more than %d bytes", p.Path, maxWriteBytes)
	}
	data, err := base64.StdEncoding.DecodeString(*p.Data)
	if err != nil {
		return nil, nil, invalidParams("data: not base64: %v", err)
	}
	if len(data) > maxWriteBytes {
		return nil, nil, newError(codeTooLarge, nil, "write %s: %d bytes is more than %d", p.Path, len(data), maxWriteBytes)
	}
	perm, err := permBits(p.Mode, 0o644)
	if err != nil {
		return nil, nil, err
	}
	// The write replaces a file atomically (a new file renamed over it):
	// for a symbolic link that would replace the link, so write its
	// target instead.
	target := p.Path
	for i := 0; ; i++ {
		fi, err := c.Lstat(ctx, target)
		if err != nil {
			if errno, guest := guestErrno(err); guest && errno == syscall.ENOENT {
				break // a new file
			}
			return nil, nil, s.guestError(ctx, p.Sandbox, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if i == maxLinks {
			return nil, nil, newError(codeIO, nil, "write %s: %v", p.Path, syscall.ELOOP)
		}
		link := fi.Sys().(*hostapi.FileSys).LinkTarget
		if !path.IsAbs(link) {
			link = path.Join(path.Dir(target), link)
		}
		target = link
	}
	w, err := c.Create(ctx, target, &hostapi.WriteOptions{Perm: perm, KeepMode: true, MkdirAll: p.Mkdirs})
	if err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	if err := w.Close(); err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	return map[string]int{"size": len(data)}, nil, nil
}

type statResult struct {
	Type    string `json:"type"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"`
	MtimeMs int64  `json:"mtimeMs"`
}

// fileType names the type of a file mode as the protocol does.
func fileType(m fs.FileMode) string {
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

func (s *server) fsStat(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Lstat bool `json:"lstat"`
	}
	c, err := s.fsCall(ctx, raw, &p)
	if err != nil {
		return nil, nil, err
	}
	stat := c.Stat
	if p.Lstat {
		stat = c.Lstat
	}
	fi, err := stat(ctx, p.Path)
	if err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	return &statResult{Type: fileType(fi.Mode()), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), MtimeMs: fi.ModTime().UnixMilli()}, nil, nil
}

type dirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func (s *server) fsReadDir(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p fsParams
	c, err := s.fsCall(ctx, raw, &p)
	if err != nil {
		return nil, nil, err
	}
	entries, err := c.ReadDir(ctx, p.Path)
	if err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	out := make([]dirEntry, len(entries))
	for i, e := range entries {
		out[i] = dirEntry{Name: e.Name(), Type: fileType(e.Type())}
	}
	return map[string][]dirEntry{"entries": out}, nil, nil
}

func (s *server) fsMkdirAll(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Mode *int64 `json:"mode"`
	}
	c, err := s.fsCall(ctx, raw, &p)
	if err != nil {
		return nil, nil, err
	}
	perm, err := permBits(p.Mode, 0o755)
	if err != nil {
		return nil, nil, err
	}
	if err := c.MkdirAll(ctx, p.Path, perm); err != nil {
		return nil, nil, s.guestError(ctx, p.Sandbox, err)
	}
	return struct{}{}, nil, nil
}
