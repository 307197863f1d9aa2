// Package agentbin finds the krunbox guest agent binary for a guest
// architecture: the one named by KRUNBOX_AGENT, the one embedded in this
// executable by "make build", one installed beside the executable, or,
// for a program that imports hostapi from the module cache (`go get`), one
// built from the krunbox module's own source with the Go toolchain at
// first use and kept in the cache.
package agentbin

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The embedded agents, with the hex SHA-256 of each in NAME.sha256 ("make
// agent" writes both), so that finding the agent's digest reads neither.
//
//go:embed bin
var embedded embed.FS

// Binary is a guest agent executable.
type Binary struct {
	// Source says where it came from, for diagnostics.
	Source string
	// Path is the host file it is; empty when embedded.
	Path string
	// Size is its size in bytes.
	Size int64

	name   string // its name in the embedded files
	digest string
}

// ErrNotFound is returned when no agent exists for the architecture.
var ErrNotFound = errors.New("guest agent not found")

// FileName is the name of the agent for a guest architecture (a GOARCH).
func FileName(arch string) string { return "krunbox-agent-linux-" + arch }

// Lookup returns the agent for arch (a GOARCH value such as "amd64"). It
// reads no agent's content. When this executable embeds none and has none
// beside it, and cache is not empty, it builds the agent from the krunbox
// module's source into cache (once: seconds to a minute), so that a
// program importing hostapi needs no step beyond `go get`.
func Lookup(arch, cache string) (*Binary, error) {
	if p := os.Getenv("KRUNBOX_AGENT"); p != "" {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("KRUNBOX_AGENT: %w", err)
		}
		return &Binary{Source: p, Path: p, Size: fi.Size()}, nil
	}
	name := FileName(arch)
	if fi, err := fs.Stat(embedded, "bin/"+name); err == nil {
		b := &Binary{Source: "embedded", Size: fi.Size(), name: name}
		if d, err := fs.ReadFile(embedded, "bin/"+name+".sha256"); err == nil {
			b.digest = strings.TrimSpace(string(d))
		}
		return b, nil
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, n := range []string{name, "krunbox-agent"} {
			p := filepath.Join(dir, n)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
				return &Binary{Source: p, Path: p, Size: fi.Size()}, nil
			}
		}
	}
	if cache != "" {
		b, err := fromSource(arch, cache)
		if err != nil {
			return nil, fmt.Errorf("%w for linux/%s: none embedded in this program (krunbox's \"make build\" embeds it), and %w", ErrNotFound, arch, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w for linux/%s: build krunbox with \"make build\", or set KRUNBOX_AGENT to a static krunbox-agent for that architecture", ErrNotFound, arch)
}

// Data reads the agent's content.
func (b *Binary) Data() ([]byte, error) {
	if b.Path != "" {
		return os.ReadFile(b.Path)
	}
	return fs.ReadFile(embedded, "bin/"+b.name)
}

// Digest returns the hex SHA-256 of the agent's content, read from the
// digest embedded with it when there is one.
func (b *Binary) Digest() (string, error) {
	if b.digest != "" {
		return b.digest, nil
	}
	data, err := b.Data()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}
