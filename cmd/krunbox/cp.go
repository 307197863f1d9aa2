package main

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newCpCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between a running sandbox and the host",
		Long: `cp copies a file, directory tree or symbolic link between the host and a
running sandbox, through its guest agent. One of SRC and DST is NAME:PATH,
a path in the sandbox NAME (relative paths start in its working
directory); the other is a host path (write ./a:b for a host file named
a:b). When DST is an existing directory, SRC is copied into it; otherwise
DST is the copy's name. Permission bits are kept, except setuid and setgid
on files copied to the host; links are copied as links; special files are
skipped. Nothing is written outside DST, whatever links the guest made.

  krunbox cp ./config.json dev:/etc/app/
  krunbox cp dev:/var/log ./guest-logs`,
		Args: exactArgs(2, "a source", "a destination"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			srcName, src, srcIn := splitSandboxPath(args[0])
			dstName, dst, dstIn := splitSandboxPath(args[1])
			if args[0] == "-" || args[1] == "-" {
				return &usageError{err: errors.New("cp copies files and directories: '-' (a tar stream on stdin or stdout) is not supported; give a host path")}
			}
			if srcIn == dstIn {
				return &usageError{err: errors.New("cp copies between the host and a sandbox: give exactly one of SRC and DST as NAME:PATH")}
			}
			name := srcName
			if dstIn {
				name = dstName
			}
			sb, err := openSandbox(name)
			if err != nil {
				return err
			}
			if err := sb.CheckReady(ctx); err != nil {
				return err
			}
			if err := sb.CheckGit(); err != nil {
				return err
			}
			c := sb.Client()
			defer c.Close()
			if dstIn {
				// Into an existing guest directory, or to the name given.
				if fi, err := c.Stat(ctx, dst); err == nil && fi.IsDir() {
					dst = path.Join(dst, filepath.Base(src))
				}
				return c.CopyIn(ctx, src, dst)
			}
			if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
				dst = filepath.Join(dst, path.Base(src))
			}
			return c.CopyOut(ctx, src, dst)
		},
	}
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
