package vmm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/krun"
)

// StartError reports a VM whose runner ended before the VM booted.
type StartError struct {
	// Status is how the runner ended.
	Status *ExitStatus
	// Log is the end of the runner's log, which says why.
	Log string
}

func (e *StartError) Error() string {
	msg := "VM did not start (" + e.Status.String() + ")"
	if e.Log != "" {
		msg += ": " + e.Log
	}
	return msg
}

// Start validates spec, stores it in dir and starts the VM in a runner
// process detached from the caller (its own session, stdio on files), so
// the VM outlives the caller. It returns once the runner is about to boot
// the VM (krun_start_enter), or a [*StartError] with the runner's own
// explanation when it gave up before that (no KVM, no libkrun, a bad
// configuration...). dir must be on a local filesystem (flock).
//
// The runner is this executable, re-executed: see the package
// documentation.
func Start(ctx context.Context, dir string, spec *Spec) (*VM, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if !haveMonitor {
		return nil, fmt.Errorf("start VM: %w", krun.ErrNoCgo)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}
	v := Open(dir)
	lock, err := os.OpenFile(v.path(LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}
	defer lock.Close()
	// Taken here and handed to the monitor and the runner, the lock is
	// held from before the runner exists until the last of them exits.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("start VM in %s: %w", dir, ErrRunning)
		}
		return nil, fmt.Errorf("start VM: lock: %w", err)
	}
	if err := prepare(dir, spec); err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}
	if err := WriteSpec(dir, spec); err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}

	// A new file (prepare removed the last boot's), so that a reader
	// following the old one sees it was replaced.
	logf, err := os.OpenFile(v.path(LogFile), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start VM: %w", err)
	}
	defer readyR.Close()
	cmd := selfCommand(roleRunner, dir)
	// The monitor copies the runner's stdout and stderr into the runner's
	// log, and the console into ConsoleLog, each bounded (monitor_cgo.go).
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(cmd.Env, logMaxEnv+"="+strconv.FormatInt(spec.logMax(), 10))
	if spec.ConsoleLog != "" {
		cmd.Env = append(cmd.Env, consoleEnv+"="+spec.ConsoleLog)
	}
	cmd.Dir = dir // not the caller's directory, which the VM would keep busy
	cmd.ExtraFiles = []*os.File{lock, readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := namespacesUnavailable(spec.Root); err != nil {
		cmd.Env = append(cmd.Env, noNamespacesEnv+"=1")
		fmt.Fprintf(logf, "krunbox runner: running without namespaces, so the guest sees files with their host owners: %v\n", err)
	}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("start VM runner: %w", err)
	}
	// The monitor exits with the VM's code once the VM has stopped; reaped
	// here while we live.
	v.monitor = make(chan *os.ProcessState, 1)
	go func() {
		cmd.Wait()
		v.monitor <- cmd.ProcessState
	}()

	// The runner writes one byte just before krun_start_enter; the pipe
	// closes without it when the runner gives up first.
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(readyR, b[:])
		ready <- err
	}()
	select {
	case err := <-ready:
		if err == nil {
			return v, nil
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("start VM: %w (the runner goes on; see %s)", ctx.Err(), v.path(LogFile))
	}
	lock.Close() // our copy: the state now follows the runner alone
	es, err := v.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("start VM: the runner ended early: %w", err)
	}
	return nil, &StartError{Status: es, Log: v.logTail()}
}

// prepare creates what the runner expects and removes what a previous run
// left: the overlay directories, a stale exit status and pid file, the
// last boot's console and runner logs (a boot starts new ones), and stale
// sockets where libkrun must listen (it refuses existing paths).
func prepare(dir string, spec *Spec) error {
	if r := spec.Root; r.IsOverlay() {
		for _, d := range []string{r.Upper, r.Work, r.Merged} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
	}
	stale := []string{filepath.Join(dir, ExitFile), filepath.Join(dir, PidFile), filepath.Join(dir, LogFile), logfile.Prev(filepath.Join(dir, LogFile))}
	if spec.ConsoleLog != "" {
		stale = append(stale, spec.ConsoleLog, logfile.Prev(spec.ConsoleLog))
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, p := range spec.Vsock {
		if !p.Listen {
			continue
		}
		if fi, err := os.Lstat(p.HostPath); err == nil {
			if fi.Mode().Type() != fs.ModeSocket {
				return fmt.Errorf("vsock port %d: %s exists and is not a socket", p.Port, p.HostPath)
			}
			if err := os.Remove(p.HostPath); err != nil {
				return err
			}
		}
	}
	return nil
}

// selfCommand returns a command re-executing this program in a runner role.
func selfCommand(role, dir string) *exec.Cmd {
	cmd := exec.Command(selfExe())
	cmd.Args = []string{"krunbox-" + role, dir}
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return cmd
}
