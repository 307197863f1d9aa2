package hostapi

import (
	"fmt"
	"strings"

	"github.com/krunbox/krunbox/hostapi/internal/gitprotect"
	"github.com/krunbox/krunbox/hostapi/vmm"
)

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

// gitShares returns the host paths of the read-write shares in which the
// host's git may run: the sandbox's own mounts. An isolated checkout is
// the guest's own repository: the host's git never runs there, so its
// config and hooks stay writable.
func (s *Sandbox) gitShares() []string {
	var out []string
	for _, m := range s.ownMounts() {
		if !m.ReadOnly {
			out = append(out, m.HostPath)
		}
	}
	return out
}

// protectGit plans the protection of the sandbox's git directories for a
// start with spec, puts the paths into spec where its runner can mount
// them, and records the plan (and, where it cannot, the fingerprint).
func (s *Sandbox) protectGit(spec *vmm.Spec) error {
	if prev, err := gitprotect.ReadState(s.dir); err == nil && prev != nil {
		if made := prev.Appeared(); len(made) > 0 {
			s.host.log.Warn("the guest made these git directories during its last session, with hooks and config of its choosing; from this start on they are protected: review them before running git there", "sandbox", s.name, "paths", made)
		}
	}
	st := &gitprotect.State{Mode: gitprotect.ModeOff}
	if !s.rec.Config.GitWritable {
		var err error
		if st, err = gitprotect.Protect(s.gitShares(), s.host.protectsPaths(spec.Root)); err != nil {
			return err
		}
		if st.Mode == gitprotect.ModeMounts {
			spec.Protect = st.Paths
		}
	}
	return st.Write(s.dir)
}

// GitProtection says how the sandbox's git directories were protected at
// its last start and, where they could not be made read-only, which
// protected paths changed since; in any mode, which git directories the
// guest made since in read-write shares that had none.
func (s *Sandbox) GitProtection() (*GitProtection, error) {
	st, err := gitprotect.ReadState(s.dir)
	if err != nil || st == nil {
		return &GitProtection{}, err
	}
	out := &GitProtection{Mode: GitProtectionMode(st.Mode)}
	for _, p := range st.Paths {
		out.Paths = append(out.Paths, ProtectedPath(p))
	}
	if out.Changed, err = st.Changed(); err != nil {
		return nil, err
	}
	out.Appeared = st.Appeared()
	return out, nil
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
	st, err := gitprotect.ReadState(s.dir)
	if err != nil || st == nil {
		return err
	}
	if err := st.Accept(); err != nil {
		return fmt.Errorf("sandbox %s: fingerprint git's hooks and config: %w", s.name, err)
	}
	return st.Write(s.dir)
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
