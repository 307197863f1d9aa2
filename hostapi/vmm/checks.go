package vmm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi/internal/agentbin"
	"github.com/krunbox/krunbox/krun"
)

// roleNamespaces exits at once: CheckNamespaces starts it with the
// runner's namespace setup.
const roleNamespaces = "ns"

// HypervisorError says why the hypervisor cannot be used, with the fix.
type HypervisorError struct {
	Err  error
	hint string
}

func (e *HypervisorError) Error() string { return e.Err.Error() }
func (e *HypervisorError) Unwrap() error { return e.Err }

// Hint says how to make the hypervisor available.
func (e *HypervisorError) Hint() string { return e.hint }

// CheckNamespaces checks that a runner can get the namespaces it runs in
// (on Linux a mount namespace and, for a caller that is not root, a user
// namespace) by starting a process with them.
func CheckNamespaces() error {
	cmd := selfCommand(roleNamespaces, "-")
	cmd.SysProcAttr = runnerSysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("start a process in the runner's namespaces: %w %s", err, out)
	}
	return nil
}

// CheckStateDir checks that dir can be created and written, and that it
// supports the lock the runner holds.
func CheckStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("lock a file in %s: %w", filepath.Dir(f.Name()), err)
	}
	return nil
}

// AgentSource says where the guest agent for the guest architecture arch
// (a GOARCH) comes from ("embedded", or a file) and its size, or why there
// is none. With cache not empty, an agent neither embedded nor installed
// is built from the krunbox module's source into cache (see Preflight).
func AgentSource(arch, cache string) (source string, size int, err error) {
	b, err := agentbin.Lookup(arch, cache)
	if err != nil {
		return "", 0, err
	}
	return b.Source, int(b.Size), nil
}

// KVMDevice returns the KVM device the runner checks before it loads
// libkrun: /dev/kvm, or the file KVMDeviceEnv names, which is then checked
// even under the test double (forced).
func KVMDevice() (dev string, forced bool) {
	if d := os.Getenv(KVMDeviceEnv); d != "" {
		return d, true
	}
	return "/dev/kvm", false
}

// PreflightError says why VMs cannot start on this host, before anything
// was pulled or started.
type PreflightError struct {
	// Problems are what is missing, in the order checked.
	Problems []error
	hint     string
}

func (e *PreflightError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return "cannot start VMs on this host: " + strings.Join(msgs, "; ")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *PreflightError) Unwrap() []error { return e.Problems }

// Hint says how to fix the first problem and where to look for more.
func (e *PreflightError) Hint() string { return e.hint }

// Preflight checks what the runner needs to start a VM with the library
// lib (empty: the default search, KRUNBOX_LIBKRUN first), as the runner
// itself will: that libkrun loads (in a child process, see [Probe]), that
// libkrunfw, which holds the guest kernel, loads too, and that the
// hypervisor can be used, unless the library is krunbox's test double,
// and that the guest agent exists (built from the krunbox module's source
// into cache, at first use, for a program that does not embed one). It
// returns nil or a [*PreflightError].
func Preflight(ctx context.Context, lib, cache string) error {
	var problems []error
	var hints []string
	add := func(err error, hint string) {
		problems = append(problems, err)
		if hint != "" {
			hints = append(hints, hint)
		}
	}
	r, err := Probe(ctx, lib)
	double := err == nil && r.LoadErr == "" && r.TestDouble
	dev, forced := KVMDevice()
	if !double || forced {
		if err := CheckHypervisor(dev); err != nil {
			hint := ""
			if he := (*HypervisorError)(nil); errors.As(err, &he) {
				hint = he.Hint()
			}
			add(err, hint)
		}
	}
	switch {
	case err != nil:
		add(err, "the library crashed while being loaded: reinstall libkrun, or point "+krun.LibraryEnv+" at a working one")
	case r.LoadErr != "":
		add(errors.New(r.LoadErr), r.LoadHint())
	case r.KrunfwErr != "" && !double:
		add(fmt.Errorf("load libkrunfw: %s", r.KrunfwErr), "install libkrunfw, which holds the guest kernel libkrun boots: "+krun.InstallHint())
	case r.ContextErr != "" && len(r.Missing) == 0:
		add(fmt.Errorf("libkrun %s refused a sandbox's configuration: %s", r.Library, r.ContextErr), "")
	}
	if _, _, err := AgentSource(runtime.GOARCH, cache); err != nil {
		add(fmt.Errorf("guest agent: %w", err), "")
	}
	if len(problems) == 0 {
		return nil
	}
	hints = append(hints, "'krunbox doctor' checks everything")
	return &PreflightError{Problems: problems, hint: strings.Join(hints, "; ")}
}
