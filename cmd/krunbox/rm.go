package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newRmCmd(s *streams) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm [-f] NAME...",
		Short: "Remove sandboxes",
		Long: `rm deletes each sandbox: its writable root file system, logs and state. The
image stays cached and shared directories are not touched. A running
sandbox is refused unless -f, which stops it first; so is an isolated
sandbox (--isolate) whose checkout holds work not landed, unless -f or
you say yes when asked on a terminal. rm completes what an
interrupted removal left, and removes a sandbox whose state is damaged
with -f. Every name is tried, whatever happens to the others: each failure
is reported, and rm fails if any did.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			h, err := hostapi.NewHost(hostapi.WithStopTimeout(lifecycleConfig(s).StopTimeout))
			if err != nil {
				return err
			}
			return eachName(s, args, func(name string) error {
				sb, err := h.Get(name)
				switch {
				case errors.Is(err, hostapi.ErrNotFound):
					return withHint(err, "'krunbox ls -a' lists the sandboxes")
				case err != nil && !force:
					return withHint(err, "'krunbox rm -f "+name+"' removes it anyway")
				case err == nil && !force:
					st, err := sb.Status(ctx)
					if err != nil {
						return err
					}
					switch st.State {
					case hostapi.StateRunning, hostapi.StateStarting, hostapi.StateUnresponsive:
						return withHint(fmt.Errorf("sandbox %s is %s", name, st.State), "stop it first, or 'krunbox rm -f "+name+"'")
					}
					if sb.Isolation() != nil {
						if err := confirmUnlanded(ctx, s, sb); err != nil {
							return err
						}
					}
				}
				var gitErr error
				if sb != nil {
					gitErr = stopForRemoval(ctx, sb)
				}
				if err := h.Remove(ctx, name); err != nil {
					return err
				}
				fmt.Fprintln(s.out, name)
				// Removed all the same, but said, and not with success.
				return gitErr
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "stop a running sandbox first; remove a damaged one, or an isolated one with work not landed")
	return cmd
}
