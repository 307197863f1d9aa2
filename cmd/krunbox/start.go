package main

import (
	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newStartCmd(s *streams) *cobra.Command {
	var accept bool
	cmd := &cobra.Command{
		Use:   "start NAME...",
		Short: "Boot sandboxes and wait until they answer",
		Long: `start boots each sandbox's microVM, unless it runs already, and returns once
its guest agent answers; a start that fails says why (the runner's exit
status and log, the console's last lines, mounts the guest could not make)
and leaves no VM running: a VM whose agent does not answer within the
start timeout (config start_timeout, 60s by default) is stopped. Starts
of one sandbox from several processes at once boot one VM. Every name is
tried, whatever happens to the others: each failure is reported, and start
fails if any did.

start boots the sandbox and its guest agent only: the command of the
'krunbox run' that made a sandbox is not run again ('krunbox exec' runs
commands in it). What the guest wrote in its root file system is kept.

Where the hooks and config your git runs in the workspace's .git could
not be made read-only for the guest (no mount namespace: macOS, or Linux
without user namespaces), krunbox compares them at each command with what
they were at start, and refuses to go on when they changed: review what
'krunbox inspect NAME' lists under git.changed, then
--accept-git-changes.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := hostapi.NewHost(hostapi.WithStartTimeout(lifecycleConfig(s).StartTimeout))
			if err != nil {
				return err
			}
			return eachSandbox(h, s, args, func(sb *hostapi.Sandbox) error {
				if accept {
					if err := sb.AcceptGitChanges(); err != nil {
						return err
					}
				}
				return sb.Start(cmd.Context())
			})
		},
	}
	cmd.Flags().BoolVar(&accept, "accept-git-changes", false, "accept the changes to git's hooks and config that 'krunbox inspect' lists, once reviewed")
	return cmd
}
