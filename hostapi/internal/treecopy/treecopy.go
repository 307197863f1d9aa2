// Package treecopy copies a directory tree, such as an image's root file
// system, as faithfully as the host allows and as cheaply as its file
// system can: cloned where it can share the data (clonefile on macOS,
// FICLONE reflinks on Linux), copied otherwise.
//
// A copy keeps the tree's file types (directories, regular files, symbolic
// links, FIFOs, and device nodes where the caller may make them), its hard
// links (as links within the copy, never to the source), permission bits
// with setuid, setgid and sticky, modification and access times, extended
// attributes (the user.containers.override_stat attribute that records
// ownership in a rootless tree among them) and, for a caller running as
// root, owners. Symbolic links are copied as links, never followed.
package treecopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// OverrideStatXattr is the extended attribute that holds a file's true
// owner and mode in a tree made without root (see package oci/flatten). A
// copy that cannot keep it fails rather than lose the ownership.
const OverrideStatXattr = "user.containers.override_stat"

// Method is how a tree was copied.
type Method string

// Methods, cheapest first.
const (
	// Clone: the whole tree cloned at once with clonefile(2) (macOS, on
	// APFS); no data copied.
	Clone Method = "clonefile"
	// Reflink: every regular file cloned with the FICLONE ioctl (Linux,
	// on btrfs, XFS or bcachefs); no data copied.
	Reflink Method = "reflink"
	// Plain: the data of the regular files was copied.
	Plain Method = "copy"
)

// Stats says what a copy did. After a Clone, only Method is set: the file
// system copied the tree in one call.
type Stats struct {
	Method Method
	// Dirs, Files, Symlinks and Others (FIFOs, devices, sockets) count
	// what was created; Hardlinks the further names of files already
	// copied.
	Dirs, Files, Symlinks, Others, Hardlinks int64
	// Bytes is the content of the regular files.
	Bytes int64
	// Cloned counts the regular files whose data was cloned (reflinked)
	// rather than copied.
	Cloned int64
	// XattrsSkipped counts extended attributes the copy could not set
	// (such as security.* ones without privilege). The ownership
	// attribute is never skipped.
	XattrsSkipped int64
}

// Copy copies the tree at src to dst, which must not exist, and syncs the
// file system it is on, so the copy is on disk when Copy returns. Copy
// tries, in order, to clone the whole tree (macOS), to reflink each file
// (Linux), and to copy each file's data, several files at once; a file
// system that refuses a clone is not asked again. A failed or interrupted
// Copy leaves part of the tree at dst: copy to a temporary name, and
// rename it into place once Copy returned, so that a partial copy is
// never taken for a whole.
func Copy(ctx context.Context, src, dst string) (*Stats, error) {
	st, err := copyTree(ctx, src, dst)
	if err == nil {
		err = syncFS(dst)
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return st, nil
}

// workers is how many regular files are copied at once: copies wait on
// the disk more than on the processor.
const workers = 4

func copyTree(ctx context.Context, src, dst string) (*Stats, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cloned, err := cloneTree(src, dst)
	if err != nil {
		return nil, err
	}
	if cloned {
		return &Stats{Method: Clone}, nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	c := &copier{ctx: gctx, files: g, links: map[fileID]string{}, root: os.Geteuid() == 0}
	err = c.copy(src, dst)
	if werr := g.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	// The further names of hard links once their files exist, then the
	// directories' metadata, deepest first: filling a directory changes
	// its times, and a read-only one could not be filled.
	for _, l := range c.hardlinks {
		if err := os.Link(l.first, l.dst); err != nil {
			return nil, err
		}
	}
	for _, d := range c.dirs {
		if err := c.setMetadata(d.src, d.dst, &d.st); err != nil {
			return nil, err
		}
	}
	c.stats.Method = Plain
	if c.stats.Cloned > 0 && c.stats.Cloned == c.stats.Files {
		c.stats.Method = Reflink
	}
	return &c.stats, nil
}

// fileID identifies a file, to find its hard links.
type fileID struct{ dev, ino uint64 }

// copier copies a tree: one goroutine walks it, making directories, links
// and special files, while regular files are copied by the group files.
type copier struct {
	ctx context.Context
	// root says the caller may give files their owners.
	root  bool
	files *errgroup.Group
	// cannotClone is set once the file system refused a clone.
	cannotClone atomic.Bool

	mu    sync.Mutex // guards stats, written by the files' copiers
	stats Stats

	// links maps the files with several names to their first copy.
	links map[fileID]string
	// hardlinks and dirs are what is done once every file is copied.
	hardlinks []hardlink
	dirs      []dir
}

type hardlink struct{ first, dst string }

// dir is a directory whose metadata is yet to be set.
type dir struct {
	src, dst string
	st       unix.Stat_t
}

// copy copies src to dst, and below it for a directory: it makes
// directories, symbolic links and special files itself, hands regular
// files to c.files, and leaves hard links and directories' metadata for
// later (c.hardlinks, c.dirs).
func (c *copier) copy(src, dst string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: src, Err: err}
	}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := c.copy(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		c.dirs = append(c.dirs, dir{src, dst, st})
		c.count(func(s *Stats) { s.Dirs++ })
		return nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			id := fileID{uint64(st.Dev), uint64(st.Ino)}
			if first, ok := c.links[id]; ok {
				c.hardlinks = append(c.hardlinks, hardlink{first, dst})
				c.count(func(s *Stats) { s.Hardlinks++ }) // the metadata is the first name's
				return nil
			}
			c.links[id] = dst
		}
		c.files.Go(func() error {
			cloned, err := c.copyFile(src, dst)
			if err == nil {
				err = c.setMetadata(src, dst, &st)
			}
			if err != nil {
				return err
			}
			c.count(func(s *Stats) {
				s.Files++
				s.Bytes += st.Size
				if cloned {
					s.Cloned++
				}
			})
			return nil
		})
		return nil
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		c.count(func(s *Stats) { s.Symlinks++ })
	default:
		if err := unix.Mknod(dst, uint32(st.Mode), int(st.Rdev)); err != nil {
			return &os.PathError{Op: "mknod", Path: dst, Err: err}
		}
		c.count(func(s *Stats) { s.Others++ })
	}
	return c.setMetadata(src, dst, &st)
}

