// Package vmm runs libkrun microVMs: it describes a VM ([Spec]), starts it
// in a runner process detached from the caller ([Start]), and follows it
// ([VM]: state, exit status, signals, stop).
//
// # The runner is this program
//
// krun_start_enter never returns (the calling process becomes the VM), so
// every VM runs in its own process. That process is the calling program
// itself, re-executed (/proc/self/exe on Linux): no separate runner binary
// is installed, and there is no line to add to main. The re-executed
// process carries a private environment variable, and this package's init
// function, which runs before main and before the init functions of the
// packages that import vmm, recognises it and runs the runner instead of
// the program. Any program importing hostapi (which imports vmm) is thus
// its own runner, the krunbox CLI included. On macOS the program must be
// signed with the com.apple.security.hypervisor entitlement
// (hack/hvf-entitlements.plist; "make build" does it for krunbox).
//
// # Processes and files
//
// A VM lives in a directory of its own (a sandbox's state directory):
// vm.json (the [Spec]), runner.lock, runner.pid, runner.log (the runner's
// stderr and libkrun's log) and exit.json. Start re-executes the program
// detached from the caller (a new session, stdin /dev/null, stdout and
// stderr to runner.log). Before the Go runtime starts, that process forks:
// the parent stays in C as the monitor, which copies the child's stdout and
// stderr into runner.log and the console into the spec's console log (both
// through pipes, each file kept under Spec.LogMax by rotation into one
// previous file, NAME.1: the guest decides how much it writes), waits for
// the child and records its exit status in exit.json; the child is the
// runner, which
//
//   - on Linux, enters a new mount namespace and, for a caller that is not
//     root, a new user namespace mapping the caller to root, so the guest
//     sees the caller's files as root's. An overlay root needs them; a
//     plain-directory root does not, and where the host denies them
//     (CheckNamespaces fails) its runner stays in the caller's namespaces
//     and runner.log says so;
//   - checks that it can open /dev/kvm read-write before calling libkrun
//     (libkrun aborts without it) and otherwise exits with code 125 and a
//     message in runner.log; only krunbox's test double (hack/testkrun),
//     recognised by a marker symbol, runs without /dev/kvm, unless
//     KRUNBOX_KVM_DEVICE names a device to check anyway;
//   - mounts the overlay root (the read-only image tree under the VM's
//     writable layer; [CheckOverlay] says whether this host can), places the spec's files (libkrun overlay files where
//     the library has them, else written into the writable root), raises
//     RLIMIT_NOFILE, configures libkrun (console output to the monitor's
//     pipe, /proc/self/fd/5), writes runner.pid, tells Start it is ready,
//     flushes and calls krun_start_enter. Its exit code is the VM's.
//
// The monitor never stops reading the pipes while the runner lives, so the
// guest's console writes wait at most for a write to the file (what cannot
// be written, on a full disk, is dropped); it reads them to their end, at
// most 2 s past the runner's exit, before it records the exit status, so
// that the guest's last words are in the logs. A monitor killed leaves the
// runner writing into pipes nobody reads: the runner dies at its next
// write to its stderr, and the guest's console stops.
//
// Liveness is decided by a lock (runner.lock) that Start takes and hands
// down, held by the monitor and the runner for their whole lives: a VM
// whose runner died, even by SIGKILL, is seen as stopped, and a stale pid
// file is never taken for a live VM. Signals go through a pidfd checked
// against the runner's start time.
package vmm
