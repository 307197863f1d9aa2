package main

import (
	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newStartCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "start NAME...",
		Short: "Boot sandboxes and wait until they answer",
		Long: `start boots each sandbox's microVM, unless it runs already, and returns once
its guest agent answers; a start that fails says why (the runner's exit
status and log, the console's last lines, mounts the guest could not make)
and leaves no VM running: a VM whose agent does not answer within the
start timeout (config start_timeout, 60s by default) is stopped. Starts
of one sandbox from several processes at once boot one VM.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := hostapi.NewHost(hostapi.WithStartTimeout(lifecycleConfig(s).StartTimeout))
			if err != nil {
				return err
			}
			return eachSandbox(h, s.out, args, func(sb *hostapi.Sandbox) error { return sb.Start(cmd.Context()) })
		},
	}
}