// count updates the statistics.
func (c *copier) count(update func(*Stats)) {
	c.mu.Lock()
	update(&c.stats)
	c.mu.Unlock()
}

// copyFile creates dst with src's data: cloned if the file system can
// (cloned is then true), copied otherwise.
func (c *copier) copyFile(src, dst string) (cloned bool, err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, err
	}
	if !c.cannotClone.Load() {
		err = cloneFile(out, in)
		switch {
		case err == nil:
			return true, out.Close()
		case errors.Is(err, errCannotClone):
			c.cannotClone.Store(true)
		default:
			out.Close()
			return false, &os.PathError{Op: "clone", Path: dst, Err: err}
		}
	}
	// On Linux, copy_file_range: the kernel copies, and may still share
	// the data on file systems that can.
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, err
	}
	return false, out.Close()
}

// setMetadata gives dst src's owner (as root), mode, extended attributes
// and times, in that order: a change of owner clears the setuid and setgid
// bits and file capabilities, and every change but the times' touches the
// change time only.
func (c *copier) setMetadata(src, dst string, st *unix.Stat_t) error {
	symlink := uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK
	if c.root {
		if err := unix.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return &os.PathError{Op: "lchown", Path: dst, Err: err}
		}
	}
	if !symlink {
		if err := unix.Chmod(dst, uint32(st.Mode)&0o7777); err != nil {
			return &os.PathError{Op: "chmod", Path: dst, Err: err}
		}
	}
	if err := c.copyXattrs(src, dst); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: dst, Err: err}
	}
	return nil
}

// copyXattrs copies src's extended attributes to dst. One the file system
// or the caller's privileges do not allow is counted and skipped, except
// the ownership attribute.
func (c *copier) copyXattrs(src, dst string) error {
	names, err := listXattrs(src)
	if err != nil {
		return err
	}
	for _, name := range names {
		val, err := getXattr(src, name)
		if errors.Is(err, errNoXattr) {
			continue
		}
		if err != nil {
			return err
		}
		err = unix.Lsetxattr(dst, name, val, 0)
		if err == nil {
			continue
		}
		if name != OverrideStatXattr && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)) {
			c.count(func(s *Stats) { s.XattrsSkipped++ })
			continue
		}
		return &os.PathError{Op: "setxattr " + name, Path: dst, Err: err}
	}
	return nil
}

// listXattrs returns the names of path's extended attributes, none where
// the file system has none.
func listXattrs(path string) ([]string, error) {
	buf, err := readXattr(func(b []byte) (int, error) { return unix.Llistxattr(path, b) })
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "listxattr", Path: path, Err: err}
	}
	var names []string
	for len(buf) > 0 {
		i := 0
		for i < len(buf) && buf[i] != 0 {
			i++
		}
		if i > 0 {
			names = append(names, string(buf[:i]))
		}
		if i < len(buf) {
			i++
		}
		buf = buf[i:]
	}
	return names, nil
}

func getXattr(path, name string) ([]byte, error) {
	val, err := readXattr(func(b []byte) (int, error) { return unix.Lgetxattr(path, name, b) })
	if err != nil {
		return nil, &os.PathError{Op: "getxattr " + name, Path: path, Err: err}
	}
	return val, nil
}

// readXattr calls read with a buffer large enough for what it returns,
// which may grow between calls.
func readXattr(read func([]byte) (int, error)) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := read(buf)
		if err == nil {
			return buf[:n], nil
		}
		if !errors.Is(err, unix.ERANGE) {
			return nil, err
		}
		size, err := read(nil)
		if err != nil {
			return nil, err
		}
		buf = make([]byte, max(size, 2*len(buf)))
	}
}
