package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/confine"
)

func newCpCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between a sandbox and the host",
		Long: `cp copies a file, directory tree or symbolic link between the host and a
sandbox, through its guest agent. One of SRC and DST is NAME:PATH,
a path in the sandbox NAME (relative paths start in its working
directory); the other is a host path (write ./a:b for a host file named
a:b). When DST is an existing directory, SRC is copied into it; otherwise
DST is the copy's name. Permission bits are kept, except setuid and setgid
on files copied to the host; symbolic links are copied as links, never
followed, SRC itself included (like cp -P); FIFOs, sockets and devices are
skipped with a warning.

A host tree may be written by the guest while it is copied (the
workspace), so the host side never goes through a symbolic link: the
parent directory of a host SRC or DST is resolved by path once, then
every entry is opened below it without following a link. Copying to the
host, a DST that is itself a symbolic link is refused (give the path it
points to), and a symbolic link found anywhere below DST, whoever made
it, is replaced by what the guest's copy holds there, never written
through; nothing is written outside DST. A file is copied with at most the
size it had when it was opened.

A sandbox that is not running (created, stopped, dead) is booted for the
copy and stopped again after it: its files are read and written by its
own guest, never by host code walking its root file system on disk (an
overlay's writable layer is not what the guest sees, and the guest may
have planted links there). 'krunbox run --name' sandboxes are booted
without rerunning their command.

As docker cp does, a DST of - writes SRC to stdout as a tar stream, and a
SRC of - extracts the tar stream on stdin into the existing directory DST
(directories, files and symbolic links; entries whose name leaves DST are
refused).

  krunbox cp ./config.json dev:/etc/app/
  krunbox cp dev:/var/log ./guest-logs
  krunbox cp dev:/var/log - | tar -tv
  tar -c src | krunbox cp - dev:/work`,
		Args: exactArgs(2, "a source", "a destination"),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			ctx := cmd.Context()
			srcName, src, srcIn := splitSandboxPath(args[0])
			dstName, dst, dstIn := splitSandboxPath(args[1])
			if srcIn == dstIn {
				return &usageError{err: errors.New("cp copies between the host and a sandbox: give exactly one of SRC and DST as NAME:PATH")}
			}
			name := srcName
			if dstIn {
				name = dstName
			}
			uc := lifecycleConfig(s)
			h, err := hostapi.NewHost(hostapi.WithStartTimeout(uc.StartTimeout), hostapi.WithStopTimeout(uc.StopTimeout))
			if err != nil {
				return err
			}
			sb, err := getSandbox(h, name)
			if err != nil {
				return err
			}
			stop, err := bootForCopy(ctx, sb)
			if err != nil {
				return err
			}
			defer func() {
				if serr := stop(); err == nil {
					err = serr
				}
			}()
			if err := sb.CheckGit(); err != nil {
				return err
			}
			c := sb.Client()
			defer c.Close()
			switch {
			case dstIn && src == "-":
				return tarIn(ctx, c, s.in, dst, s.errOut)
			case srcIn && dst == "-":
				return tarOut(ctx, c, src, s.out, s.errOut)
			}
			if dstIn {
				// Into an existing guest directory, or to the name given.
				if fi, err := c.Stat(ctx, dst); err == nil && fi.IsDir() {
					dst = path.Join(dst, filepath.Base(src))
				}
				return c.CopyIn(ctx, src, dst)
			}
			return copyOut(ctx, c, src, dst)
		},
	}
}

// bootForCopy starts sb for cp when it is not running, and returns what
// stops it again (nothing when it ran already).
func bootForCopy(ctx context.Context, sb *hostapi.Sandbox) (stop func() error, err error) {
	err = sb.CheckReady(ctx)
	switch {
	case err == nil:
		return func() error { return nil }, nil
	case !errors.Is(err, hostapi.ErrNotRunning):
		return nil, err
	}
	if err := sb.Start(ctx); err != nil {
		return nil, fmt.Errorf("start %s for the copy: %w", sb.Name(), err)
	}
	return func() error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := sb.Stop(cctx); err != nil {
			return fmt.Errorf("stop %s after the copy: %w", sb.Name(), err)
		}
		return nil
	}, nil
}

// copyOut copies the guest path src into the host directory dst when dst
// is one, and to dst otherwise, never through a symbolic link at dst.
func copyOut(ctx context.Context, c *hostapi.Client, src, dst string) error {
	parent, name, err := confine.OpenParent(dst)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer parent.Close()
	base := path.Base(src)
	if base == "." || base == ".." || base == "/" {
		// No name of its own: copied as DST (merged into a directory).
		return c.CopyOutAt(ctx, src, parent, name)
	}
	dir, err := confine.OpenDirAt(parent, name)
	switch {
	case err == nil:
		defer dir.Close()
		return c.CopyOutAt(ctx, src, dir, base)
	case errors.Is(err, confine.ErrSymlink), errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// A link is refused by CopyOutAt, a file replaced, a new name made.
		return c.CopyOutAt(ctx, src, parent, name)
	}
	return fmt.Errorf("copy %s: %w", src, err)
}

// splitSandboxPath splits NAME:PATH. A spec is a sandbox path when what
// comes before its first ':' is a valid sandbox name (so no '/').
func splitSandboxPath(spec string) (name, p string, ok bool) {
	name, p, ok = strings.Cut(spec, ":")
	if !ok || hostapi.ValidateName(name) != nil {
		return "", spec, false
	}
	if p == "" {
		p = "."
	}
	return name, p, true
}
