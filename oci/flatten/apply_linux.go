package flatten

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	// maxCachedDirs bounds the parent-directory handle cache.
	maxCachedDirs = 256
	copyBufSize   = 1 << 20
)

// Applier applies layers to one root directory. It is not safe for
// concurrent use.
type Applier struct {
	opts       Options
	parentFD   int // O_PATH handle on the directory holding the root
	rootBase   string
	root       int // O_PATH handle on the root
	umask      uint32
	euid, egid int
	buf        []byte
	stats      Stats

	dirs      map[string]int // clean relative path -> O_PATH handle
	dirsStale bool           // a directory was removed: flush dirs before the next entry

	// Per layer.
	written  map[string]struct{} // paths created by this layer, and their ancestors
	deferred []dirMeta
}

// dirMeta is the metadata of a directory entry, applied at the end of the
// layer so that creating its children does not disturb it.
type dirMeta struct {
	parent, base string
	hdr          *tar.Header
}

// NewApplier returns an Applier for the existing directory root. Layers are
// applied to it in the order ApplyLayer is called.
func NewApplier(root string, opts Options) (*Applier, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	parent, base := filepath.Dir(abs), filepath.Base(abs)
	pfd, err := unix.Open(parent, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: parent, Err: err}
	}
	rfd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(pfd)
		return nil, &os.PathError{Op: "open", Path: abs, Err: err}
	}
	// Probe openat2 once so that an old kernel gets a clear error.
	probe, err := unix.Openat2(rfd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveFlags})
	if err != nil {
		unix.Close(rfd)
		unix.Close(pfd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, ErrUnsupported
		}
		return nil, fmt.Errorf("openat2 %s: %w", abs, err)
	}
	unix.Close(probe)
	return &Applier{
		opts:     opts.withDefaults(),
		parentFD: pfd,
		rootBase: base,
		root:     rfd,
		umask:    processUmask(),
		euid:     os.Geteuid(),
		egid:     os.Getegid(),
		buf:      make([]byte, copyBufSize),
		dirs:     make(map[string]int),
	}, nil
}

const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Stats returns what the Applier did so far.
func (a *Applier) Stats() Stats { return a.stats }

// Close releases the Applier's handles.
func (a *Applier) Close() error {
	a.flushDirs()
	unix.Close(a.root)
	return unix.Close(a.parentFD)
}

// ApplyLayer applies one uncompressed layer tar stream. On error the tree
// is left partly applied; callers apply into a staging directory and
// discard it.
func (a *Applier) ApplyLayer(ctx context.Context, r io.Reader) error {
	a.written = make(map[string]struct{})
	a.deferred = a.deferred[:0]
	tr := tar.NewReader(&countingReader{r: r, a: a})
	for {
		if a.stats.Entries%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var le *LimitError
			if errors.As(err, &le) {
				return le
			}
			return fmt.Errorf("read layer tar: %w", err)
		}
		a.stats.Entries++
		if a.stats.Entries > a.opts.MaxEntries {
			return &LimitError{What: "entries", Limit: a.opts.MaxEntries}
		}
		if a.dirsStale || len(a.dirs) > maxCachedDirs {
			a.flushDirs()
		}
		if err := a.entry(hdr, tr); err != nil {
			var le *LimitError
			if errors.As(err, &le) {
				return le
			}
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	return a.finishLayer()
}

// countingReader enforces MaxBytes on the uncompressed stream.
type countingReader struct {
	r io.Reader
	a *Applier
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.a.stats.Bytes += int64(n)
	if c.a.stats.Bytes > c.a.opts.MaxBytes {
		return n, &LimitError{What: "size", Limit: c.a.opts.MaxBytes}
	}
	return n, err
}

// cleanName turns a tar entry name into a clean path relative to the root
// ("." for the root itself), refusing names that climb out of it.
func cleanName(name string) (string, error) {
	n := strings.TrimLeft(name, "/")
	if n == "" {
		return ".", nil
	}
	c := path.Clean(n)
	if c != "." && !filepath.IsLocal(c) {
		return "", fmt.Errorf("path %q leaves the root file system", name)
	}
	return c, nil
}

func (a *Applier) entry(hdr *tar.Header, tr *tar.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if p == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("refusing to change the type of the root directory (tar type %q)", hdr.Typeflag)
		}
		a.deferred = append(a.deferred, dirMeta{parent: "", base: "", hdr: hdr})
		return nil
	}
	parent, base := path.Dir(p), path.Base(p)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(parent, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo, tar.TypeChar, tar.TypeBlock:
	case tar.TypeGNUSparse, tar.TypeCont:
		// Regular files: archive/tar expands the holes of old GNU sparse
		// files, and POSIX says contiguous files are regular files to
		// readers that do not support them.
	default:
		// Dropping it would change the image without a trace.
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	pfd, err := a.mkdirAll(parent)
	if err != nil {
		return err
	}
	a.markWritten(p)
	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.dir(pfd, parent, base, hdr)
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont: // the reader turns the old TypeRegA into TypeReg
		return a.file(pfd, base, hdr, tr)
	case tar.TypeSymlink:
		return a.symlink(pfd, base, hdr)
	case tar.TypeLink:
		return a.hardlink(pfd, p, base, hdr)
	case tar.TypeFifo:
		return a.fifo(pfd, base, hdr)
	default: // char and block devices: the guest has devtmpfs.
		a.stats.Devices++
		return a.remove(pfd, base)
	}
}

