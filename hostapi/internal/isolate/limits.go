package isolate

import (
	"fmt"
	"time"

	"github.com/krunbox/krunbox/internal/confine"
)

// Limits bounds the work done on an isolated checkout, whose repository
// and files the guest writes: what Changes, Diff, Land and Unlanded read.
// A zero field takes its default. It is hostapi.GitLimits, which
// documents each bound and its default: the SDK converts one to the
// other, so the two keep the same fields.
type Limits struct {
	Files         int           // entries of the index, of the checkout, of one tree: 1 Mi
	PathBytes     int           // one path: 4096 bytes, git's PATH_MAX
	TreeDepth     int           // directories of a tree's path: 2048, git's core.maxTreeDepth
	PathsBytes    int64         // all the paths of the index, the checkout or a tree: 128 MiB
	IgnoreBytes   int64         // ignore files one walk reads: 1 MiB
	IgnoreMatches int64         // ignore patterns one walk tries: 4 Mi
	HashBytes     int64         // files one walk hashes: 512 MiB
	DiffBytes     int64         // files one Diff reads: 256 MiB
	DiffTime      time.Duration // one Diff's search for the smallest patches: 10 s
}

// DefaultLimits returns the default Limits.
func DefaultLimits() Limits {
	return Limits{
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
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
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

// LimitError reports an isolated checkout beyond one of its Limits: the
// SDK reports it as a hostapi.GitLimitError. It matches
// confine.ErrTooLarge.
type LimitError struct {
	// What crossed the bound, e.g. "entry 65 names a path of 4097
	// bytes or more".
	What string
	// Limit is the Limits field, e.g. "PathBytes", and Max its value.
	Limit string
	Max   int64
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s: over the bound GitLimits.%s = %d", e.What, e.Limit, e.Max)
}

// Is makes errors.Is(err, confine.ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == confine.ErrTooLarge }
