package isolate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/krunbox/krunbox/internal/confine"
)

// maxExport bounds the bytes of the files one Export copies.
const maxExport = 8 << 30

// Export copies the files and directories paths (relative to the
// project, or absolute below it) of the checkout, as they are now, into
// the new directory dir, which must not exist. They
// are read below the checkout, at most maxExport bytes in all, with no
// symlink followed; a symlink is not copied (it is listed in the error)
// and neither is anything but regular files and directories (nor the
// checkout's .git).
func (c *Checkout) Export(ctx context.Context, dir string, paths []string) error {
	if len(paths) == 0 {
		return errors.New("export: no path")
	}
	rel, err := c.projectPaths(paths)
	if err != nil {
		return fmt.Errorf("export from %s: %w", c.Name, err)
	}
	src, err := confine.OpenRootNoSymlinks(c.path(WorkspaceDir))
	if err != nil {
		return fmt.Errorf("export from %s: %w", c.Name, err)
	}
	defer src.Close()
	for _, p := range rel {
		if _, err := src.Lstat(p); err != nil {
			return fmt.Errorf("export from %s: %w", c.Name, err)
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("export from %s: %s exists: name a new directory", c.Name, dir)
		}
		return fmt.Errorf("export from %s: %w", c.Name, err)
	}
	dst, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer dst.Close()
	var skipped []string
	var copied int64
	var copyPath func(p string) error
	copyPath = func(p string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := src.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			if p == ".git" {
				return nil
			}
			if err := confine.MkdirAll(dst, p, 0o755, false); err != nil {
				return err
			}
			d, err := src.OpenFile(p, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
			if err != nil {
				return err
			}
			names, err := d.Readdirnames(-1)
			d.Close()
			if err != nil {
				return err
			}
			slices.Sort(names)
			for _, n := range names {
				if err := copyPath(path.Join(p, n)); err != nil {
					return err
				}
			}
			return nil
		case fi.Mode().IsRegular():
			if d := path.Dir(p); d != "." {
				if err := confine.MkdirAll(dst, d, 0o755, false); err != nil {
					return err
				}
			}
			in, err := src.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				return err
			}
			defer in.Close()
			if fi, err = in.Stat(); err != nil || !fi.Mode().IsRegular() {
				return errors.Join(err, fmt.Errorf("%s: %w", p, confine.ErrNotRegular))
			}
			if copied += fi.Size(); copied > maxExport {
				return fmt.Errorf("%s: %w: the files exported are over %d bytes", p, confine.ErrTooLarge, int64(maxExport))
			}
			out, err := dst.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fi.Mode().Perm()&0o755)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, io.LimitReader(in, fi.Size()))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			return err
		}
		skipped = append(skipped, p)
		return nil
	}
	for _, p := range rel {
		if err := copyPath(p); err != nil {
			return fmt.Errorf("export from %s: %w", c.Name, err)
		}
	}
	if len(skipped) > 0 {
		return fmt.Errorf("export from %s: not copied, neither files nor directories (symlinks, devices): %s", c.Name, strings.Join(skipped, ", "))
	}
	return nil
}