// markWritten records p and its ancestors as created by the current layer.
func (a *Applier) markWritten(p string) {
	for p != "." {
		if _, ok := a.written[p]; ok {
			return
		}
		a.written[p] = struct{}{}
		p = path.Dir(p)
	}
}

func (a *Applier) isWritten(p string) bool {
	_, ok := a.written[p]
	return ok
}

// lookupDir returns a handle on the directory p (relative, clean) inside
// the root, following symbolic links as if the root were "/".
func (a *Applier) lookupDir(p string) (int, error) {
	if p == "." {
		return a.root, nil
	}
	if fd, ok := a.dirs[p]; ok {
		return fd, nil
	}
	var fd int
	var err error
	for range 16 {
		fd, err = unix.Openat2(a.root, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags})
		if err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, err
	}
	a.dirs[p] = fd
	return fd, nil
}

// mkdirAll returns a handle on directory p, creating missing directories.
func (a *Applier) mkdirAll(p string) (int, error) {
	fd, err := a.lookupDir(p)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT {
		return -1, fmt.Errorf("directory %q: %w", p, err)
	}
	pfd, err := a.mkdirAll(path.Dir(p))
	if err != nil {
		return -1, err
	}
	base := path.Base(p)
	if err := unix.Mkdirat(pfd, base, 0o755); err != nil && err != unix.EEXIST {
		return -1, fmt.Errorf("create directory %q: %w", p, err)
	} else if err == nil {
		a.stats.Dirs++
		if a.opts.Rootless {
			a.setOverride(pfd, base, 0, 0, 0o755, "dir")
		}
	}
	fd, err = a.lookupDir(p)
	if err != nil {
		return -1, fmt.Errorf("directory %q (a dangling symbolic link?): %w", p, err)
	}
	return fd, nil
}

// flushDirs closes every cached directory handle.
func (a *Applier) flushDirs() {
	for _, fd := range a.dirs {
		unix.Close(fd)
	}
	clear(a.dirs)
	a.dirsStale = false
}

// remove deletes base in the directory pfd, whatever its type; a missing
// name is not an error.
func (a *Applier) remove(pfd int, base string) error {
	err := unix.Unlinkat(pfd, base, 0)
	switch err {
	case nil, unix.ENOENT:
		return nil
	case unix.EISDIR:
		a.dirsStale = true
		return removeAllAt(pfd, base)
	default:
		return fmt.Errorf("remove %q: %w", base, err)
	}
}

// removeAllAt removes the directory name in dfd and everything below it,
// without following symbolic links.
func removeAllAt(dfd int, name string) error {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return fmt.Errorf("open %q: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			if err := unix.Unlinkat(fd, n, 0); err == unix.EISDIR {
				if err := removeAllAt(fd, n); err != nil {
					return err
				}
			} else if err != nil && err != unix.ENOENT {
				return fmt.Errorf("remove %q: %w", n, err)
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove %q: %w", name, err)
	}
	return nil
}

func (a *Applier) whiteout(parent, base string) error {
	a.stats.Whiteouts++
	if base == opaqueMarker {
		return a.opaque(parent)
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("invalid whiteout %q", base)
	}
	target := path.Join(parent, name)
	pfd, err := a.lookupDir(parent)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil // nothing to hide
	} else if err != nil {
		return fmt.Errorf("whiteout %q: %w", target, err)
	}
	if !a.isWritten(target) {
		return a.remove(pfd, name)
	}
	// Whiteouts only hide lower layers, not entries of their own layer,
	// whatever their order: a file this layer wrote stays, and a directory
	// this layer wrote (or wrote into) loses only what lower layers had in
	// it, as with an opaque marker.
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
		return nil
	} else if err != nil {
		return fmt.Errorf("whiteout %q: %w", target, err)
	}
	return a.clearLower(fd, target)
}

