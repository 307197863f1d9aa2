package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newStopCmd(s *streams) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop [--timeout D] NAME...",
		Short: "Stop sandboxes",
		Long: `stop asks each sandbox's guest to shut down (its processes get SIGTERM, then
SIGKILL, and the file systems are synced), then, past the timeout (config
stop_timeout), ends the VM. Stopping a stopped sandbox does nothing. The
sandbox and its root file system stay: 'krunbox start' boots it again.
Every name is tried, whatever happens to the others: each failure is
reported, and stop fails if any did.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("timeout") {
				timeout = lifecycleConfig(s).StopTimeout
			}
			h, err := hostapi.NewHost(hostapi.WithStopTimeout(timeout))
			if err != nil {
				return err
			}
			return eachSandbox(h, s, args, func(sb *hostapi.Sandbox) error { return sb.Stop(cmd.Context()) })
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "how long the guest may take to shut down before the VM is ended (default: config stop_timeout)")
	return cmd
}
