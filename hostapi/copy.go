package hostapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/krunbox/krunbox/internal/confine"
)

// CopyIn copies the host file, directory tree or symbolic link src to the
// guest path dst, streamed through the agent. dst is the path the copy
// gets (its parent must exist): a file replaces a file there atomically, a
// directory is merged into a directory there. Permission bits (with
// setuid, setgid and sticky) are kept; symbolic links are copied as links,
// never followed, src itself included (like cp -P); FIFOs, sockets and
// devices are skipped with a warning in the client's log, never opened
// for a blocking read.
//
// The host tree may be one the guest writes (the workspace) while it is
// copied, so it is walked by descriptors: src's parent directory is
// resolved by path once, then every entry is opened below its parent's
// descriptor without following a symlink, its type is taken from the open
// descriptor, directories are listed from theirs and files are read from
// theirs, at most the size they had when opened. A directory swapped for
// a symlink during the copy is copied as that symlink, never followed.
func (c *Client) CopyIn(ctx context.Context, src, dst string) error {
	dir, name, err := confine.OpenParent(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer dir.Close()
	var dirs []dirMode
	if err := c.copyInAt(ctx, dir, name, dst, &dirs); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := c.Chmod(ctx, dirs[i].path, dirs[i].mode); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
	}
	return nil
}

// dirMode is a guest directory's mode, given to it once it is filled:
// directories are filled at mode 0700, so that a read-only one can be.
type dirMode struct {
	path string
	mode fs.FileMode
}

