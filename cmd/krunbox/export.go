package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/oci"
)

func newExportCmd(s *streams) *cobra.Command {
	var f imageFlags
	var keepSetID bool
	var to string
	cmd := &cobra.Command{
		Use:   "export [--platform P] [--pull P] [--keep-setid] REF DIR | export NAME PATH... --to DIR",
		Short: "Write an image's root file system, or files of an isolated sandbox, to a directory",
		Long: "Write the flattened root file system of an image (pulled first if needed) to DIR,\n" +
			"which must not exist or be empty.\n\n" +
			"The setuid and setgid bits of the image's files and directories are dropped,\n" +
			"since DIR may be reachable by other users; --keep-setid keeps them (as root\n" +
			"only: without root, ownership cannot be applied and they are always dropped).\n\n" +
			"See 'krunbox pull --help' for image references.\n\n" +
			"With --to, it copies the files and directories PATH... (relative to the project,\n" +
			"or absolute below it) of the isolated sandbox NAME's checkout, as they are now,\n" +
			"into DIR, which must not exist. Symlinks and special files are not copied.",
		Args: func(cmd *cobra.Command, args []string) error {
			if to != "" {
				return minArgs(2, "a sandbox name and a path")(cmd, args)
			}
			return exactArgs(2, "an image reference", "a directory")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if to != "" {
				return exportWorkspace(cmd.Context(), s, args, to)
			}
			store, opts, err := f.open(s)
			if err != nil {
				return err
			}
			img, err := store.Export(cmd.Context(), args[0], args[1], append(opts, oci.WithKeepSetID(keepSetID))...)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.out, "Exported %s (%s) to %s\n", img.Name, img.Digest, args[1])
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&to, "to", "", "copy PATHs of the isolated sandbox NAME into this new directory")
	cmd.Flags().BoolVar(&keepSetID, "keep-setid", false, "keep the setuid and setgid bits of the image's files (as root)")
	return cmd
}
