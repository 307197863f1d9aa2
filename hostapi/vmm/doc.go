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
// Start spawns a monitor (setsid, stdio to the VM directory's runner.log)
// that spawns the runner and waits for it, recording its exit status in
// exit.json. The runner:
//
//   - on Linux, runs in a new mount namespace and, for a caller that is
//     not root, a new user namespace mapping the caller to root, so the
//     guest sees the caller's files as root's;
//   - checks that it can open /dev/kvm read-write before touching libkrun
//     (libkrun aborts without it) and otherwise exits with code 125 and a
//     message in runner.log; only krunbox's test double (hack/testkrun),
//     recognised by a marker symbol, runs without /dev/kvm;
//   - mounts the overlay root (the read-only image tree under a per-VM
//     writable layer), raises RLIMIT_NOFILE, places the spec's files,
//     configures libkrun, writes runner.pid and calls krun_start_enter.
//     Its exit code is the VM's.
//
// Liveness is decided by a lock (runner.lock) that Start takes and hands
// down, held by the monitor and the runner for their whole lives: a VM
// whose runner died, even by SIGKILL, is seen as stopped, and a stale pid
// file is never taken for a live VM. Signals go through a pidfd checked
// against the runner's start time.
package vmm
