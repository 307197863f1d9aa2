package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// Version returns the version of this build of krunbox.
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// streams are the standard streams a command talks to, so that tests can
// run the CLI in-process.
type streams struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer
}

// Main runs the krunbox CLI with args and returns its exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(&streams{in: stdin, out: stdout, errOut: stderr})
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && strings.HasPrefix(err.Error(), "unknown command ") {
		err = unknownCommand(err)
	}
	return report(stderr, err)
}

// unknownCommand turns cobra's untyped, multi-line "unknown command" error
// into a usage error of one line whose hint carries cobra's suggestions.
func unknownCommand(err error) error {
	first, rest, _ := strings.Cut(err.Error(), "\n")
	first, _, _ = strings.Cut(first, " for ")
	var suggestions []string
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "\t") {
			suggestions = append(suggestions, strings.TrimSpace(line))
		}
	}
	u := &usageError{err: errors.New(first)}
	if len(suggestions) == 0 {
		return u
	}
	return &hintError{err: u, hint: fmt.Sprintf("did you mean %s? %s", strings.Join(suggestions, " or "), u.Hint())}
}

func newRootCmd(s *streams) *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:           "krunbox",
		Short:         "Run commands in libkrun microVMs",
		Long:          "krunbox runs commands, and AI coding agents' tools, inside libkrun microVMs,\nwith the project directory mounted live at the same path.",
		Version:       Version(),
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return setupLogging(s.errOut, logLevel)
		},
	}
	root.SetIn(s.in)
	root.SetOut(s.out)
	root.SetErr(s.errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{err: err}
	})
	root.PersistentFlags().StringVar(&logLevel, "log-level", envOr("KRUNBOX_LOG_LEVEL", "warn"), "log level: debug, info, warn or error (env KRUNBOX_LOG_LEVEL)")
	root.SetVersionTemplate("krunbox {{.Version}}\n")

	root.AddCommand(
		newVersionCmd(s),
		newRunCmd(s),
		newCreateCmd(s),
		newStartCmd(s),
		newExecCmd(s),
		newStopCmd(s),
		newRmCmd(s),
		newDiffCmd(s),
		newLandCmd(s),
		newWorkspacesCmd(s),
		newLsCmd(s),
		newLogsCmd(s),
		newNetworkCmd(s),
		newInspectCmd(s),
		newCpCmd(s),
		newConfigCmd(s),
		newPullCmd(s),
		newImagesCmd(s),
		newDfCmd(s),
		newExportCmd(s),
		newRmiCmd(s),
		newPruneCmd(s),
		newDoctorCmd(s),
		newServeCmd(s),
		newMCPCmd(s),
	)
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(root.FlagErrorFunc())
	}
	return root
}

func newVersionCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of krunbox",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(s.out, "krunbox %s\n", Version())
			return err
		},
	}
}

// noArgs rejects positional arguments with a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &usageError{err: fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
	}
	return nil
}

// minArgs requires at least n positional arguments, named in the message.
func minArgs(n int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return &usageError{err: fmt.Errorf("%s needs %s", cmd.CommandPath(), strings.Join(names, " and "))}
		}
		return nil
	}
}

// exactArgs requires n positional arguments, named in the message.
func exactArgs(n int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{err: fmt.Errorf("%s needs %s", cmd.CommandPath(), strings.Join(names, " and "))}
		}
		return nil
	}
}

func setupLogging(w io.Writer, level string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return &usageError{err: fmt.Errorf("log level %q: want debug, info, warn or error", level)}
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})))
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
