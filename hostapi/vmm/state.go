package vmm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/internal/logfile"
)

// Files of a VM directory.
const (
	// SpecFile holds the VM's [Spec] as JSON.
	SpecFile = "vm.json"
	// LockFile is flock'ed by the runner for its whole life: a VM is
	// running exactly while the lock is held.
	LockFile = "runner.lock"
	// PidFile identifies the runner process: [RunnerInfo] as JSON.
	PidFile = "runner.pid"
	// LogFile receives the runner's stderr: its own errors and libkrun's
	// log.
	LogFile = "runner.log"
	// ExitFile holds the [ExitStatus] of the last run, written when the
	// VM has stopped.
	ExitFile = "exit.json"
)

// ErrNotRunning is returned by operations that need a running VM.
var ErrNotRunning = errors.New("VM is not running")

// ErrRunning is returned by [Start] when the VM already runs.
var ErrRunning = errors.New("VM is already running")

// State says whether a VM runs.
type State int

// States of a VM.
const (
	// StateNone: the VM never started in this directory.
	StateNone State = iota
	// StateRunning: its runner holds the lock.
	StateRunning
	// StateStopped: it ran and stopped (or its runner died).
	StateStopped
)

func (s State) String() string {
	return [...]string{"none", "running", "stopped"}[s]
}

// RunnerInfo identifies a runner process.
type RunnerInfo struct {
	// Pid is the runner, the process that is the VM.
	Pid int `json:"pid"`
	// StartTime is the runner's start time as the kernel reports it
	// (clock ticks since boot on Linux), telling it apart from a later
	// process that reuses the pid.
	StartTime uint64 `json:"start_time"`
	// Monitor is the pid of the process that waits for the runner and
	// records its exit status.
	Monitor int `json:"monitor"`
	// Libkrun is the libkrun the runner loaded, and why that copy.
	Libkrun *LibkrunInfo `json:"libkrun,omitempty"`
}

// LibkrunInfo says which libkrun and libkrunfw a process loaded, and why.
type LibkrunInfo struct {
	// Library is the libkrun file.
	Library string `json:"library"`
	// Why says why that file (krun.WhyBundled, krun.WhyEnv...).
	Why string `json:"why"`
	// Krunfw is the libkrunfw file loaded from beside libkrun; empty when
	// libkrun loads libkrunfw by name, from the system.
	Krunfw string `json:"krunfw,omitempty"`
	// StaleShares, when not empty, says that this libkrun cannot make the
	// shares coherent, and what that means ([StaleShares]).
	StaleShares string `json:"stale_shares,omitempty"`
}

// ExitStatus is how a VM ended.
type ExitStatus struct {
	// Code is the VM's exit code: the guest program's code, 128+N when it
	// was killed by signal N, 125 to 127 when it could not start; or
	// 128+N when the runner itself was killed by signal N.
	Code int `json:"code"`
	// Signal names the signal that killed the runner, if one did.
	Signal string `json:"signal,omitempty"`
	// Time is when the monitor saw the runner end.
	Time time.Time `json:"time"`
}

func (e *ExitStatus) String() string {
	if e.Signal != "" {
		return "runner killed by " + e.Signal
	}
	return fmt.Sprintf("exit code %d", e.Code)
}

// VM is a handle on the VM of a directory. It holds no resources: any
// process can open the same directory and see the same VM.
type VM struct {
	dir string
	// monitor has the runner process's exit status, for a VM this process
	// started, once the VM has stopped.
	monitor chan *os.ProcessState
}

// Open returns a handle on the VM whose state lives in dir.
func Open(dir string) *VM { return &VM{dir: dir} }

// Dir is the VM's directory.
func (v *VM) Dir() string { return v.dir }

func (v *VM) path(name string) string { return filepath.Join(v.dir, name) }