// copyInAt copies the entry name of the host directory dir to the guest
// path dst, and records the directories it makes in dirs.
func (c *Client) copyInAt(ctx context.Context, dir *os.File, name, dst string, dirs *[]dirMode) error {
	f, err := confine.OpenAt(dir, name)
	switch {
	case errors.Is(err, confine.ErrSymlink):
		target, err := confine.ReadlinkAt(dir, name)
		if err != nil {
			return err
		}
		return c.symlinkIn(ctx, target, dst)
	case errors.Is(err, confine.ErrNotRegular):
		c.opts.log.Warn("copy: skipping a special file", "path", filepath.Join(dir.Name(), name), "mode", "socket")
		return nil
	case err != nil:
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	switch {
	case fi.Mode().IsRegular():
		return c.fileIn(ctx, f, fi, dst)
	case fi.IsDir():
		return c.dirIn(ctx, f, fi.Mode(), dst, dirs)
	}
	c.opts.log.Warn("copy: skipping a special file", "path", f.Name(), "mode", fi.Mode().String())
	return nil
}

// fileIn copies the open host file f, as large as fi says, to the guest.
func (c *Client) fileIn(ctx context.Context, f *os.File, fi fs.FileInfo, dst string) error {
	w, err := c.Create(ctx, dst, &WriteOptions{Perm: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)})
	if err != nil {
		return err
	}
	// What the file holds when opened: one that grows while it is copied
	// (a guest appending to it) does not keep the copy going.
	if _, err := io.Copy(w, io.LimitReader(f, fi.Size())); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// dirIn copies the open host directory d, and what it holds, to the guest.
func (c *Client) dirIn(ctx context.Context, d *os.File, mode fs.FileMode, dst string, dirs *[]dirMode) error {
	if err := c.MkdirAll(ctx, dst, 0o700); err != nil {
		return err
	}
	*dirs = append(*dirs, dirMode{dst, mode})
	for {
		entries, err := d.ReadDir(1024)
		for _, e := range entries {
			if t := e.Type(); t&(fs.ModeNamedPipe|fs.ModeSocket|fs.ModeDevice|fs.ModeIrregular) != 0 {
				// Known special from the listing: not even opened.
				c.opts.log.Warn("copy: skipping a special file", "path", filepath.Join(d.Name(), e.Name()), "mode", t.String())
				continue
			}
			if err := c.copyInAt(ctx, d, e.Name(), path.Join(dst, e.Name()), dirs); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// symlinkIn makes dst a guest symbolic link to target, replacing what is
// there.
func (c *Client) symlinkIn(ctx context.Context, target, dst string) error {
	err := c.Symlink(ctx, target, dst)
	if errors.Is(err, fs.ErrExist) {
		if err = c.Remove(ctx, dst); err == nil {
			err = c.Symlink(ctx, target, dst)
		}
	}
	return err
}

// CopyOut copies the guest file, directory tree or symbolic link src to the
// host path dst, streamed through the agent. dst is the path the copy
// gets (its parent must exist): a file replaces a file there atomically, a
// directory is merged into a directory there. See CopyOutAt for what the
// guest cannot do to the host.
func (c *Client) CopyOut(ctx context.Context, src, dst string) error {
	dir, name, err := confine.OpenParent(dst)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer dir.Close()
	return c.CopyOutAt(ctx, src, dir, name)
}

// CopyOutAt copies the guest file, directory tree or symbolic link src to
// name, one path component, in the open host directory dir, as CopyOut
// does.
//
// The guest is not trusted, and may be writing the host tree the copy
// goes to (when it is in the workspace): nothing is written through a
// symlink, whoever made it. A name that is a symlink is refused; below
// it, every entry is created below its parent directory's descriptor,
// new files and links under a fresh name (O_EXCL, O_NOFOLLOW) renamed
// over the entry, so that a symlink found at an entry's place is replaced,
// never followed, and directories are opened without following one (a
// symlink where a directory goes is replaced by the directory). Links are
// copied as links, FIFOs, sockets and devices are skipped, a file gets at
// most the size the guest gave when it was opened, and the setuid and
// setgid bits are dropped, since the copy belongs to the host user. Other
// permission bits are kept. The directory listings held at once count
// together against AgentLimits.MaxDirEntries and MaxDirBytes, as in
// WalkDir.
func (c *Client) CopyOutAt(ctx context.Context, src string, dir *os.File, name string) error {
	if name == "" || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("copy %s: %q is not a name in %s", src, name, dir.Name())
	}
	b := c.dirBudget()
	if err := c.copyOutAt(ctx, src, dir, name, &b); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

func (c *Client) copyOutAt(ctx context.Context, src string, dir *os.File, name string, b *dirBudget) error {
	if t, err := confine.TypeAt(dir, name); err == nil && t&fs.ModeSymlink != 0 {
		return &fs.PathError{Op: "copy to", Path: filepath.Join(dir.Name(), name), Err: errors.New("a symbolic link: refusing to write through or over it (give the path it points to)")}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	fi, err := c.Lstat(ctx, src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return c.dirOut(ctx, src, dir, name, fi.Mode(), b)
	}
	return c.entryOut(ctx, src, dir, name, fi)
}

// dirOut copies the guest directory src to name in dir, and what it holds
// within it, its listing and those of the directories it is in taken from
// b.
func (c *Client) dirOut(ctx context.Context, src string, dir *os.File, name string, mode fs.FileMode, b *dirBudget) error {
	d, err := confine.MkdirAt(dir, name, 0o700)
	if err != nil {
		return err
	}
	defer d.Close()
	entries, n, err := c.readDir(ctx, src, b)
	if err != nil {
		return err
	}
	defer b.release(len(entries), n)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return err
		}
		p := path.Join(src, e.Name())
		if e.IsDir() {
			err = c.dirOut(ctx, p, d, e.Name(), info.Mode(), b)
		} else {
			err = c.entryOut(ctx, p, d, e.Name(), info)
		}
		if err != nil {
			return err
		}
	}
	if err := d.Chmod(mode & (fs.ModePerm | fs.ModeSticky)); err != nil {
		return err
	}
	return nil
}

// entryOut copies one guest file or symbolic link to name in dir.
func (c *Client) entryOut(ctx context.Context, src string, dir *os.File, name string, fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		return c.fileOut(ctx, src, dir, name, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := c.Readlink(ctx, src)
		if err != nil {
			return err
		}
		return confine.ReplaceAt(dir, name, func(tmp string) error { return confine.SymlinkAt(target, dir, tmp) })
	}
	c.opts.log.Warn("copy: skipping a special file", "path", src, "mode", fi.Mode().String())
	return nil
}

// fileOut streams a guest file into a new file beside name in dir, then
// renames it over name: a failed copy leaves what was there.
func (c *Client) fileOut(ctx context.Context, src string, dir *os.File, name string, mode fs.FileMode) error {
	r, err := c.Open(ctx, src)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, _ := r.Stat()
	return confine.ReplaceAt(dir, name, func(tmp string) error {
		f, err := confine.CreateAt(dir, tmp)
		if err != nil {
			return err
		}
		// No more than the guest said the file holds when it was opened:
		// a guest that keeps sending (a FIFO swapped in, a file it appends
		// to) cannot keep the copy going.
		_, err = io.Copy(f, io.LimitReader(r, max(fi.Size(), 0)))
		if err == nil {
			err = f.Chmod(mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	})
}
