package main

import "github.com/spf13/cobra"

func newPruneCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Delete cached blobs and root file systems no image uses",
		Long:  "Delete cached blobs and root file systems no image uses. The images sandboxes\nwere made from, and what they need, are kept.",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, images, err := openImageStoreInUse()
			if err != nil {
				return err
			}
			freed, err := store.Prune(cmd.Context(), images.inUse())
			if err == nil {
				err = images.err
			}
			if err != nil {
				return err
			}
			return printFreed(s.out, freed)
		},
	}
}
