package main

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
)

// inspectJSON is what `krunbox inspect` prints.
type inspectJSON struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Config is the configuration, with defaults applied.
	Config hostapi.Config `json:"config"`
	// Mounts are the resolved shares: the workspace, the git directories it
	// needs, then the configured mounts.
	Mounts []hostapi.Mount   `json:"mounts"`
	Image  hostapi.ImageInfo `json:"image"`
	// Root says how the sandbox's root file system is made.
	Root hostapi.RootInfo `json:"root"`
	// Disk is a block root's disk: its size and what it takes on the host.
	Disk *hostapi.DiskInfo `json:"disk,omitempty"`
	// Git says how the hooks and config the host's git runs are kept from
	// the guest, and, where they could not be made read-only, what the
	// guest changed.
	Git *hostapi.GitProtection `json:"git"`
	// Isolation is the isolated checkout (--isolate), if any.
	Isolation *hostapi.Isolation `json:"isolation,omitempty"`
	Status    *hostapi.Status    `json:"status"`
	// StaleShares, when not empty, says that the guest may see host changes
	// to the workspace and mounts (but :cached ones, which may always be
	// stale) up to 5 s late with the libkrun the sandbox runs, or would
	// start, with, and why.
	StaleShares string `json:"stale_shares,omitempty"`
	// FileEvents, for a running sandbox with shares, says whether host
	// changes to them wake the guest's file watchers ("delivered", "not
	// delivered: why"), as its agent reported.
	FileEvents string           `json:"file_events,omitempty"`
	Paths      inspectPathsJSON `json:"paths"`
}

type inspectPathsJSON struct {
	Dir       string `json:"dir"`
	Socket    string `json:"socket"`
	Console   string `json:"console"`
	RunnerLog string `json:"runner_log"`
}

func newInspectCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME...",
		Short: "Print sandboxes' configuration, image, state and paths as JSON",
		Long: `inspect prints a JSON array with one object per sandbox named, as docker
inspect does. A name that is not found is reported, the others are
printed, and inspect fails.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			outs := []inspectJSON{}
			failed := false
			for _, name := range args {
				out, err := inspectSandbox(cmd.Context(), h, name)
				if err != nil {
					report(s.errOut, err)
					failed = true
					continue
				}
				outs = append(outs, *out)
			}
			if err := printJSON(s.out, outs); err != nil {
				return err
			}
			if failed {
				return exitStatus(ExitKrunbox)
			}
			return nil
		},
	}
}

// inspectSandbox returns what inspect prints of the sandbox called name.
func inspectSandbox(ctx context.Context, h *hostapi.Host, name string) (*inspectJSON, error) {
	sb, err := getSandbox(h, name)
	if err != nil {
		return nil, err
	}
	st, err := sb.Status(ctx)
	if err != nil {
		return nil, err
	}
	git, err := sb.GitProtection()
	if err != nil {
		return nil, err
	}
	disk, err := sb.Disk()
	if err != nil {
		return nil, err
	}
	return &inspectJSON{Disk: disk,
		Name: sb.Name(), Created: sb.Created(), Config: sb.Config(), Mounts: sb.Mounts(), Image: sb.Image(), Root: sb.Root(), Git: git, Status: st, Isolation: sb.Isolation(),
		StaleShares: staleShares(ctx, h, sb, st),
		FileEvents:  fileEvents(sb, st),
		Paths: inspectPathsJSON{
			Dir: sb.Dir(), Socket: sb.SocketPath(), Console: sb.ConsolePath(),
			RunnerLog: filepath.Join(sb.Dir(), vmm.LogFile),
		},
	}, nil
}

// fileEvents is the running agent's report of file events, for a sandbox
// with shares; "" otherwise.
func fileEvents(sb *hostapi.Sandbox, st *hostapi.Status) string {
	if st.Agent == nil || len(sb.Mounts()) == 0 {
		return ""
	}
	return st.Agent.FileEvents.String()
}

// staleShares says whether the sandbox's coherent shares may be stale in
// the guest: from the library its VM loaded when it runs, else from the
// library it would start with (a probe); "" when it has none, or when the
// library does not load (start and doctor say why).
func staleShares(ctx context.Context, h *hostapi.Host, sb *hostapi.Sandbox, st *hostapi.Status) string {
	if !slices.ContainsFunc(sb.Mounts(), func(m hostapi.Mount) bool { return !m.Cached }) {
		return ""
	}
	if st.Libkrun != nil {
		return st.Libkrun.StaleShares
	}
	s, _ := h.StaleShares(ctx)
	return s
}
