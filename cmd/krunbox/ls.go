package main

import (
	"fmt"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

// sandboxJSON is one sandbox in `krunbox ls --json`.
type sandboxJSON struct {
	Name      string        `json:"name"`
	Image     string        `json:"image"`
	State     hostapi.State `json:"state"`
	Created   time.Time     `json:"created"`
	Workspace string        `json:"workspace,omitempty"`
	// Pid is the VM runner's, while it runs.
	Pid int `json:"pid,omitempty"`
	// Reason says why a sandbox is dead or unresponsive.
	Reason string `json:"reason,omitempty"`
	// Disk is a block root's disk: its size and what it takes on the host.
	Disk *hostapi.DiskInfo `json:"disk,omitempty"`
}

func newLsCmd(s *streams) *cobra.Command {
	var asJSON, quiet, all bool
	cmd := &cobra.Command{
		Use:   "ls [-a] [--json] [-q]",
		Short: "List the sandboxes and their state",
		Long: `ls lists the sandboxes: name, image, state, when created, workspace. The
state is created (never started), running (its guest agent answers),
starting, unresponsive (its VM runs but the agent does not answer),
stopped (stopped when asked, idle, or its 'krunbox run' command ended) or
dead (its VM ended on its own or its runner was killed: --json says why).

As docker ps does, ls leaves out the sandboxes whose VM is not running
(created and stopped) unless -a; dead ones are listed, so that they are
seen. -q and --json list the same ones.`,
		Aliases: []string{"list", "ps"},
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			sbs, err := h.List()
			if err != nil {
				return err
			}
			rows := make([]sandboxJSON, len(sbs))
			var wg sync.WaitGroup
			for i, sb := range sbs {
				rows[i] = sandboxJSON{Name: sb.Name(), Image: sb.Image().Ref, Created: sb.Created(), Workspace: sb.Config().Workspace}
				rows[i].Disk, _ = sb.Disk()
				wg.Go(func() {
					st, err := sb.Status(cmd.Context())
					if err != nil {
						rows[i].State, rows[i].Reason = "unknown", err.Error()
						return
					}
					rows[i].State, rows[i].Pid, rows[i].Reason = st.State, st.Pid, st.Reason
				})
			}
			wg.Wait()
			if !all {
				rows = slices.DeleteFunc(rows, func(r sandboxJSON) bool {
					return r.State == hostapi.StateCreated || r.State == hostapi.StateStopped
				})
			}
			if quiet {
				for _, r := range rows {
					fmt.Fprintln(s.out, r.Name)
				}
				return nil
			}
			if asJSON {
				return printJSON(s.out, rows)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tIMAGE\tSTATE\tCREATED\tDISK\tWORKSPACE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Image, r.State, ago(time.Since(r.Created)), diskColumn(r.Disk), r.Workspace)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, with the runner's pid and why a sandbox is dead")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print the names only")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "list every sandbox, created and stopped ones too")
	return cmd
}

// diskColumn shows a block root's disk as what it takes of its size, "-"
// for other roots.
func diskColumn(d *hostapi.DiskInfo) string {
	if d == nil {
		return "-"
	}
	return humanSize(d.Used) + " / " + humanSize(d.Size)
}
