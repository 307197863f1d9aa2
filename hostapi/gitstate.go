package hostapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
)

// gitFile records, in the sandbox's directory, how its git directories
// were protected at its last start.
const gitFile = "git.json"

// GitProtectionMode says how a sandbox keeps the host's git from running
// what the guest wrote.
type GitProtectionMode string

// Modes of git protection.
const (
	// GitMounts: hooks and config are read-only mounts in the guest's
	// shares, made by the VM runner where the guest cannot undo them.
	GitMounts GitProtectionMode = "read-only"
	// GitFingerprint: the runner has no mount namespace (macOS, or Linux
	// without user namespaces), so what the guest could change is
	// fingerprinted at start and compared at stop and at each command.
	GitFingerprint GitProtectionMode = "fingerprint"
	// GitOff: Config.GitWritable; the guest may change them.
	GitOff GitProtectionMode = "off"
)

// Bounds of a fingerprint: entries, and bytes hashed per file and in all
// (a larger file is known by its size and modification time).
const (
	maxFingerprintEntries = 10000
	maxHashFile           = 16 << 20
	maxHashTotal          = 256 << 20
)

// GitProtection says how a sandbox's git directories are protected, what
// is, and what changed.
type GitProtection struct {
	// Mode is how; empty before the sandbox's first start.
	Mode GitProtectionMode `json:"mode,omitempty"`
	// Paths are the protected paths: read-only, or pinned (Writable: a
	// git directory the guest may write but not rename or remove).
	Paths []ProtectedPath `json:"paths,omitempty"`
	// Changed lists, in GitFingerprint mode, the paths that differ from
	// their fingerprint: what to review before accepting the changes.
	Changed []string `json:"changed,omitempty"`
	// Appeared lists the git directories that the guest made in a
	// read-write share that had none at start (git init). Their hooks and
	// config are the guest's until the next start protects them: review
	// them before running git there on the host.
	Appeared []string `json:"appeared,omitempty"`
}

// gitState is what gitFile holds.
type gitState struct {
	Mode        GitProtectionMode `json:"mode"`
	Paths       []vmm.Protect     `json:"paths,omitempty"`
	Fingerprint map[string]string `json:"fingerprint,omitempty"`
	// Absent are the .git paths of read-write shares that held no
	// checkout at start: a git directory the guest makes there is all its
	// own until the next start (GitProtection.Appeared).
	Absent []string `json:"absent,omitempty"`
}

