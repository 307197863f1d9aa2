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
)

// CopyIn copies the host file, directory tree or symbolic link src to the
// guest path dst, streamed through the agent. dst is the path the copy
// gets (its parent must exist): a file replaces a file there atomically, a
// directory is merged into a directory there. Permission bits (with
// setuid, setgid and sticky) are kept; symbolic links are copied as links,
// never followed; other special files are skipped with a warning in the
// client's log.
func (c *Client) CopyIn(ctx context.Context, src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if !fi.IsDir() {
		return c.copyEntryIn(ctx, src, dst, fi)
	}
	// Directories are filled at mode 0700 and given their own mode after,
	// so that a read-only directory can be filled.
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return c.copyEntryIn(ctx, p, target, info)
		}
		if err := c.MkdirAll(ctx, target, 0o700); err != nil {
			return err
		}
		dirs = append(dirs, dirMode{target, info.Mode()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := c.Chmod(ctx, dirs[i].path, dirs[i].mode); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
	}
	return nil
}

// copyEntryIn copies one host file or symbolic link to the guest.
func (c *Client) copyEntryIn(ctx context.Context, src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		w, err := c.Create(ctx, dst, &WriteOptions{Perm: fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)})
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, f); err != nil {
			w.Abort()
			return err
		}
		return w.Close()
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		err = c.Symlink(ctx, target, dst)
		if errors.Is(err, fs.ErrExist) {
			if err = c.Remove(ctx, dst); err == nil {
				err = c.Symlink(ctx, target, dst)
			}
		}
		return err
	}
	c.opts.log.Warn("copy: skipping a special file", "path", src, "mode", fi.Mode().String())
	return nil
}

// CopyOut copies the guest file, directory tree or symbolic link src to the
// host path dst, streamed through the agent. dst is the path the copy gets
// (its parent must exist): a file replaces a file there atomically, a
// directory is merged into a directory there.
//
// The guest is not trusted: nothing is written outside dst (a directory
// copy is confined to it with os.Root, so neither a link the guest made
// nor one already on the host leads out of it), links are copied as links
// and never followed, special files are skipped, and the setuid and setgid
// bits are dropped, since the copy belongs to the host user. Other
// permission bits are kept.
func (c *Client) CopyOut(ctx context.Context, src, dst string) error {
	fi, err := c.Lstat(ctx, src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	parent, err := os.OpenRoot(filepath.Dir(dst))
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer parent.Close()
	name := filepath.Base(dst)
	if !fi.IsDir() {
		err = c.copyEntryOut(ctx, src, parent, name, fi)
	} else {
		err = c.copyDirOut(ctx, src, parent, name, fi.Mode())
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// copyDirOut copies the guest directory src to name in root, and what it
// holds within it.
func (c *Client) copyDirOut(ctx context.Context, src string, root *os.Root, name string, mode fs.FileMode) error {
	if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	sub, err := root.OpenRoot(name)
	if err != nil {
		return err
	}
	defer sub.Close()
	entries, err := c.ReadDir(ctx, src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			return err
		}
		p := path.Join(src, e.Name())
		if e.IsDir() {
			err = c.copyDirOut(ctx, p, sub, e.Name(), info.Mode())
		} else {
			err = c.copyEntryOut(ctx, p, sub, e.Name(), info)
		}
		if err != nil {
			return err
		}
	}
	return root.Chmod(name, mode&(fs.ModePerm|fs.ModeSticky))
}

// copyEntryOut copies one guest file or symbolic link to name in root.
func (c *Client) copyEntryOut(ctx context.Context, src string, root *os.Root, name string, fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		return c.copyFileOut(ctx, src, root, name, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := c.Readlink(ctx, src)
		if err != nil {
			return err
		}
		tmp := "." + name + ".krunbox-link"
		root.Remove(tmp)
		if err := root.Symlink(target, tmp); err != nil {
			return err
		}
		if err := root.Rename(tmp, name); err != nil {
			root.Remove(tmp)
			return err
		}
		return nil
	}
	c.opts.log.Warn("copy: skipping a special file", "path", src, "mode", fi.Mode().String())
	return nil
}

// copyFileOut streams a guest file into a temporary file beside name in
// root, then renames it into place: a failed copy leaves what was there.
func (c *Client) copyFileOut(ctx context.Context, src string, root *os.Root, name string, mode fs.FileMode) error {
	r, err := c.Open(ctx, src)
	if err != nil {
		return err
	}
	defer r.Close()
	tmp := "." + name + ".krunbox-copy"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, mode)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		root.Remove(tmp)
	}
	return err
}
