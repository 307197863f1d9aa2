// Package gitprotect keeps the host's git from running what a sandbox's
// guest wrote. The guest writes the workspace and every read-write share,
// and with them the git directories there: their hooks, their config and
// the files it includes are what the host's git runs or obeys. Before
// each start, Protect finds them (in every git directory of the shares'
// checkouts: a worktree's, its repository's, its submodules') and says
// how they are kept: bind-mounted read-only by the VM runner, or, where
// it has no mount namespace, fingerprinted and compared again (Changed)
// at stop and before each command. DirsOutside says which git directories
// a workspace needs shared from outside it, refusing those its .git file
// names that do not lead back to it.
//
// All it reads is guest-controlled: .git files, the files of git
// directories, config entries and the paths they name. Each is read with
// a bound and no symlink followed in a share, what it walks is bounded
// (git directories, protected paths, fingerprinted entries and bytes),
// and nothing is run.
package gitprotect

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

// stateFile records, in the sandbox's directory, how its git directories
// were protected at its last start.
const stateFile = "git.json"

// Mode is how a sandbox keeps the host's git from running what the guest
// wrote: the values of hostapi.GitProtectionMode.
type Mode string

// Modes of git protection.
const (
	// ModeMounts: hooks and config are read-only mounts in the guest's
	// shares, made by the VM runner where the guest cannot undo them.
	ModeMounts Mode = "read-only"
	// ModeFingerprint: the runner has no mount namespace, so what the
	// guest could change is fingerprinted at start and compared at stop
	// and at each command.
	ModeFingerprint Mode = "fingerprint"
	// ModeOff: the guest may change them (hostapi.Config.GitWritable).
	ModeOff Mode = "off"
)

// Bounds of a fingerprint: entries, and bytes hashed per file and in all
// (a larger file is known by its size and modification time).
const (
	maxFingerprintEntries = 10000
	maxHashFile           = 16 << 20
	maxHashTotal          = 256 << 20
)

// State is how a sandbox's git directories were protected at its last
// start, as its directory records it.
type State struct {
	Mode  Mode          `json:"mode"`
	Paths []vmm.Protect `json:"paths,omitempty"`
	// Fingerprint describes Paths at start, or when their changes were
	// last accepted, in ModeFingerprint.
	Fingerprint map[string]string `json:"fingerprint,omitempty"`
	// Absent are the .git paths of read-write shares that held no
	// checkout at start: a git directory the guest makes there is all its
	// own until the next start (Appeared).
	Absent []string `json:"absent,omitempty"`
}

// ReadState reads the state recorded in the sandbox directory dir, nil
// when there is none (the sandbox never started).
func ReadState(dir string) (*State, error) {
	p := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", p, err)
	}
	return &st, nil
}

// Write records st in the sandbox directory dir.
func (st *State) Write(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, stateFile), append(b, '\n'), 0o600)
}

// Protect plans the protection of the git directories of the read-write
// shares (host paths) for a start: the paths to protect, and the .git
// paths of the shares that hold none. With mounts (the VM runner can
// bind-mount them read-only), the runner protects the paths; without,
// they are fingerprinted, for Changed to compare.
func Protect(shares []string, mounts bool) (*State, error) {
	paths, err := plan(shares)
	if err != nil {
		return nil, fmt.Errorf("protect git's hooks and config: %w", err)
	}
	st := &State{Mode: ModeMounts, Paths: paths}
	for _, sh := range shares {
		p := filepath.Join(sh, ".git")
		if _, err := confine.LstatNoSymlinks(p); errors.Is(err, fs.ErrNotExist) {
			st.Absent = append(st.Absent, p)
		}
	}
	if !mounts {
		st.Mode = ModeFingerprint
		if st.Fingerprint, err = fingerprint(paths); err != nil {
			return nil, fmt.Errorf("fingerprint git's hooks and config: %w", err)
		}
	}
	return st, nil
}

// Changed returns, in ModeFingerprint, the protected paths that differ
// from their fingerprint now (added, removed or changed), sorted; nothing
// in the other modes.
func (st *State) Changed() ([]string, error) {
	if st.Mode != ModeFingerprint {
		return nil, nil
	}
	now, err := fingerprint(st.Paths)
	if err != nil {
		return nil, err
	}
	return fingerprintDiff(st.Fingerprint, now), nil
}

// Accept takes the protected paths as they are now as the reference of
// Changed, once the user reviewed what changed.
func (st *State) Accept() error {
	if st.Mode != ModeFingerprint {
		return nil
	}
	fp, err := fingerprint(st.Paths)
	if err != nil {
		return err
	}
	st.Fingerprint = fp
	return nil
}

// Appeared returns the paths of st.Absent that exist now. A path whose
// directory is gone, or is now reached through a symlink (the share itself
// was swapped: the next start refuses it), has not appeared: nothing the
// guest wrote is there.
func (st *State) Appeared() []string {
	var out []string
	for _, p := range st.Absent {
		_, err := confine.LstatNoSymlinks(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			continue
		}
		out = append(out, p)
	}
	return out
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
