package hostapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/krunbox/krunbox/guestagent/protocol"
)

// Detach starts cmd as the sandbox's main command (Cmd.Main) and leaves it
// to the guest, as "krunbox run -d" does: its output goes to the console
// log (Sandbox.Logs), its stdin is /dev/null, and the VM stops once it
// exits. It returns the process's pid once the process runs. cmd takes no
// Stdin, Stdout, Stderr or TTY.
func (c *Client) Detach(ctx context.Context, cmd Cmd) (int, error) {
	if len(cmd.Args) == 0 {
		return 0, errors.New("detach: no command")
	}
	if cmd.Stdin != nil || cmd.OpenStdin || cmd.Stdout != nil || cmd.Stderr != nil || cmd.TTY != nil {
		return 0, fmt.Errorf("detach %s: a detached command takes no stdin, stdout, stderr or terminal", cmd.Args[0])
	}
	s, err := c.session(ctx)
	if err != nil {
		return 0, fmt.Errorf("detach %s: %w", cmd.Args[0], err)
	}
	req := &protocol.ExecRequest{
		Argv: cmd.Args, Env: cmd.Env, Dir: cmd.Dir, User: cmd.User, Timeout: cmd.Timeout,
		Main: true, Detach: true,
	}
	st, err := s.open(protocol.TypeExec, req, false)
	if err != nil {
		return 0, fmt.Errorf("detach %s: %w", cmd.Args[0], err)
	}
	started, err := execStarted(ctx, s, st, cmd.Args[0])
	if err != nil {
		return 0, err
	}
	return started.Pid, nil
}

// execStarted waits for the agent's answer to an exec request on st: the
// process's pid, or why it did not start (a *StartError when the guest
// could not run it).
func execStarted(ctx context.Context, s *session, st *stream, name string) (*protocol.ExecStarted, error) {
	f, err := st.next(ctx)
	if err != nil {
		st.cancel()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	switch f.Type {
	case protocol.TypeExecStarted:
	case protocol.TypeError:
		err := remoteError(f.Body)
		var re *RemoteError
		if errors.As(err, &re) && (re.Op == "exec" || re.Op == "chdir" || re.Op == "user") {
			return nil, &StartError{Op: re.Op, Path: re.Path, Err: re}
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	default:
		err := &ProtocolError{Msg: fmt.Sprintf("got %s, want exec-started", f.Type)}
		s.fail(err)
		return nil, err
	}
	var started protocol.ExecStarted
	if err := protocol.Decode(f.Body, &started); err != nil {
		s.fail(&ProtocolError{Msg: err.Error()})
		return nil, err
	}
	return &started, nil
}