// opaque hides every lower-layer child of dir, recursively, keeping what the
// current layer created whatever the order of the entries.
func (a *Applier) opaque(dir string) error {
	pfd, err := a.lookupDir(dir)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil
	} else if err != nil {
		return fmt.Errorf("opaque directory %q: %w", dir, err)
	}
	fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opaque directory %q: %w", dir, err)
	}
	return a.clearLower(fd, dir)
}

// clearLower removes the children of the directory fd (at path dir) that
// the current layer did not create, recursing into those it did. It closes
// fd.
func (a *Applier) clearLower(fd int, dir string) error {
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read directory %q: %w", dir, err)
	}
	for _, n := range names {
		child := path.Join(dir, n)
		if !a.isWritten(child) {
			if err := a.remove(fd, n); err != nil {
				return err
			}
			continue
		}
		cfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			continue
		} else if err != nil {
			return fmt.Errorf("open %q: %w", child, err)
		}
		if err := a.clearLower(cfd, child); err != nil {
			return err
		}
	}
	return nil
}

// replace runs create; when the name exists it removes it first (OCI
// "changeset over existing files": unlink, then recreate).
func (a *Applier) replace(pfd int, base string, create func() error) error {
	err := create()
	if err != unix.EEXIST {
		return err
	}
	if err := a.remove(pfd, base); err != nil {
		return err
	}
	return create()
}

func (a *Applier) dir(pfd int, parent, base string, hdr *tar.Header) error {
	err := unix.Mkdirat(pfd, base, 0o700)
	if err == unix.EEXIST {
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := a.remove(pfd, base); err != nil {
				return err
			}
			err = unix.Mkdirat(pfd, base, 0o700)
		} else {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	a.stats.Dirs++
	a.deferred = append(a.deferred, dirMeta{parent: parent, base: base, hdr: hdr})
	return nil
}

func (a *Applier) file(pfd int, base string, hdr *tar.Header, tr *tar.Reader) error {
	if hdr.Size < 0 || hdr.Size > a.opts.MaxBytes-a.stats.FileBytes {
		return &LimitError{What: "size", Limit: a.opts.MaxBytes}
	}
	perm := a.diskMode(hdr, false)
	var fd int
	err := a.replace(pfd, base, func() error {
		var err error
		fd, err = unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm&0o777)
		return err
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	defer func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}()
	for {
		n, rerr := tr.Read(a.buf)
		if n > 0 {
			if err := writeAll(fd, a.buf[:n]); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			a.stats.FileBytes += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("read: %w", rerr)
		}
	}
	if err := a.chown(func(uid, gid int) error { return unix.Fchown(fd, uid, gid) }, hdr); err != nil {
		return err
	}
	// The mode given to openat holds unless the umask took bits from it;
	// set-id bits it cannot carry, and a chown would clear them anyway.
	if perm&^0o777 != 0 || perm&a.umask != 0 {
		if err := unix.Fchmod(fd, perm); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	a.xattrs(fd, hdr, "file")
	err = unix.Close(fd)
	fd = -1
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	a.stats.Files++
	return setTimes(pfd, base, hdr)
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (a *Applier) symlink(pfd int, base string, hdr *tar.Header) error {
	err := a.replace(pfd, base, func() error { return unix.Symlinkat(hdr.Linkname, pfd, base) })
	if err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := a.chown(func(uid, gid int) error {
		return unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
	}, hdr); err != nil {
		return err
	}
	a.stats.Symlinks++
	return setTimes(pfd, base, hdr)
}

func (a *Applier) hardlink(pfd int, p, base string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link: %w", err)
	}
	if target == "." {
		return fmt.Errorf("hard link to the root directory")
	}
	if target == p {
		return nil
	}
	tpfd, err := a.lookupDir(path.Dir(target))
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
	}
	err = a.replace(pfd, base, func() error { return unix.Linkat(tpfd, path.Base(target), pfd, base, 0) })
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
	}
	a.stats.Hardlinks++
	return nil
}

func (a *Applier) fifo(pfd int, base string, hdr *tar.Header) error {
	perm := a.diskMode(hdr, false)
	err := a.replace(pfd, base, func() error { return unix.Mknodat(pfd, base, unix.S_IFIFO|(perm&0o777), 0) })
	if err != nil {
		return fmt.Errorf("mkfifo: %w", err)
	}
	if err := a.chown(func(uid, gid int) error { return unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW) }, hdr); err != nil {
		return err
	}
	if err := unix.Fchmodat(pfd, base, perm, 0); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return setTimes(pfd, base, hdr)
}

