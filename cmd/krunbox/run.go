package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

// adhocIdleTimeout stops an ad-hoc VM left behind by a krunbox killed
// before its command started (once started, the command's end stops it).
const adhocIdleTimeout = time.Minute

// mainWait stops a VM whose krunbox run was killed after starting it and
// before starting its command (hostapi.ForMainCommand): the command
// normally starts a few milliseconds after the VM is ready.
const mainWait = 30 * time.Second

// cleanupTimeout bounds stopping and removing a sandbox after its command.
const cleanupTimeout = 30 * time.Second

func newRunCmd(s *streams) *cobra.Command {
	var (
		f          sandboxFlags
		a          attachFlags
		rm, detach bool
		entrypoint string
	)
	cmd := &cobra.Command{
		Use:   "run [flags] [IMAGE] [--] [CMD [ARG...]]",
		Short: "Run a command in a new microVM",
		Long: `run creates a sandbox from IMAGE, boots its microVM, runs CMD in it (or the
image's entrypoint and command; CMD replaces the image's command, not its
entrypoint; --entrypoint replaces both), then stops the VM and, unless it
is named, removes it (--rm). IMAGE defaults to the configured image
('krunbox config').

The command is the sandbox's main command: the VM stops when it exits,
whoever watches it. A krunbox run that is killed leaves it running to its
end (its output then goes to the console log, 'krunbox logs'), and its
sandbox is stopped then, and removed with --rm (killed before the command
started, the VM stops 30 seconds after it was ready). -d starts it so:
detached, printing the sandbox's name. 'krunbox start' of a sandbox made by
'krunbox run --name' boots it again without rerunning the command: run
commands in it with 'krunbox exec'.

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to the command's
process group (with -t, to the guest shell, which may ignore them); the
third SIGINT or SIGTERM kills it (SIGKILL; exit code 137), as docker's
repeated Ctrl-C does. With -it, Ctrl-C is a key for the guest's terminal.

Flags go before IMAGE: everything after it is the command. The exit code is
the command's; 125 when krunbox itself failed, 126 when the command could
not be executed, 127 when it was not found.

Nothing of the host is reachable but what you share: -v and --workspace
share directories live (guest writes appear on the host at once), -e passes
environment variables (no other variable of yours is passed). The network
is the internet only by default (--net public: no private, loopback or host
address); --net allow=RULE,... narrows it to named hosts, --net none removes
it.

  krunbox run alpine -- uname -a
  krunbox run -it --workspace . alpine sh
  krunbox run -v ~/data:/data:ro -e TOKEN --net none alpine -- ls /data`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if detach && (a.stdin || a.tty) {
				return &usageError{err: errors.New("-d runs the command without your terminal: drop -i and -t")}
			}
			image, argv := splitImageCommand(cmd, args)
			uc, _, err := loadConfig()
			if err != nil {
				return err
			}
			cfg, err := f.config(cmd, uc, image)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("rm") {
				rm = f.name == ""
			}
			if rm && cfg.IdleTimeout == 0 {
				cfg.IdleTimeout = adhocIdleTimeout
			}
			cfg.AutoRemove = rm
			h, err := newHost(s, uc)
			if err != nil {
				return err
			}
			r := runner{argv: argv, rm: rm, detach: detach, attach: a}
			if cmd.Flags().Changed("entrypoint") {
				r.entrypoint = &entrypoint
			}
			return r.run(cmd.Context(), h, cfg, s)
		},
	}
	cmd.Flags().SetInterspersed(false)
	f.register(cmd, false)
	cmd.Flags().BoolVar(&rm, "rm", false, "remove the sandbox when the command ends (default: true unless --name is given)")
	cmd.Flags().BoolVarP(&a.stdin, "interactive", "i", false, "stream stdin to the command")
	cmd.Flags().BoolVarP(&a.tty, "tty", "t", false, "run the command on a terminal (with -i: raw mode, Ctrl-C goes to the guest)")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "start the command and print the sandbox's name; its output goes to 'krunbox logs NAME' (an unnamed sandbox goes once the command ends, its logs with it: --name or --rm=false keeps it)")
	cmd.Flags().StringVar(&entrypoint, "entrypoint", "", "run this program instead of the image's entrypoint and command (\"\": none, the command after IMAGE alone)")
	return cmd
}

// splitImageCommand takes IMAGE and CMD from run's arguments: IMAGE is the
// first one unless the arguments start with "--".
func splitImageCommand(cmd *cobra.Command, args []string) (image string, argv []string) {
	if cmd.ArgsLenAtDash() == 0 || len(args) == 0 {
		return "", args
	}
	image, argv = args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	return image, argv
}

// runner is what run does with the sandbox it makes.
type runner struct {
	argv []string
	// entrypoint replaces the image's entrypoint and command when set.
	entrypoint *string
	rm, detach bool
	attach     attachFlags
}

