package main

import (
	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
)

func newExecCmd(s *streams) *cobra.Command {
	var (
		a       attachFlags
		workdir string
		env     []string
		user    string
	)
	cmd := &cobra.Command{
		Use:   "exec [-i] [-t] [-w DIR] [-e KEY=VALUE] [-u USER] NAME CMD [ARG...]",
		Short: "Run a command in a running sandbox",
		Long: `exec runs CMD in the sandbox NAME, which must be running ('krunbox start'),
and exits with its exit code (126: could not be executed, 127: not found,
125: krunbox failed, for instance the sandbox is not running: it says why).
Flags go before NAME: everything after it is the command.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return exactArgs(2, "a sandbox name", "a command")(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// The fast path: no configuration, image cache or preflight.
			ctx := cmd.Context()
			env, err := parseEnv(env)
			if err != nil {
				return err
			}
			sb, err := openSandbox(args[0])
			if err != nil {
				return err
			}
			if err := sb.CheckGit(); err != nil {
				return err
			}
			argv := args[1:]
			if argv[0] == "--" && len(argv) > 1 {
				argv = argv[1:]
			}
			c := sb.Client()
			defer c.Close()
			code, err := attach(ctx, c, hostapi.Cmd{Args: argv, Env: env, Dir: workdir, User: user}, s, a)
			if err != nil {
				return execError(ctx, sb, err)
			}
			if code != 0 {
				return exitStatus(code)
			}
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().BoolVarP(&a.stdin, "interactive", "i", false, "stream stdin to the command")
	cmd.Flags().BoolVarP(&a.tty, "tty", "t", false, "run the command on a terminal (with -i: raw mode, Ctrl-C goes to the guest)")
	cmd.Flags().StringVarP(&workdir, "workdir", "w", "", "working directory in the guest (default: the sandbox's)")
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set KEY=VALUE for the command (KEY alone takes this process's value)")
	cmd.Flags().StringVarP(&user, "user", "u", "", "guest user, name or uid[:gid] (default: the sandbox's)")
	return cmd
}
