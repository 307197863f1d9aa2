package hostapi

import (
	"fmt"
	"time"

	"github.com/krunbox/krunbox/internal/confine"
)

// GitLimits bounds the work krunbox does on an isolated checkout, whose
// repository and files the guest writes: what Changes (krunbox
// workspaces), Diff, Land and Unlanded read. A zero field takes its
// default. The defaults are far above what git writes for a large
// repository (100k files, paths of a few hundred bytes, gigabytes of
// history) and low enough that a hostile .git costs a laptop seconds and
// at most a few hundred MB.
type GitLimits struct {
	// Files bounds the entries of the index, the files and directories
	// of the checkout walked and the entries of one commit's tree
	// walked: 1 Mi by default.
	Files int
	// PathBytes bounds one path (and so each of its names) of the index,
	// of a tree or of the checkout: 4096 bytes by default, git's PATH_MAX.
	PathBytes int
	// TreeDepth bounds the directories a path of a tree goes through:
	// 2048 by default, git's core.maxTreeDepth.
	TreeDepth int
	// PathsBytes bounds the bytes of all the paths of the index, of the
	// checkout or of one commit's tree (and, apart, of the tree objects
	// read for it): 128 MiB by default (1 Mi paths of 128 bytes).
	PathsBytes int64
	// IgnoreBytes bounds the bytes of the ignore files (.gitignore,
	// .git/info/exclude) one walk of the checkout reads: 1 MiB by
	// default.
	IgnoreBytes int64
	// IgnoreMatches bounds the times one walk of the checkout tries an
	// ignore pattern on a path not tracked: 4 Mi by default (50k paths
	// under 80 patterns each), at most a second or two (go-git takes 0.3
	// to 0.7 µs a try).
	IgnoreMatches int64
	// HashBytes bounds the bytes of the files one walk of the checkout
	// hashes (those not tracked, or changed since the index was
	// written; each at most maxBlob): 512 MiB by default, a few seconds
	// (go-git's SHA-1, which detects collisions, hashes 100 to 250 MB/s).
	HashBytes int64
	// DiffBytes bounds the bytes of the files one Diff reads, both sides
	// of every file changed: 256 MiB by default, a patch no one reads
	// whole (naming paths narrows a diff to fewer files).
	DiffBytes int64
	// DiffTime bounds the time one Diff spends finding the smallest
	// patch of its files: 10 s by default. Past it, a file's change is
	// written as the deletion of all its lines and the insertion of all
	// the new ones: a correct patch, only a longer one.
	DiffTime time.Duration
}

// DefaultGitLimits returns the default GitLimits.
func DefaultGitLimits() GitLimits {
	return GitLimits{
		Files:         maxWorkFiles,
		PathBytes:     4096,
		TreeDepth:     2048,
		PathsBytes:    128 << 20,
		IgnoreBytes:   1 << 20,
		IgnoreMatches: 4 << 20,
		HashBytes:     512 << 20,
		DiffBytes:     256 << 20,
		DiffTime:      10 * time.Second,
	}
}

// withDefaults returns l with its zero fields set to their defaults.
func (l GitLimits) withDefaults() GitLimits {
	d := DefaultGitLimits()
	if l.Files <= 0 {
		l.Files = d.Files
	}
	if l.PathBytes <= 0 {
		l.PathBytes = d.PathBytes
	}
	if l.TreeDepth <= 0 {
		l.TreeDepth = d.TreeDepth
	}
	if l.PathsBytes <= 0 {
		l.PathsBytes = d.PathsBytes
	}
	if l.IgnoreBytes <= 0 {
		l.IgnoreBytes = d.IgnoreBytes
	}
	if l.IgnoreMatches <= 0 {
		l.IgnoreMatches = d.IgnoreMatches
	}
	if l.HashBytes <= 0 {
		l.HashBytes = d.HashBytes
	}
	if l.DiffBytes <= 0 {
		l.DiffBytes = d.DiffBytes
	}
	if l.DiffTime <= 0 {
		l.DiffTime = d.DiffTime
	}
	return l
}

// GitLimitError reports an isolated checkout beyond one of its
// GitLimits. It matches confine.ErrTooLarge.
type GitLimitError struct {
	// What crossed the bound, e.g. "entry 65 names a path of 4097
	// bytes or more".
	What string
	// Limit is the GitLimits field, e.g. "PathBytes", and Max its value.
	Limit string
	Max   int64
}

func (e *GitLimitError) Error() string {
	return fmt.Sprintf("%s: over the bound GitLimits.%s = %d", e.What, e.Limit, e.Max)
}

// Is makes errors.Is(err, confine.ErrTooLarge) true.
func (e *GitLimitError) Is(target error) bool { return target == confine.ErrTooLarge }

// Hint tells the user what to do.
func (e *GitLimitError) Hint() string {
	switch e.Limit {
	case "DiffBytes":
		return "name some of its paths (krunbox diff NAME PATH...) to see part of it"
	case "IgnoreMatches", "HashBytes":
		return "files the sandbox's index does not hold are read at every look: commit them in the sandbox, " +
			"ignore them (.gitignore) or remove them"
	}
	return "no repository git writes comes near this bound: the sandbox's repository is damaged or hostile; " +
		"reset it in the sandbox (git reset), or remove the sandbox"
}