// run is run: preflight, create, start, the command, then stop or remove
// whatever happened; with -d, start the command and leave it running.
func (r runner) run(ctx context.Context, h *hostapi.Host, cfg hostapi.Config, s *streams) (err error) {
	rm, detached := r.rm, false
	if err := cfg.Validate(); err != nil {
		return createHint(err, cfg.Name)
	}
	if err := h.Preflight(ctx); err != nil {
		return err
	}
	sb, err := h.Create(ctx, cfg)
	if err != nil {
		return createHint(err, cfg.Name)
	}
	defer func() {
		if detached {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		var cerr error
		if rm {
			gitErr := stopForRemoval(cctx, sb)
			// Another krunbox may have removed it once its VM stopped.
			if cerr = sb.Remove(cctx); errors.Is(cerr, hostapi.ErrNotFound) {
				cerr = nil
			}
			if cerr == nil {
				cerr = gitErr
			}
		} else {
			cerr = sb.Stop(cctx)
		}
		switch {
		case cerr == nil:
		case err == nil:
			err = cerr
		default: // the command's outcome comes first
			fmt.Fprintf(s.errOut, "krunbox: %v\n", cerr)
		}
	}()
	if err := sb.Start(ctx, hostapi.ForMainCommand(mainWait)); err != nil {
		if !rm {
			err = withHint(err, fmt.Sprintf("the sandbox %s is kept: 'krunbox logs %s' shows its console, 'krunbox rm %s' removes it", sb.Name(), sb.Name(), sb.Name()))
		} else if vmDidNotStart(err) {
			// Its logs go with it: show them now.
			printTails(s.errOut, sb)
			err = withHint(err, "the sandbox is removed (--rm), so its console and runner log are above; give it a --name to keep it, and see 'krunbox doctor'")
		}
		return err
	}
	ic := sb.Image().Config
	if r.entrypoint != nil {
		ic.Entrypoint, ic.Cmd = nil, nil
		if *r.entrypoint != "" {
			ic.Entrypoint = []string{*r.entrypoint}
		}
	}
	argv := imageCommand(ic, r.argv)
	if len(argv) == 0 {
		return &usageError{err: fmt.Errorf("image %s has no entrypoint or command: give one after the image", cfg.Image)}
	}
	c := sb.Client()
	defer c.Close()
	main := hostapi.Cmd{Args: argv, Main: true}
	if r.detach {
		// Started, and left to the guest: the VM stops when it ends.
		if _, err := c.Detach(ctx, main); err != nil {
			return execError(ctx, sb, err)
		}
		detached = true
		_, err := fmt.Fprintln(s.out, sb.Name())
		return err
	}
	code, err := attach(ctx, c, main, s, r.attach)
	if err != nil {
		return execError(ctx, sb, err)
	}
	if code != 0 {
		return exitStatus(code)
	}
	return nil
}

// imageCommand is what run runs: the image's entrypoint followed by args,
// or by the image's command when args is empty.
func imageCommand(ic hostapi.ImageConfig, args []string) []string {
	if len(args) == 0 {
		args = ic.Cmd
	}
	return append(slices.Clone(ic.Entrypoint), args...)
}

// execError explains why a process could not run in sb: a command the
// guest could not start (exit 126 or 127), one its sandbox's stop ended
// (its own exit code), or a sandbox that does not answer (why: stopped,
// dead...).
func execError(ctx context.Context, sb *hostapi.Sandbox, err error) error {
	var (
		se *hostapi.StartError
		ee *hostapi.ExitError
	)
	switch {
	case errors.As(err, &se):
		return notStartedError(err)
	case errors.As(err, &ee) && ee.SandboxStopped:
		// The command's own code (128+N when killed, as docker's), said.
		return &codedError{err: fmt.Errorf("sandbox %s was stopped or removed while the command ran, which ended it (%s)", sb.Name(), ee.Error()), code: ee.Code}
	}
	if rerr := sb.CheckReady(context.WithoutCancel(ctx)); rerr != nil {
		return rerr
	}
	return err
}

// vmDidNotStart reports whether err is a VM that booted and died, or never
// answered, rather than a host that lacks what VMs need (whose error says
// what to fix).
func vmDidNotStart(err error) bool {
	var (
		de *hostapi.DeadError
		nr *hostapi.NotReadyError
		pe *hostapi.PreflightError
	)
	return (errors.As(err, &de) || errors.As(err, &nr)) && !errors.As(err, &pe)
}

// tailBytes bounds what printTails shows of each log.
const tailBytes = 2048

// printTails prints the last lines of sb's console and runner log to w,
// control characters (a hostile guest's terminal escapes) made visible.
func printTails(w io.Writer, sb *hostapi.Sandbox) {
	console, log := sb.Tails(tailBytes)
	for _, l := range []struct{ name, text string }{{"console", console}, {"runner log (libkrun's warnings and errors)", log}} {
		text := strings.TrimRight(l.text, "\n")
		if strings.TrimSpace(text) == "" {
			fmt.Fprintf(w, "krunbox: the %s of %s is empty\n", l.name, sb.Name())
			continue
		}
		fmt.Fprintf(w, "krunbox: the %s of %s ends with:\n", l.name, sb.Name())
		for _, line := range strings.Split(text, "\n") {
			fmt.Fprintf(w, "  | %s\n", visible(line))
		}
	}
}

// visible replaces the control characters of s but tab with U+FFFD.
func visible(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\t' && unicode.IsControl(r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}
