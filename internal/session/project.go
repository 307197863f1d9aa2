package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/krunbox/krunbox/internal/userconfig"
)

// A project's sandbox, as an agent other than pi gets it: its name comes
// from the workspace, its configuration from layers, each overriding the
// one before: the user's (config.toml and KRUNBOX_* variables, package
// userconfig), the project's file, then the flags. The project's file
// comes from the repository: unless the user trusts the project, it may
// only narrow what the sandbox reaches, as pi's .pi/krunbox.toml
// (pi/src/config.ts).

// ProjectFile is the project's configuration file, at the workspace's top.
const ProjectFile = ".krunbox.toml"

// TrustFile is the user's file, in krunbox's configuration directory, that
// lists the projects whose file is trusted: trusted_projects = ["/path"].
const TrustFile = "mcp.toml"

// MaxConfigBytes bounds a configuration file read: a project's comes from
// the repository.
const MaxConfigBytes = 1 << 20

// ProjectFlags are the command line's settings: they override the files.
type ProjectFlags struct {
	// Image and Network, when not empty, replace the files' values.
	Image, Network string
	// Isolate gives the sandbox its own checkout of the project.
	Isolate bool
}

// ProjectOptions are the inputs of LoadProject.
type ProjectOptions struct {
	// Workspace is the project directory, absolute.
	Workspace string
	// Prefix starts the sandbox's name ("mcp").
	Prefix string
	// User is the user's configuration; ConfigDir the directory of
	// TrustFile.
	User      *userconfig.Config
	ConfigDir string
	Flags     ProjectFlags
}

// Project is a loaded project: the sandbox to ensure and notes on how its
// configuration was made (refused settings, trust).
type Project struct {
	Request *EnsureRequest
	Notes   []string
}

// projectLayer is what a project file may set.
type projectLayer struct {
	Image          *string           `toml:"image"`
	Pull           *string           `toml:"pull"`
	CPUs           *int              `toml:"cpus"`
	MemoryMiB      *int              `toml:"memory_mib"`
	Network        *string           `toml:"network"`
	Env            map[string]string `toml:"env"`
	IdleTimeoutSec *int64            `toml:"idle_timeout_sec"`
	Workspace      *string           `toml:"workspace"`
}

// LoadProject returns the sandbox of a workspace.
func LoadProject(o ProjectOptions) (*Project, error) {
	ws := filepath.Clean(o.Workspace)
	if why := refusedWorkspace(ws); why != "" {
		return nil, fmt.Errorf("refusing to mount %s (%s) into the sandbox: run in a project directory, or give --workspace", ws, why)
	}
	trusted, err := trustedProject(ws, filepath.Join(o.ConfigDir, TrustFile))
	if err != nil {
		return nil, err
	}
	u := o.User
	c := ConfigParams{
		Image: u.Image, ImageTrusted: true, Pull: pullOf(u.PullPolicy), CPUs: new(u.CPUs), MemoryMiB: new(u.MemoryMiB),
		Network: u.Network, IdleTimeoutSec: new(int64(u.IdleTimeout / time.Second)), Env: map[string]string{},
	}
	for _, kv := range u.Env {
		k, v, _ := strings.Cut(kv, "=")
		c.Env[k] = v
	}
	var notes []string
	file := filepath.Join(ws, ProjectFile)
	layer, err := readProjectFile(file)
	if err != nil {
		return nil, err
	}
	if layer != nil {
		how := "untrusted: it may only narrow; list the project in trusted_projects of " + filepath.Join(o.ConfigDir, TrustFile) + " to trust it"
		if trusted {
			how = "trusted"
		}
		notes = append(notes, fmt.Sprintf("project file %s: %s", file, how))
		notes = append(notes, applyProject(&c, layer, trusted, o.Flags.Isolate)...)
	}
	if o.Flags.Image != "" {
		c.Image, c.ImageTrusted = o.Flags.Image, true
	}
	if o.Flags.Network != "" {
		c.Network = o.Flags.Network
	}
	c.Isolate = c.Isolate || o.Flags.Isolate
	name := SandboxName(o.Prefix, ws)
	if c.Isolate {
		name += "-iso"
	}
	req, err := ParseEnsure(&EnsureParams{Name: name, Workspace: ws, Config: &c})
	if err != nil {
		return nil, err
	}
	if u.StartTimeout > 0 {
		req.StartTimeout = u.StartTimeout
	}
	return &Project{Request: req, Notes: notes}, nil
}

// pullOf turns the user configuration's pull policy into the protocol's.
func pullOf(p string) string {
	if p == "if-missing" {
		return "missing"
	}
	return p
}

