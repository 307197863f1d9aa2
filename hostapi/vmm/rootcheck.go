package vmm

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// roleOverlay mounts an overlay root as the runner would and exits:
// CheckOverlay starts it in the runner's namespaces.
const roleOverlay = "overlay"

// noNamespacesEnv tells a runner to stay in its caller's namespaces: the C
// monitor then does not enter them (monitor_cgo.go) and the runner mounts
// nothing. Start sets it for a plain-directory root where the runner
// cannot get its namespaces.
const noNamespacesEnv = "_KRUNBOX_VMM_NO_NAMESPACES"

// CheckOverlay checks that a runner can serve an overlay root (the image
// tree under a writable layer) whose layer lives on dir's file system: it
// starts a process with the runner's namespaces (on Linux a mount
// namespace and, for a caller that is not root, a user namespace mapping
// it to root), which mounts an overlay of directories it makes below dir,
// as the runner does, and exits; what it made is removed. The error says
// what failed: the namespaces (unprivileged user namespaces disabled or
// restricted, as by Ubuntu's AppArmor policy, or denied in a container) or
// the mount (a kernel before 5.11 refuses unprivileged overlays, an upper
// directory on overlayfs or NFS is refused). macOS has no overlayfs.
func CheckOverlay(dir string) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("overlay roots need Linux's overlayfs, and this is %s", runtime.GOOS)
	}
	tmp, err := os.MkdirTemp(dir, ".overlay-check-")
	if err != nil {
		return fmt.Errorf("check overlay roots: %w", err)
	}
	defer func() {
		// overlayfs leaves its work/work directory at mode 0.
		os.Chmod(filepath.Join(tmp, "work", "work"), 0o700)
		os.RemoveAll(tmp)
	}()
	r := overlayCheckRoot(tmp)
	for _, d := range []string{r.Lower, r.Upper, r.Work, r.Merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("check overlay roots: %w", err)
		}
	}
	cmd := selfCommand(roleOverlay, tmp)
	cmd.SysProcAttr = runnerSysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			return fmt.Errorf("mount an overlay in the runner's namespaces: %w", err)
		}
		return fmt.Errorf("mount an overlay in the runner's namespaces: %w: %s", err, msg)
	}
	return nil
}

// overlayCheckRoot is the overlay CheckOverlay mounts in dir.
func overlayCheckRoot(dir string) Root {
	return Root{
		Lower:  filepath.Join(dir, "lower"),
		Upper:  filepath.Join(dir, "upper"),
		Work:   filepath.Join(dir, "work"),
		Merged: filepath.Join(dir, "merged"),
	}
}

// overlayCheckMain runs in the process CheckOverlay starts.
func overlayCheckMain(dir string) int {
	if err := setupRoot(overlayCheckRoot(dir), true); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// checkNamespaces is CheckNamespaces, run once per process; tests replace
// it.
var checkNamespaces = sync.OnceValue(CheckNamespaces)

// namespacesUnavailable returns why a runner for root must do without its
// namespaces, or nil when it gets them. An overlay root always needs them
// (starting fails without); a plain-directory root does not, and uses them
// when it can, so that on Linux the guest sees the caller's files as
// root's.
func namespacesUnavailable(root Root) error {
	if runtime.GOOS != "linux" || root.IsOverlay() {
		return nil
	}
	return checkNamespaces()
}

// ProtectsPaths reports whether a runner for root gets the mount
// namespace in which it mounts Spec.Protect: on Linux where namespaces are
// available (always for an overlay root, which fails to start without
// them); never on macOS. Without it, give the spec no protected paths.
func ProtectsPaths(root Root) bool {
	return runtime.GOOS == "linux" && namespacesUnavailable(root) == nil
}