// State reports whether the VM runs. It is decided by the runner's lock,
// not by a pid, so a runner that died, even by SIGKILL, is seen as
// stopped and a stale pid file is never taken for a live VM.
func (v *VM) State() (State, error) {
	f, err := os.Open(v.path(LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(v.path(ExitFile)); err == nil {
			return StateStopped, nil
		}
		return StateNone, nil
	}
	if err != nil {
		return StateNone, fmt.Errorf("VM state: %w", err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return StateRunning, nil
	}
	if err != nil {
		return StateNone, fmt.Errorf("VM state: lock %s: %w", f.Name(), err)
	}
	return StateStopped, nil
}

// Runner returns the running VM's runner process, checked to be alive and
// to be the process that wrote the pid file.
func (v *VM) Runner() (*RunnerInfo, error) {
	st, err := v.State()
	if err != nil {
		return nil, err
	}
	if st != StateRunning {
		return nil, ErrNotRunning
	}
	data, err := os.ReadFile(v.path(PidFile))
	if err != nil {
		return nil, fmt.Errorf("VM runner: %w", err)
	}
	var ri RunnerInfo
	if err := json.Unmarshal(data, &ri); err != nil {
		return nil, fmt.Errorf("VM runner: %s: %w", v.path(PidFile), err)
	}
	if st, err := processStartTime(ri.Pid); err != nil || st != ri.StartTime {
		return nil, ErrNotRunning
	}
	return &ri, nil
}

// CPUTime returns the CPU time (user and system) the running VM's runner
// process has used: its vCPUs and devices. A VM that uses about one CPU
// second per second while its guest says nothing is spinning.
func (v *VM) CPUTime() (time.Duration, error) {
	ri, err := v.Runner()
	if err != nil {
		return 0, err
	}
	return processCPUTime(ri.Pid)
}

// ExitStatus returns how the VM's last run ended, or ErrNotRunning wrapped
// with an explanation when that is unknown.
func (v *VM) ExitStatus() (*ExitStatus, error) {
	data, err := os.ReadFile(v.path(ExitFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no exit status recorded in %s (the VM is running, never ran, or its monitor was killed): %w", v.dir, ErrNotRunning)
	}
	if err != nil {
		return nil, fmt.Errorf("VM exit status: %w", err)
	}
	var es ExitStatus
	if err := json.Unmarshal(data, &es); err != nil {
		return nil, fmt.Errorf("VM exit status: %s: %w", v.path(ExitFile), err)
	}
	return &es, nil
}

// Wait waits until the VM has stopped and returns its exit status.
func (v *VM) Wait(ctx context.Context) (*ExitStatus, error) {
	delay := time.Millisecond
	for {
		st, err := v.State()
		if err != nil {
			return nil, err
		}
		if st != StateRunning {
			return v.ExitStatus()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for VM %s: %w", v.dir, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// Signal sends sig to the runner, checked to be the VM's runner and not a
// process that reused its pid.
func (v *VM) Signal(sig syscall.Signal) error {
	ri, err := v.Runner()
	if err != nil {
		return err
	}
	return signalProcess(ri, sig)
}

// Stop ends the VM: SIGTERM to the runner, then SIGKILL after grace. libkrun
// offers no orderly guest shutdown on Linux, so ask the guest agent to shut
// down first when it should sync. It returns the exit status.
func (v *VM) Stop(ctx context.Context, grace time.Duration) (*ExitStatus, error) {
	if err := v.Signal(syscall.SIGTERM); err != nil {
		if errors.Is(err, ErrNotRunning) {
			return v.ExitStatus()
		}
		return nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	es, err := v.Wait(gctx)
	cancel()
	if err == nil || ctx.Err() != nil {
		return es, err
	}
	if err := v.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, ErrNotRunning) {
		return nil, err
	}
	return v.Wait(ctx)
}

// logTail returns the last lines of the runner's log, for error messages.
func (v *VM) logTail() string {
	data, err := logfile.TailLines(v.path(LogFile), 2048)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}
