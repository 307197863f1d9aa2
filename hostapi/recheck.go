package hostapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"github.com/krunbox/krunbox/hostapi/internal/gitprotect"
	"github.com/krunbox/krunbox/internal/confine"
)

// checkMounts checks the sandbox's recorded mounts again before a start,
// as Create checked them: the guest writes the workspace (and the git
// directories shared with it), so since the sandbox was created it may
// have replaced a shared directory, or a directory on the way to one, with
// a symlink to any host directory, or rewritten the .git file. Each host
// path must still be a directory reached with no symlink in any component
// (paths were resolved at create), none may be, hold or lie within
// krunbox's own directories, and the git directories the workspace needs
// outside it must be among the recorded shares. The runner opens each
// share the same way again and shares what it opened.
func (s *Sandbox) checkMounts() error {
	for _, m := range s.rec.Mounts {
		dir, err := confine.OpenDirNoSymlinks(m.HostPath)
		if err != nil {
			return &shareChangedError{name: s.name, err: fmt.Errorf("%w %s: changed since the sandbox was created (%s): not sharing it", ErrInvalidMount, m.HostPath, whatChanged(m.HostPath, err))}
		}
		dir.Close()
	}
	if err := refuseExposure(s.ownMounts(), s.host.ownDirs()); err != nil {
		return &shareChangedError{name: s.name, err: err}
	}
	if s.rec.Config.Workspace == "" || len(s.rec.Mounts) == 0 {
		return nil
	}
	ws := s.rec.Mounts[0].HostPath // sandboxMounts puts the workspace first
	dirs, err := gitprotect.DirsOutside(ws)
	if err != nil {
		return &shareChangedError{name: s.name, err: fmt.Errorf("%w: workspace %s: %w", ErrInvalidMount, ws, err)}
	}
	for _, d := range dirs {
		if !slices.ContainsFunc(s.rec.Mounts, func(m Mount) bool { return confine.Within(m.HostPath, d) }) {
			return &shareChangedError{name: s.name, err: fmt.Errorf("%w: the .git file of workspace %s now names %s, which was not shared when the sandbox was created: not sharing it", ErrInvalidMount, ws, d)}
		}
	}
	return nil
}

// whatChanged says in words why the recorded share path p could not be
// opened with no symlink on the way.
func whatChanged(p string, err error) string {
	switch {
	case errors.Is(err, syscall.ELOOP):
		return "a directory on its way is now a symlink"
	case errors.Is(err, fs.ErrNotExist):
		return "it no longer exists"
	case errors.Is(err, syscall.ENOTDIR):
		// O_NOFOLLOW|O_DIRECTORY: a last symlink is ENOTDIR too.
		if fi, lerr := os.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "it is now a symlink"
		}
		return "it, or a directory on its way, is no longer a directory"
	}
	return fmt.Sprintf("it cannot be opened (%v)", err)
}

// shareChangedError refuses to start a sandbox whose shares are no longer
// what was checked when it was created.
type shareChangedError struct {
	name string
	err  error
}

func (e *shareChangedError) Error() string { return e.err.Error() }
func (e *shareChangedError) Unwrap() error { return e.err }

// Hint says what to do.
func (e *shareChangedError) Hint() string {
	return fmt.Sprintf("check what changed there (the guest can write the workspace); to share the directories as they are now, remove the sandbox ('krunbox rm %s') and create it again", e.name)
}
