package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newCreateCmd(s *streams) *cobra.Command {
	var f sandboxFlags
	cmd := &cobra.Command{
		Use:   "create [flags] [IMAGE]",
		Short: "Create a named sandbox, without starting it",
		Long: `create makes a sandbox from IMAGE (default: the configured image, see
'krunbox config'), pulling the image if needed, and prints its name. Its
root file system is a writable layer over the cached image: creating it
copies nothing. Where the host cannot mount that overlay (macOS; Linux
without unprivileged user namespaces; see 'krunbox doctor'), or with
--root copy, it is a private copy of the image instead, made at the first
start: cloned where the file system can (APFS, btrfs, XFS), else copied,
which costs the image's size in disk and time. Either way, what the guest
changes there persists across stops and starts of this sandbox only, and
a sandbox keeps the root it was created with. 'krunbox start' boots it.

  krunbox create --name dev --workspace . alpine
  krunbox start dev && krunbox exec dev -- make test`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return exactArgs(1, "at most an image reference")(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			uc, _, err := loadConfig()
			if err != nil {
				return err
			}
			image := ""
			if len(args) == 1 {
				image = args[0]
			}
			cfg, err := f.config(cmd, uc, image)
			if err != nil {
				return err
			}
			h, err := newHost(s, uc)
			if err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return createHint(err, cfg.Name)
			}
			if err := h.Preflight(cmd.Context()); err != nil {
				return err
			}
			sb, err := h.Create(cmd.Context(), cfg)
			if err != nil {
				return createHint(err, cfg.Name)
			}
			_, err = fmt.Fprintln(s.out, sb.Name())
			return err
		},
	}
	f.register(cmd, true)
	return cmd
}
