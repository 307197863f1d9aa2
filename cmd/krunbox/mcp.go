package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/mcpserver"
	"github.com/krunbox/krunbox/internal/session"
)

func newMCPCmd(s *streams) *cobra.Command {
	var (
		workspace, httpAddr, socket string
		flags                       session.ProjectFlags
	)
	cmd := &cobra.Command{
		Use:   "mcp [--workspace DIR] [--isolate] [--http ADDR | --socket PATH]",
		Short: "Serve a project's sandbox to a coding agent over the Model Context Protocol",
		Long: `mcp is an MCP server for coding agents (Claude Code, Codex CLI, Cursor, Gemini
CLI...): its tools run commands and read, write, edit, list and search files in
a sandbox VM of the project, through the VM's guest agent. The project is the
git checkout around the working directory (or --workspace), mounted live at the
same path in the VM. It speaks on stdin and stdout unless --http (a loopback
address) or --socket (a unix socket) says otherwise, and logs to stderr.

The sandbox's configuration is the user's (krunbox config), then the project's
.krunbox.toml (which may only narrow what the sandbox reaches unless the
project is listed in trusted_projects of mcp.toml in the configuration
directory), then these flags. When the sandbox cannot start, every tool says
so and nothing runs on the host. --isolate gives the sandbox its own checkout:
the diff and land tools then take its work out, land only once the user
confirms.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if httpAddr != "" && socket != "" {
				return &usageError{err: errors.New("mcp takes --http or --socket, not both")}
			}
			ws, err := mcpWorkspace(workspace)
			if err != nil {
				return err
			}
			uc, dir, err := loadConfig()
			if err != nil {
				return err
			}
			p, err := session.LoadProject(session.ProjectOptions{Workspace: ws, Prefix: "mcp", User: uc, ConfigDir: dir, Flags: flags})
			if err != nil {
				return withHint(err, "fix the setting; 'krunbox config' shows the user's")
			}
			host, err := hostapi.NewHost()
			if err != nil {
				return err
			}
			srv := mcpserver.New(host, slog.Default(), mcpserver.Options{Sandbox: p.Request, Notes: p.Notes, Version: Version()})
			ctx := cmd.Context()
			switch {
			case httpAddr != "":
				ln, err := listenLoopback(httpAddr)
				if err != nil {
					return err
				}
				fmt.Fprintf(s.errOut, "krunbox mcp: serving %s on http://%s/\n", p.Request.Config.Name, ln.Addr())
				return srv.ServeHTTP(ctx, ln)
			case socket != "":
				ln, err := net.Listen("unix", socket)
				if err != nil {
					return withHint(err, "remove a stale socket, or give another path")
				}
				defer os.Remove(socket)
				fmt.Fprintf(s.errOut, "krunbox mcp: serving %s on unix socket %s\n", p.Request.Config.Name, socket)
				return srv.ServeHTTP(ctx, ln)
			}
			slog.Info("serving MCP on stdio", "sandbox", p.Request.Config.Name, "workspace", ws)
			return srv.ServeStdio(ctx, s.in, s.out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&workspace, "workspace", "", "the project directory (default: the git checkout around the working directory)")
	f.BoolVar(&flags.Isolate, "isolate", false, "give the sandbox its own checkout of the project (diff and land tools)")
	f.StringVar(&flags.Image, "image", "", "the sandbox's image (overrides the configuration)")
	f.StringVar(&flags.Network, "network", "", "the sandbox's network: public, allow=RULE,..., open, tsi or none")
	f.StringVar(&httpAddr, "http", "", "serve Streamable HTTP on this loopback address (127.0.0.1:PORT)")
	f.StringVar(&socket, "socket", "", "serve Streamable HTTP on this unix socket")
	return cmd
}

// mcpWorkspace returns the project directory: dir made absolute, or the
// git checkout around the working directory.
func mcpWorkspace(dir string) (string, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return "", &usageError{err: fmt.Errorf("--workspace %s: not a directory", dir)}
		}
		return abs, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return session.FindWorkspace(wd), nil
}

// listenLoopback listens on addr, which must be a loopback address: the
// server runs commands for whoever reaches it.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &usageError{err: fmt.Errorf("--http %s: want HOST:PORT", addr)}
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if host != "localhost" && (err != nil || !ip.IsLoopback()) {
		return nil, &usageError{err: fmt.Errorf("--http %s: want a loopback address (127.0.0.1:PORT, [::1]:PORT); use --socket for a unix socket", addr)}
	}
	return net.Listen("tcp", addr)
}
