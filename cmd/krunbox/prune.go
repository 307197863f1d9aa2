package main

import "github.com/spf13/cobra"

func newPruneCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Delete cached blobs and root file systems no image uses",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openImageStore()
			if err != nil {
				return err
			}
			freed, err := store.Prune(cmd.Context(), nil)
			if err != nil {
				return err
			}
			return printFreed(s.out, freed)
		},
	}
}
