package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newNetworkCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "network NAME allow|deny RULE...",
		Short: "Change the network rules of a running sandbox",
		Long: `network changes the rules of a running sandbox whose network is
allow=RULE,...: "allow" adds rules (a host name, *.domain, an IP or a CIDR,
each optionally :PORT or :PORT+PORT), "deny" removes the rules for the hosts
or prefixes given. Connections already open stay open. It prints the
network setting after the change, which the sandbox keeps at its next
start.`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			op := args[1]
			if op != "allow" && op != "deny" {
				return &usageError{err: fmt.Errorf("network %s: want allow or deny, not %q", args[0], op)}
			}
			n, err := sb.ChangeNetwork(cmd.Context(), op, args[2:])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(s.out, n)
			return err
		},
	}
}
