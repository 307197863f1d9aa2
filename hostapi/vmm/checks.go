package vmm

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi/internal/agentbin"
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
// is none.
func AgentSource(arch string) (source string, size int, err error) {
	b, err := agentbin.Lookup(arch)
	if err != nil {
		return "", 0, err
	}
	return b.Source, len(b.Data), nil
}
