package main

import (
	"context"
	"encoding/base64"
	"encoding/json"

	"github.com/krunbox/krunbox/internal/session"
)

// The file methods of the serve protocol (docs/serve-protocol.md §7):
// params decoded and bounded here, the calls made by the session.

// fsParams are the params every file method has.
type fsParams struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path"`
}

// The serve protocol's names of the session's file results.
type (
	readFileResult = session.ReadFileResult
	statResult     = session.StatResult
)

type dirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

func (s *server) fsReadFile(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Offset *int64 `json:"offset"`
		Length *int64 `json:"length"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	var offset, length int64 = 0, maxReadBytes
	if p.Offset != nil {
		offset = *p.Offset
	}
	if p.Length != nil {
		if *p.Length > maxReadBytes {
			return nil, nil, newError(codeTooLarge, nil, "length %d is more than the %d bytes one read may return: read in parts", *p.Length, maxReadBytes)
		}
		length = *p.Length
	}
	r, err := s.core.ReadFile(ctx, p.Sandbox, p.Path, offset, length)
	return r, nil, err
}

func (s *server) fsWriteFile(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Data   *string `json:"data"`
		Mode   *int64  `json:"mode"`
		Mkdirs bool    `json:"mkdirs"`
	}
	if err := decodeParams(raw, &p); err != nil {
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
	perm, err := session.PermBits(p.Mode, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := s.core.WriteFile(ctx, p.Sandbox, p.Path, data, perm, p.Mkdirs); err != nil {
		return nil, nil, err
	}
	return map[string]int{"size": len(data)}, nil, nil
}

func (s *server) fsStat(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Lstat bool `json:"lstat"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	st, err := s.core.Stat(ctx, p.Sandbox, p.Path, p.Lstat)
	return st, nil, err
}

func (s *server) fsReadDir(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p fsParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	entries, err := s.core.ReadDir(ctx, p.Sandbox, p.Path)
	if err != nil {
		return nil, nil, err
	}
	out := make([]dirEntry, len(entries))
	for i, e := range entries {
		out[i] = dirEntry(e)
	}
	return map[string][]dirEntry{"entries": out}, nil, nil
}

func (s *server) fsMkdirAll(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		fsParams
		Mode *int64 `json:"mode"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	perm, err := session.PermBits(p.Mode, 0o755)
	if err != nil {
		return nil, nil, err
	}
	if err := s.core.MkdirAll(ctx, p.Sandbox, p.Path, perm); err != nil {
		return nil, nil, err
	}
	return struct{}{}, nil, nil
}
