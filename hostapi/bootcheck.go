package hostapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/krun"
)

// DefaultBootTimeout is how long CheckBoot waits for its VM's agent by
// default: a VM boots in well under a second on hardware KVM, and a few
// seconds nested; on a /dev/kvm that cannot run libkrunfw's kernel (PVM),
// libkrun spins for about 40 s before the VM exits.
const DefaultBootTimeout = 15 * time.Second

// bootCheckPrefix names the state directories of CheckBoot's VMs.
const bootCheckPrefix = "boot-check-"

// BootReport is what CheckBoot saw of a VM that booted.
type BootReport struct {
	// Ready is the time from starting the VM to its agent's answer.
	Ready time.Duration
	// Agent is the agent's hello, with the guest's boot timings.
	Agent *AgentInfo
}

// BootError reports a VM of CheckBoot that did not answer: what was seen
// and the likely cause.
type BootError struct {
	// Timeout is how long CheckBoot waited.
	Timeout time.Duration
	// Start is the runner's error when it gave up before booting the VM
	// (a *RunnerError), nil when the VM ran.
	Start error
	// Exit is how the VM ended on its own before its agent answered; nil
	// when it still ran at the deadline (and was stopped) or never ran.
	Exit *ExitStatus
	// Ran is how long the VM ran; CPU the CPU time it used meanwhile (0
	// when unknown).
	Ran, CPU time.Duration
	// Log and Console are the last lines of the runner's log (with
	// libkrun's warnings and errors) and of the VM's console.
	Log, Console string
	// Cause is the likely cause, from what backs /dev/kvm, when the guest
	// wrote nothing on its console; empty when unknown.
	Cause string
	fix   string
}

func (e *BootError) Error() string {
	if e.Start != nil {
		return fmt.Sprintf("the VM did not start: %v", e.Start)
	}
	var b strings.Builder
	if e.Exit != nil {
		fmt.Fprintf(&b, "the VM ended (%s) after %s before its guest agent answered", e.Exit, e.Ran.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(&b, "no answer from the guest agent within %v; the VM was stopped", e.Timeout)
	}
	if e.CPU > 0 {
		fmt.Fprintf(&b, "; it used %s of CPU time", e.CPU.Round(100*time.Millisecond))
	}
	if e.Console == "" {
		b.WriteString("; nothing on its console")
	} else {
		b.WriteString("; console: " + e.Console)
	}
	if e.Log == "" {
		b.WriteString("; libkrun logged nothing")
	} else {
		b.WriteString("; log: " + e.Log)
	}
	return b.String()
}

// Unwrap returns the runner's error, if any.
func (e *BootError) Unwrap() error { return e.Start }

// Hint says what to do about the likely cause.
func (e *BootError) Hint() string { return e.fix }

// CheckBoot boots a minimal VM (libkrunfw's kernel, the guest agent, an
// empty root, one vCPU) and waits for its agent to answer, at most timeout
// (DefaultBootTimeout when 0); the VM is stopped and its files removed
// when it returns. It returns how long the agent took to answer, or a
// *BootError saying what was seen and the likely cause: it is what tells
// a /dev/kvm that opens but cannot run a guest (PVM, nested without
// hardware support) from one that can.
func (h *Host) CheckBoot(ctx context.Context, timeout time.Duration) (*BootReport, error) {
	if timeout <= 0 {
		timeout = DefaultBootTimeout
	}
	h.removeBootChecks()
	if err := os.MkdirAll(h.dirs.State, 0o700); err != nil {
		return nil, fmt.Errorf("boot check: %w", err)
	}
	dir, err := os.MkdirTemp(h.dirs.State, bootCheckPrefix)
	if err != nil {
		return nil, fmt.Errorf("boot check: %w", err)
	}
	defer removeTree(dir)
	spec, err := h.bootCheckSpec(dir, timeout)
	if err != nil {
		return nil, fmt.Errorf("boot check: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	begin := time.Now()
	vm, err := vmm.Start(ctx, dir, spec)
	if se := (*vmm.StartError)(nil); errors.As(err, &se) {
		return nil, &BootError{Timeout: timeout, Start: sdkError(se), fix: "fix what the runner's log says (krunbox doctor's other lines check what it needs)"}
	}
	if err != nil {
		return nil, fmt.Errorf("boot check: %w", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer scancel()
		vm.Stop(sctx, time.Second)
	}()
	c := NewUnixClient(filepath.Join(dir, socketFile))
	defer c.Close()
	info, err := awaitAgent(ctx, c, vm)
	ran := time.Since(begin)
	if err == nil {
		return &BootReport{Ready: ran, Agent: info}, nil
	}
	be := &BootError{Timeout: timeout, Ran: ran}
	if errors.Is(err, errVMEnded) {
		es, _ := vm.ExitStatus()
		be.Exit = (*ExitStatus)(es)
	} else {
		be.CPU, _ = vm.CPUTime()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		vm.Stop(sctx, time.Second)
		scancel()
	}
	be.Log = tail(filepath.Join(dir, vmm.LogFile), 1024)
	be.Console = tail(filepath.Join(dir, consoleFile), 1024)
	if be.Console == "" {
		k := vmm.DescribeKVM()
		be.Cause, be.fix = k.LikelyCause(), k.Fix()
	} else {
		be.fix = "the guest kernel started but the agent did not answer: read the console above"
	}
	return nil, be
}

// bootCheckSpec is the VM of CheckBoot, in dir: an empty root, the guest
// agent and its configuration (which shuts the VM down once idle for
// timeout, should this process die before stopping it).
func (h *Host) bootCheckSpec(dir string, timeout time.Duration) (*vmm.Spec, error) {
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	agent, err := h.agentFile(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	ac, err := json.Marshal(&protocol.Config{Port: protocol.DefaultPort, Hostname: "krunbox-boot-check", IdleTimeout: timeout})
	if err != nil {
		return nil, err
	}
	return &vmm.Spec{
		VCPUs:      1,
		MemoryMiB:  256,
		Root:       vmm.Root{Dir: root},
		Exec:       vmm.Exec{Path: protocol.AgentPath, Args: []string{"--config", protocol.ConfigPath}},
		Workdir:    "/",
		Vsock:      []vmm.VsockPort{{Port: protocol.DefaultPort, HostPath: filepath.Join(dir, socketFile), Listen: true}},
		ConsoleLog: filepath.Join(dir, consoleFile),
		LogLevel:   krun.LogWarn,
		Library:    h.libkrun,
		Files: []vmm.File{
			{Path: protocol.AgentPath, Mode: 0o755, Source: agent},
			{Path: protocol.ConfigPath, Mode: 0o644, Data: ac},
		},
	}, nil
}

// removeBootChecks removes what the boot checks of processes that died
// before cleaning up left: those whose VMs have stopped, and those older
// than a minute whose VMs never started.
func (h *Host) removeBootChecks() {
	dirs, _ := filepath.Glob(filepath.Join(h.dirs.State, bootCheckPrefix+"*"))
	for _, d := range dirs {
		st, err := vmm.Open(d).State()
		fi, serr := os.Lstat(d)
		if err != nil || serr != nil || !fi.IsDir() {
			continue
		}
		if st == vmm.StateStopped || (st == vmm.StateNone && time.Since(fi.ModTime()) > time.Minute) {
			removeTree(d)
		}
	}
}