func (s *Sandbox) readGitState() (*gitState, error) {
	b, err := os.ReadFile(s.path(gitFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st gitState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", s.path(gitFile), err)
	}
	return &st, nil
}

func (s *Sandbox) writeGitState(st *gitState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(s.path(gitFile), append(b, '\n'), 0o600)
}

// protectGit plans the protection of the sandbox's git directories for a
// start with spec, puts the paths into spec where its runner can mount
// them, and records the plan (and, where it cannot, the fingerprint).
func (s *Sandbox) protectGit(spec *vmm.Spec) error {
	if prev, err := s.readGitState(); err == nil && prev != nil {
		if made := appeared(prev.Absent); len(made) > 0 {
			s.host.log.Warn("the guest made these git directories during its last session, with hooks and config of its choosing; from this start on they are protected: review them before running git there", "sandbox", s.name, "paths", made)
		}
	}
	st := &gitState{Mode: GitOff}
	if !s.rec.Config.GitWritable {
		// An isolated checkout is the guest's own repository: the host's
		// git never runs there, so its config and hooks stay writable.
		paths, err := planGit(s.ownMounts())
		if err != nil {
			return fmt.Errorf("protect git's hooks and config: %w", err)
		}
		st.Paths = paths
		for _, m := range s.ownMounts() {
			p := filepath.Join(m.HostPath, ".git")
			if _, err := confine.LstatNoSymlinks(p); !m.ReadOnly && errors.Is(err, fs.ErrNotExist) {
				st.Absent = append(st.Absent, p)
			}
		}
		if s.host.protectsPaths(spec.Root) {
			st.Mode = GitMounts
			spec.Protect = paths
		} else {
			st.Mode = GitFingerprint
			if st.Fingerprint, err = fingerprint(paths); err != nil {
				return fmt.Errorf("fingerprint git's hooks and config: %w", err)
			}
		}
	}
	return s.writeGitState(st)
}

// GitProtection says how the sandbox's git directories were protected at
// its last start and, where they could not be made read-only, which
// protected paths changed since; in any mode, which git directories the
// guest made since in read-write shares that had none.
func (s *Sandbox) GitProtection() (*GitProtection, error) {
	st, err := s.readGitState()
	if err != nil || st == nil {
		return &GitProtection{}, err
	}
	out := &GitProtection{Mode: st.Mode}
	for _, p := range st.Paths {
		out.Paths = append(out.Paths, ProtectedPath(p))
	}
	if st.Mode == GitFingerprint {
		now, err := fingerprint(st.Paths)
		if err != nil {
			return nil, err
		}
		out.Changed = fingerprintDiff(st.Fingerprint, now)
	}
	out.Appeared = appeared(st.Absent)
	return out, nil
}

// appeared returns the paths of absent that exist now. A path whose
// directory is gone, or is now reached through a symlink (the share itself
// was swapped: the next start refuses it), has not appeared: nothing the
// guest wrote is there.
func appeared(absent []string) []string {
	var out []string
	for _, p := range absent {
		_, err := confine.LstatNoSymlinks(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// CheckGit returns a *GitChangedError when the sandbox's git hooks or
// config, which could not be made read-only for its guest (see
// GitFingerprint), changed since it started or since the changes were
// last accepted; nil otherwise. Start and Stop call it; so should every
// other command on a sandbox before it goes on.
func (s *Sandbox) CheckGit() error {
	g, err := s.GitProtection()
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", s.name, err)
	}
	if len(g.Changed) > 0 {
		return &GitChangedError{Name: s.name, Changed: g.Changed}
	}
	return nil
}

// AcceptGitChanges records the current state of the protected git hooks
// and config as the reference of CheckGit, once the user reviewed what
// changed.
func (s *Sandbox) AcceptGitChanges() error {
	st, err := s.readGitState()
	if err != nil || st == nil {
		return err
	}
	if st.Mode == GitFingerprint {
		if st.Fingerprint, err = fingerprint(st.Paths); err != nil {
			return fmt.Errorf("sandbox %s: fingerprint git's hooks and config: %w", s.name, err)
		}
	}
	return s.writeGitState(st)
}

// GitChangedError reports git hooks or config, which the host's git runs
// or obeys, that changed while a guest could write them.
type GitChangedError struct {
	Name string
	// Changed are the paths that changed, were added or removed.
	Changed []string
}

func (e *GitChangedError) Error() string {
	shown := e.Changed
	more := ""
	if len(shown) > 10 {
		shown, more = shown[:10], fmt.Sprintf(" and %d more", len(e.Changed)-10)
	}
	return fmt.Sprintf("sandbox %s: git hooks or config that your git runs changed while the guest could write them: %s%s", e.Name, strings.Join(shown, ", "), more)
}

// Hint says how to go on.
func (e *GitChangedError) Hint() string {
	return fmt.Sprintf("review them before you run git on the host ('krunbox inspect %s' lists them), then accept them with 'krunbox start --accept-git-changes %s'", e.Name, e.Name)
}

// fingerprint describes the protected paths and, below a protected
// directory, every entry: type, permissions, size and content hash (a
// symlink's target); a pinned directory by its identity (device and
// inode), so that replacing it shows. Missing paths are recorded as such.
func fingerprint(paths []vmm.Protect) (map[string]string, error) {
	fp := &fingerprinter{out: map[string]string{}}
	for _, p := range paths {
		fi, err := confine.LstatNoSymlinks(p.Path)
		if err != nil {
			// Missing, or reached through a symlink: a change in itself.
			fp.out[p.Path] = "unreachable"
			continue
		}
		if p.Writable {
			fp.out[p.Path+" (pinned)"] = "identity " + identity(fi)
			continue
		}
		if err := fp.entry(p.Path, fi); err != nil {
			return nil, err
		}
	}
	return fp.out, nil
}

type fingerprinter struct {
	out    map[string]string
	hashed int64
}

// entry records path (fi its Lstat) and, for a directory, what it holds.
func (fp *fingerprinter) entry(path string, fi fs.FileInfo) error {
	if len(fp.out) >= maxFingerprintEntries {
		return fmt.Errorf("more than %d entries to fingerprint", maxFingerprintEntries)
	}
	desc := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
	switch {
	case fi.Mode().IsRegular():
		sum, err := fp.hash(path, fi)
		if err != nil {
			return err
		}
		desc += " " + sum
	case fi.Mode().Type() == fs.ModeSymlink:
		root, err := confine.OpenRootNoSymlinks(filepath.Dir(path))
		if err != nil {
			return err
		}
		defer root.Close()
		target, err := root.Readlink(filepath.Base(path))
		if err != nil {
			return err
		}
		desc += " -> " + target
	case fi.IsDir():
		desc = fmt.Sprintf("%v", fi.Mode())
		root, err := confine.OpenRootNoSymlinks(path)
		if err != nil {
			return err
		}
		defer root.Close()
		f, err := root.Open(".")
		if err != nil {
			return err
		}
		ents, err := f.ReadDir(maxFingerprintEntries + 1)
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range ents {
			efi, err := root.Lstat(e.Name())
			if err != nil {
				return err
			}
			if err := fp.entry(filepath.Join(path, e.Name()), efi); err != nil {
				return err
			}
		}
	}
	fp.out[path] = desc
	return nil
}

// hash returns the SHA-256 of the regular file at path, or, past the
// bounds, its modification time.
func (fp *fingerprinter) hash(path string, fi fs.FileInfo) (string, error) {
	if fi.Size() > maxHashFile || fp.hashed+fi.Size() > maxHashTotal {
		return "modified " + fi.ModTime().UTC().String(), nil
	}
	b, err := confine.ReadFileNoSymlinks(path, maxHashFile)
	if err != nil {
		return "", err
	}
	fp.hashed += int64(len(b))
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// identity names the file fi describes by device and inode.
func identity(fi fs.FileInfo) string {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%v %d:%d", fi.Mode().Type(), st.Dev, st.Ino)
	}
	return fmt.Sprintf("%v", fi.Mode().Type())
}

// fingerprintDiff lists the paths whose description differs between was
// and now, or that only one has, sorted.
func fingerprintDiff(was, now map[string]string) []string {
	var out []string
	for k, v := range was {
		if now[k] != v {
			out = append(out, strings.TrimSuffix(k, " (pinned)"))
		}
	}
	for k := range now {
		if _, ok := was[k]; !ok {
			out = append(out, strings.TrimSuffix(k, " (pinned)"))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
