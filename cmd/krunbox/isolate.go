package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

// isolatedSandbox returns the sandbox called name, refusing one whose
// workspace is not isolated.
func isolatedSandbox(name string) (*hostapi.Sandbox, error) {
	h, err := hostapi.NewHost()
	if err != nil {
		return nil, err
	}
	sb, err := h.Get(name)
	if err != nil {
		return nil, withHint(err, "'krunbox ls' lists the sandboxes")
	}
	if sb.Isolation() == nil {
		return nil, withHint(fmt.Errorf("%s: %w", name, hostapi.ErrNotIsolated), "its workspace is your checkout itself: use git there")
	}
	return sb, nil
}

func newDiffCmd(s *streams) *cobra.Command {
	var stat bool
	cmd := &cobra.Command{
		Use:   "diff [--stat] NAME [PATH...]",
		Short: "Show the work of an isolated sandbox against its base commit",
		Long: `diff shows how the isolated checkout of sandbox NAME (made with --isolate)
differs from the commit it was made from: its commits and what is not
committed, untracked files that .gitignore does not ignore included, as
git diff does, for PATHs (relative to the project, or absolute below it)
or all. --stat prints a summary. The sandbox may run or not.

The sandbox's repository is read by krunbox itself: nothing there (hooks,
config, attributes) runs on the host.`,
		Args: minArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := isolatedSandbox(args[0])
			if err != nil {
				return err
			}
			return sb.Diff(cmd.Context(), s.out, hostapi.DiffOptions{Paths: args[1:], Stat: stat})
		},
	}
	cmd.Flags().BoolVar(&stat, "stat", false, "print a summary of the changes (git's --stat)")
	return cmd
}

func newLandCmd(s *streams) *cobra.Command {
	var squash bool
	cmd := &cobra.Command{
		Use:   "land [--squash] NAME",
		Short: "Make the work of an isolated sandbox a branch krunbox/NAME of your repository",
		Long: `land puts the work of the isolated sandbox NAME into the repository it was
made from, as the branch krunbox/NAME: the sandbox's commits over its base
and, when files are not committed, one more commit of them (--squash: one
commit of it all on the base). Nothing is merged, checked out or changed
otherwise: merge or cherry-pick the branch as you like. Landing again
moves the branch to the sandbox's work now; a branch of that name that
krunbox did not make is refused.

Every object is verified (its content against its name, trees for names
git refuses) before any is written; nothing the guest wrote runs.`,
		Args: exactArgs(1, "a sandbox name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			sb, err := isolatedSandbox(args[0])
			if err != nil {
				return err
			}
			l, err := sb.Land(cmd.Context(), hostapi.LandOptions{Squash: squash})
			if err != nil {
				return err
			}
			switch {
			case l.Commit == sb.Isolation().Base:
				_, err = fmt.Fprintf(s.out, "Nothing to land: %s is at its base %s\n", l.Branch, short(l.Commit))
			case l.Unchanged:
				_, err = fmt.Fprintf(s.out, "%s is already at %s\n", l.Branch, short(l.Commit))
			default:
				_, err = fmt.Fprintf(s.out, "Landed %s at %s (%d commits over %s)\n  git log %s..%s\n", l.Branch, short(l.Commit), l.Commits, short(sb.Isolation().Base), short(sb.Isolation().Base), l.Branch)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&squash, "squash", false, "land one commit of all the work, on the base")
	return cmd
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// exportWorkspace is "krunbox export NAME PATH... --to DIR".
func exportWorkspace(ctx context.Context, s *streams, args []string, to string) error {
	if len(args) < 2 {
		return &usageError{err: fmt.Errorf("export --to: want a sandbox name and at least one path")}
	}
	sb, err := isolatedSandbox(args[0])
	if err != nil {
		return err
	}
	if err := sb.Export(ctx, to, args[1:]...); err != nil {
		return err
	}
	_, err = fmt.Fprintf(s.out, "Exported %s from %s to %s\n", strings.Join(args[1:], " "), args[0], to)
	return err
}

// confirmUnlanded refuses to remove the isolated sandbox sb while it holds
// work not landed, unless the user, asked on a terminal, says so.
func confirmUnlanded(ctx context.Context, s *streams, sb *hostapi.Sandbox) error {
	unlanded, err := sb.Unlanded(ctx)
	if err == nil && !unlanded {
		return nil
	}
	why := "holds work not landed"
	if err != nil {
		why = fmt.Sprintf("has a checkout krunbox cannot read (%v)", err)
	}
	if _, ok := terminalFd(s.in); ok {
		fmt.Fprintf(s.errOut, "Sandbox %s %s. Remove it anyway? [y/N] ", sb.Name(), why)
		line, _ := bufio.NewReader(s.in).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a == "y" || a == "yes" {
			return nil
		}
	}
	return withHint(fmt.Errorf("sandbox %s %s", sb.Name(), why), "'krunbox diff "+sb.Name()+"' shows it, 'krunbox land "+sb.Name()+"' keeps it as a branch; 'krunbox rm -f "+sb.Name()+"' removes it anyway")
}

// workspaceEntry is one isolated sandbox of "krunbox workspaces --json".
type workspaceEntry struct {
	Name    string    `json:"name"`
	Project string    `json:"project"`
	Base    string    `json:"base"`
	Branch  string    `json:"branch"`
	Changed int       `json:"changed"`
	Created time.Time `json:"created"`
	Error   string    `json:"error,omitempty"`
}

func newWorkspacesCmd(s *streams) *cobra.Command {
	var asJSON bool
	var project string
	cmd := &cobra.Command{
		Use:   "workspaces [--json] [--project DIR]",
		Short: "List the isolated sandboxes: base commit, branch, files changed, age",
		Long: `workspaces lists the sandboxes made with --isolate (of the project DIR only,
with --project): the commit each checkout was made from, its branch, how many
files differ from that commit (krunbox diff --stat shows them) and when it
was made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			h, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			if project != "" {
				if project, err = filepath.Abs(project); err != nil {
					return err
				}
				if real, err := filepath.EvalSymlinks(project); err == nil {
					project = real
				}
			}
			all, err := h.List()
			if err != nil {
				return err
			}
			out := []workspaceEntry{}
			for _, sb := range all {
				iso := sb.Isolation()
				if iso == nil || project != "" && iso.Project != project {
					continue
				}
				e := workspaceEntry{Name: sb.Name(), Project: iso.Project, Base: iso.Base, Branch: iso.Branch, Created: sb.Created()}
				if ch, err := sb.Changes(cmd.Context()); err != nil {
					e.Error = err.Error()
				} else {
					e.Changed = len(ch)
				}
				out = append(out, e)
			}
			if asJSON {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPROJECT\tBASE\tBRANCH\tCHANGED\tCREATED")
			for _, e := range out {
				changed := fmt.Sprint(e.Changed)
				if e.Error != "" {
					changed = "? (" + e.Error + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", e.Name, e.Project, short(e.Base), e.Branch, changed, time.Since(e.Created).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&project, "project", "", "only the sandboxes of this project")
	return cmd
}
