// Package agentbin finds the krunbox guest agent binary for a guest
// architecture: the one named by KRUNBOX_AGENT, the one embedded in this
// executable by "make build", or one installed beside the executable.
package agentbin

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed bin
var embedded embed.FS

// Binary is a guest agent executable.
type Binary struct {
	// Data is the content of the static executable.
	Data []byte
	// Source says where it came from, for diagnostics.
	Source string
	// Path is the host file it was read from; empty when embedded.
	Path string
}

// ErrNotFound is returned when no agent exists for the architecture.
var ErrNotFound = errors.New("guest agent not found")

// FileName is the name of the agent for a guest architecture (a GOARCH).
func FileName(arch string) string { return "krunbox-agent-linux-" + arch }

// Lookup returns the agent for arch (a GOARCH value such as "amd64").
func Lookup(arch string) (*Binary, error) {
	if p := os.Getenv("KRUNBOX_AGENT"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("KRUNBOX_AGENT: %w", err)
		}
		return &Binary{Data: data, Source: p, Path: p}, nil
	}
	name := FileName(arch)
	if data, err := fs.ReadFile(embedded, "bin/"+name); err == nil {
		return &Binary{Data: data, Source: "embedded"}, nil
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, n := range []string{name, "krunbox-agent"} {
			p := filepath.Join(dir, n)
			if data, err := os.ReadFile(p); err == nil {
				return &Binary{Data: data, Source: p, Path: p}, nil
			}
		}
	}
	return nil, fmt.Errorf("%w for linux/%s: build krunbox with \"make build\", or set KRUNBOX_AGENT to a static krunbox-agent for that architecture", ErrNotFound, arch)
}