// diskMode is the mode a file or directory gets on disk: the image's in
// rootful mode (without set-id bits with DropSetID); without set-id bits
// and with the owner's access kept in rootless mode.
func (a *Applier) diskMode(hdr *tar.Header, dir bool) uint32 {
	m := uint32(hdr.Mode) & 0o7777
	if a.opts.DropSetID || a.opts.Rootless {
		m &^= 0o6000
	}
	if !a.opts.Rootless {
		return m
	}
	if dir {
		return m | 0o700
	}
	return m | 0o600
}

// chown applies the entry's owner in rootful mode, when it differs from the
// owner a new file gets anyway.
func (a *Applier) chown(fn func(uid, gid int) error, hdr *tar.Header) error {
	if a.opts.Rootless || (hdr.Uid == a.euid && hdr.Gid == a.egid) {
		return nil
	}
	if err := fn(hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown %d:%d: %w (run as root, or flatten rootless)", hdr.Uid, hdr.Gid, err)
	}
	return nil
}

// xattrs applies the entry's extended attributes to fd and, in rootless
// mode, records the true ownership.
func (a *Applier) xattrs(fd int, hdr *tar.Header, typ string) {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if !a.allowXattr(name) {
			a.stats.XattrsSkipped++
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
			a.stats.XattrsSkipped++
			slog.Debug("cannot set extended attribute", "file", hdr.Name, "xattr", name, "err", err)
		}
	}
	if a.opts.Rootless {
		v := overrideValue(hdr.Uid, hdr.Gid, uint32(hdr.Mode)&0o7777, typ)
		if err := unix.Fsetxattr(fd, OverrideStatXattr, []byte(v), 0); err != nil {
			a.stats.XattrsSkipped++
			slog.Warn("cannot record ownership in an extended attribute", "file", hdr.Name, "err", err)
		}
	}
}

// setOverride records ownership for the directory base in pfd (rootless
// mode, directories created implicitly).
func (a *Applier) setOverride(pfd int, base string, uid, gid int, mode uint32, typ string) {
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if err := unix.Fsetxattr(fd, OverrideStatXattr, []byte(overrideValue(uid, gid, mode, typ)), 0); err != nil {
		a.stats.XattrsSkipped++
	}
}

func overrideValue(uid, gid int, mode uint32, typ string) string {
	return fmt.Sprintf("%d:%d:%04o:%s", uid, gid, mode&0o7777, typ)
}

func (a *Applier) allowXattr(name string) bool {
	switch {
	case name == OverrideStatXattr:
		return false // ours to write; an image must not forge it
	case strings.HasPrefix(name, "user."):
		return true
	case a.opts.Rootless:
		return false
	case name == "security.capability":
		return true
	default: // trusted.*, security.selinux, system.* ...
		return false
	}
}

func setTimes(pfd int, base string, hdr *tar.Header) error {
	mtime := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	atime := mtime
	if !hdr.AccessTime.IsZero() {
		atime = unix.NsecToTimespec(hdr.AccessTime.UnixNano())
	}
	if hdr.ModTime.IsZero() {
		mtime = unix.NsecToTimespec(time.Unix(0, 0).UnixNano())
	}
	if err := unix.UtimesNanoAt(pfd, base, []unix.Timespec{atime, mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// finishLayer applies the deferred directory metadata of the layer.
func (a *Applier) finishLayer() error {
	if a.dirsStale {
		a.flushDirs()
	}
	for _, d := range a.deferred {
		pfd, base := a.parentFD, a.rootBase // parent "" is the root itself
		if d.parent != "" {
			var err error
			if pfd, err = a.lookupDir(d.parent); err != nil {
				continue // removed later in the layer
			}
			base = d.base
		}
		if err := a.dirMeta(pfd, base, d.hdr); err != nil {
			return fmt.Errorf("directory %q: %w", d.hdr.Name, err)
		}
	}
	a.deferred = a.deferred[:0]
	a.written = nil
	return nil
}

func (a *Applier) dirMeta(pfd int, base string, hdr *tar.Header) error {
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP || err == unix.ENOENT {
		return nil // replaced later in the layer
	} else if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := a.chown(func(uid, gid int) error { return unix.Fchown(fd, uid, gid) }, hdr); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, a.diskMode(hdr, true)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	a.xattrs(fd, hdr, "dir")
	return setTimes(pfd, base, hdr)
}

// processUmask reads the umask without changing it (Linux 4.7+).
func processUmask() uint32 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o777 // unknown: always chmod
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
}