// applyProject applies a project layer over c: all of it when the project
// is trusted, else what narrows or keeps what the sandbox reaches. It
// returns a note for each setting refused.
func applyProject(c *ConfigParams, l *projectLayer, trusted, isolate bool) []string {
	var notes []string
	refuse := func(what, why string) {
		notes = append(notes, fmt.Sprintf("refused from the untrusted project file: %s (%s)", what, why))
	}
	if l.Image != nil {
		switch local := checkLocalImage(*l.Image, false) != nil; {
		case local && !trusted:
			refuse("image = "+*l.Image, "a local image source; only your own configuration may name one")
		default:
			c.Image, c.ImageTrusted = *l.Image, trusted
		}
	}
	if l.Pull != nil {
		c.Pull = *l.Pull
	}
	narrowInt := func(key string, have *int, want *int) {
		switch {
		case want == nil:
		case trusted || *want <= *have:
			*have = *want
		default:
			refuse(fmt.Sprintf("%s = %d", key, *want), fmt.Sprintf("more than %d", *have))
		}
	}
	narrowInt("cpus", c.CPUs, l.CPUs)
	narrowInt("memory_mib", c.MemoryMiB, l.MemoryMiB)
	if l.Network != nil {
		n := *l.Network
		have, want := networkReach(c.Network), networkReach(n)
		if trusted || n == c.Network || want < have || want == have && want != reachAllow {
			c.Network = n
		} else {
			refuse("network = "+n, "it would widen the network ("+c.Network+")")
		}
	}
	maps.Copy(c.Env, l.Env)
	if l.IdleTimeoutSec != nil {
		c.IdleTimeoutSec = l.IdleTimeoutSec
	}
	if l.Workspace != nil {
		switch *l.Workspace {
		case "isolated":
			c.Isolate = true
		case "live":
			if isolate && !trusted {
				refuse(`workspace = "live"`, "it would let the VM write your checkout")
			}
		default:
			notes = append(notes, fmt.Sprintf("project file: workspace = %q ignored (want live or isolated)", *l.Workspace))
		}
	}
	return notes
}

// The reach of network settings: none < allow=... < public < open, tsi.
const (
	reachNone = iota
	reachAllow
	reachPublic
	reachHost
)

func networkReach(n string) int {
	switch {
	case n == "none":
		return reachNone
	case strings.HasPrefix(n, "allow="):
		return reachAllow
	case n == "public" || n == "":
		return reachPublic
	}
	return reachHost
}

// readProjectFile reads a project's file: nil when it has none. It is the
// repository's: opened without blocking (a FIFO would hang), refused
// unless a regular file, bounded, and strict about its keys.
func readProjectFile(file string) (*projectLayer, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("project file %s: %w", file, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("project file %s: not a regular file", file)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("project file %s: %w", file, err)
	}
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("project file %s: more than %d bytes", file, MaxConfigBytes)
	}
	var l projectLayer
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("project file %s: %v", file, OneLine(err.Error()))
	}
	return &l, nil
}

// trustedProject reports whether the user's trust file lists ws.
func trustedProject(ws, file string) (bool, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", file, err)
	}
	var t struct {
		TrustedProjects []string `toml:"trusted_projects"`
	}
	if err := toml.Unmarshal(b, &t); err != nil {
		return false, fmt.Errorf("%s: %v", file, OneLine(err.Error()))
	}
	real, _ := filepath.EvalSymlinks(ws)
	for _, p := range t.TrustedProjects {
		p = filepath.Clean(p)
		if p == ws || p == real {
			return true, nil
		}
	}
	return false, nil
}

// systemDirs are directories that are never a project (pi's list,
// pi/src/workspace.ts); their subdirectories are fine.
var systemDirs = []string{
	"/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media", "/mnt", "/opt", "/proc",
	"/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
	"/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/local", "/usr/sbin", "/usr/share", "/usr/src",
	"/var/lib", "/var/log", "/var/tmp",
	"/Applications", "/Library", "/System", "/Users", "/Volumes", "/private", "/private/etc", "/private/tmp", "/private/var",
}

// refusedWorkspace says why ws must not be mounted into a sandbox: the
// root, a system directory, the home directory or one above it; "" when it
// may be. ws is judged as given and with its links resolved.
func refusedWorkspace(ws string) string {
	home, _ := os.UserHomeDir()
	dirs := []string{ws}
	if real, err := filepath.EvalSymlinks(ws); err == nil && real != ws {
		dirs = append(dirs, real)
	}
	for _, d := range dirs {
		switch {
		case slices.Contains(systemDirs, d):
			return "a system directory"
		case strings.HasPrefix(d, "/proc/"), strings.HasPrefix(d, "/sys/"), strings.HasPrefix(d, "/dev/"):
			return "a pseudo file system"
		case home != "" && d == filepath.Clean(home):
			return "your home directory"
		case home != "" && strings.HasPrefix(filepath.Clean(home), d+"/"):
			return "it holds your home directory"
		}
	}
	return ""
}

// SandboxName is the sandbox of a workspace: PREFIX-<base>-<hash>, <base>
// the directory's name reduced to [a-z0-9-] (at most 24 characters, "ws"
// when nothing is left) and <hash> the first 8 hex digits of the SHA-256
// of its path, as pi names its own (docs/serve-protocol.md §8).
func SandboxName(prefix, ws string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(filepath.Base(ws)) {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	base := strings.Trim(b.String(), "-")
	if len(base) > 24 {
		base = strings.TrimRight(base[:24], "-")
	}
	if base == "" {
		base = "ws"
	}
	sum := sha256.Sum256([]byte(ws))
	return prefix + "-" + base + "-" + hex.EncodeToString(sum[:4])
}

// FindWorkspace returns the workspace of a directory: the nearest one at
// or above it that holds a .git (a directory, or a file for worktrees),
// else the directory itself.
func FindWorkspace(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
