package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/krunbox/krunbox/hostapi"
)

// tarOut writes the guest path src (a file, a link, or a directory tree) to
// w as a tar stream, as "docker cp NAME:PATH -" does: its entries are
// named from src's base name down. Links are written as links, never
// followed; FIFOs, sockets and devices are skipped with a warning on warn.
// The tree is walked with hostapi.Client.WalkDir, within its bounds on the
// listings the guest sends.
func tarOut(ctx context.Context, c *hostapi.Client, src string, w, warn io.Writer) error {
	tw := tar.NewWriter(w)
	base := path.Base(src)
	if base == "/" || base == "." || base == ".." {
		base = "."
	}
	err := c.WalkDir(ctx, src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return tarEntry(ctx, c, tw, p, tarEntryName(src, base, p), fi, warn)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// tarEntryName names the guest path p, src or below it, in the stream.
func tarEntryName(src, base, p string) string {
	if p == src {
		return base
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(p, path.Clean(src)), "/")
	return path.Join(base, rel)
}

// tarEntry writes the guest path p, described by fi, to tw as name.
func tarEntry(ctx context.Context, c *hostapi.Client, tw *tar.Writer, p, name string, fi fs.FileInfo, warn io.Writer) error {
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	switch {
	case fi.Mode().IsRegular():
		return tarFile(ctx, c, tw, p, hdr)
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		return tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := c.Readlink(ctx, p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	}
	fmt.Fprintf(warn, "krunbox: warning: skipped %s: a %s\n", p, fi.Mode().Type())
	return nil
}

// tarFile writes the guest file p with the size it has once open.
func tarFile(ctx context.Context, c *hostapi.Client, tw *tar.Writer, p string, hdr *tar.Header) error {
	f, err := c.Open(ctx, p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if n, err := io.CopyN(tw, f, hdr.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("copy %s: it shrank while copied (%d of %d bytes)", p, n, hdr.Size)
		}
		return fmt.Errorf("copy %s: %w", p, err)
	}
	return nil
}

// tarIn extracts the tar stream r into the guest directory dst, as "docker
// cp - NAME:PATH" does: directories, regular files (with their permission
// bits) and symbolic links; other entries are skipped with a warning on
// warn. An entry whose name leaves dst ("..", absolute) is refused.
func tarIn(ctx context.Context, c *hostapi.Client, r io.Reader, dst string, warn io.Writer) error {
	if fi, err := c.Stat(ctx, dst); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("copy a tar stream to %s: not a directory", dst)
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the tar stream: %w", err)
		}
		rel, err := tarName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == "." {
			continue
		}
		target := path.Join(dst, rel)
		perm := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = c.MkdirAll(ctx, target, perm)
		case tar.TypeReg:
			var w *hostapi.FileWriter
			if w, err = c.Create(ctx, target, &hostapi.WriteOptions{Perm: perm}); err == nil {
				if _, err = io.Copy(w, tr); err != nil {
					w.Abort()
				} else {
					err = w.Close()
				}
			}
		case tar.TypeSymlink:
			c.Remove(ctx, target) // replaced, as a file is
			err = c.Symlink(ctx, hdr.Linkname, target)
		default:
			fmt.Fprintf(warn, "krunbox: warning: skipped %s: tar entry type %q\n", hdr.Name, hdr.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("copy %s: %w", hdr.Name, err)
		}
	}
}

// tarName returns a tar entry's name relative to the destination, refusing
// one that would leave it.
func tarName(name string) (string, error) {
	clean := path.Clean(name)
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("tar entry %q: leaves the destination", name)
	}
	return clean, nil
}
