package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newExportCmd(s *streams) *cobra.Command {
	var f imageFlags
	cmd := &cobra.Command{
		Use:   "export [--platform P] [--policy P] REF DIR",
		Short: "Write the flattened root file system of an image to a directory",
		Long: "Write the flattened root file system of an image (pulled first if needed) to DIR,\n" +
			"which must not exist or be empty.\n\n" + "See 'krunbox pull --help' for image references.",
		Args: exactArgs(2, "an image reference", "a directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, opts, err := f.open(s)
			if err != nil {
				return err
			}
			img, err := store.Export(cmd.Context(), args[0], args[1], opts...)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(s.out, "Exported %s (%s) to %s\n", img.Name, img.Digest, args[1])
			return err
		},
	}
	f.register(cmd)
	return cmd
}
