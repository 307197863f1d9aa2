package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/oci"
)

func newExportCmd(s *streams) *cobra.Command {
	var f imageFlags
	var keepSetID bool
	cmd := &cobra.Command{
		Use:   "export [--platform P] [--pull P] [--keep-setid] REF DIR",
		Short: "Write the flattened root file system of an image to a directory",
		Long: "Write the flattened root file system of an image (pulled first if needed) to DIR,\n" +
			"which must not exist or be empty.\n\n" +
			"The setuid and setgid bits of the image's files and directories are dropped,\n" +
			"since DIR may be reachable by other users; --keep-setid keeps them (as root\n" +
			"only: without root, ownership cannot be applied and they are always dropped).\n\n" +
			"See 'krunbox pull --help' for image references.",
		Args: exactArgs(2, "an image reference", "a directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	cmd.Flags().BoolVar(&keepSetID, "keep-setid", false, "keep the setuid and setgid bits of the image's files (as root)")
	return cmd
}
