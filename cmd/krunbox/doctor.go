package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/krun"
)

func newDoctorCmd(s *streams) *cobra.Command {
	var o doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check that this machine can run krunbox VMs",
		Long: `doctor checks what krunbox needs to run VMs: the platform, the hypervisor
(/dev/kvm), the namespaces and overlay mount of sandbox roots (Linux),
libkrun and libkrunfw, a libkrun context, the macOS entitlement, the state
directory and the guest agent. Then, unless --quick, it boots a minimal VM
(libkrunfw's kernel, the guest agent, an empty root) and waits for its
agent, at most --boot-timeout: a /dev/kvm that opens may still be unable
to run a guest (PVM, nested virtualization without hardware support), and
only a boot shows it. Each line says ✓ or ✗ and, for ✗, how to fix it.
doctor exits with 1 when "krunbox run" cannot work; a ✗ marked optional
only makes krunbox slower.

libkrun is loaded in a separate process, so a library that crashes cannot
take doctor down. It is searched for in this order, and doctor says which
copy it found and why: the file KRUNBOX_LIBKRUN names (alone, when set);
one installed with krunbox (../lib/krunbox/libkrun.so.1 from the real path
of the krunbox binary, as the release bundle has it, then beside the
binary, as the pi package has it); $KRUNBOX_HOME/lib; the system's dynamic
loader. A libkrunfw in the folder libkrun came from is loaded with it.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !doctor(cmd.Context(), s.out, o) {
				return exitStatus(1)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.quick, "quick", false, "skip booting a VM")
	cmd.Flags().DurationVar(&o.bootTimeout, "boot-timeout", hostapi.DefaultBootTimeout, "how long the boot check waits for the VM's agent before stopping it")
	return cmd
}

// doctorOptions are doctor's flags.
type doctorOptions struct {
	quick       bool
	bootTimeout time.Duration
}

// checkList prints check results and remembers whether a required one
// failed.
type checkList struct {
	w      io.Writer
	failed bool
}

func (c *checkList) ok(name, format string, a ...any) {
	fmt.Fprintf(c.w, "✓ %s: %s\n", name, fmt.Sprintf(format, a...))
}

// bad reports a failed check with its fix; required failures make run
// impossible.
func (c *checkList) bad(required bool, name string, err error, fix string) {
	c.badCause(required, name, err, "", fix)
}

// badCause is bad with the likely cause of the failure.
func (c *checkList) badCause(required bool, name string, err error, cause, fix string) {
	msg := err.Error()
	if !required {
		msg += " (optional)"
	}
	fmt.Fprintf(c.w, "✗ %s: %s\n", name, msg)
	if cause != "" {
		fmt.Fprintf(c.w, "    likely cause: %s\n", cause)
	}
	if fix != "" {
		fmt.Fprintf(c.w, "    fix: %s\n", fix)
	}
	c.failed = c.failed || required
}

func hintOf(err error) string {
	var h hinter
	if errors.As(err, &h) {
		return h.Hint()
	}
	return ""
}

// doctor runs every check, printing one line each, and reports whether
// "krunbox run" can work.
func doctor(ctx context.Context, w io.Writer, o doctorOptions) bool {
	c := &checkList{w: w}

	platform := runtime.GOOS + "/" + runtime.GOARCH
	switch platform {
	case "linux/amd64", "linux/arm64", "darwin/arm64":
		c.ok("platform", "%s", platform)
	default:
		c.bad(true, "platform", fmt.Errorf("%s is not supported", platform), "krunbox runs on Linux (x86_64, arm64) and macOS on Apple silicon")
	}

	// The library first: the test double needs no hypervisor.
	probe, probeErr := vmm.Probe(ctx, "")
	kvm, _ := vmm.KVMDevice()
	if err := vmm.CheckHypervisor(kvm); err != nil {
		double := probeErr == nil && probe.TestDouble
		if double {
			err = fmt.Errorf("%w; not needed by the test double", err)
		}
		c.bad(!double, "hypervisor", err, hintOf(err))
	} else if runtime.GOOS == "darwin" {
		c.ok("hypervisor", "Hypervisor.framework available")
	} else {
		c.ok("hypervisor", "%s can be opened read-write", kvm)
	}

	if runtime.GOOS == "linux" {
		doctorNamespaces(c)
	}

	doctorLibkrun(c, probe, probeErr)
	if probeErr == nil && probe.LoadErr == "" {
		doctorRoot(c, probe)
	}

	if runtime.GOOS == "darwin" {
		doctorEntitlement(c)
	}

	if dirs, err := hostapi.DefaultDirs(); err != nil {
		c.bad(true, "state directory", err, "set KRUNBOX_HOME or HOME")
	} else if err := vmm.CheckStateDir(dirs.State); err != nil {
		c.bad(true, "state directory", err, "make "+dirs.State+" writable, or set KRUNBOX_HOME to a writable local directory")
	} else {
		c.ok("state directory", "%s is writable", dirs.State)
	}

	// A krunbox built without make (go install) embeds no agent: it is
	// built from the module's source into the cache, as for the SDK.
	cache := ""
	if dirs, err := hostapi.DefaultDirs(); err == nil {
		cache = dirs.Cache
	}
	if src, size, err := vmm.AgentSource(runtime.GOARCH, cache); err != nil {
		c.bad(true, "guest agent", err, "")
	} else {
		c.ok("guest agent", "linux/%s, %s (%d KiB)", runtime.GOARCH, src, size/1024)
	}
	if !o.quick {
		doctorBoot(ctx, c, o.bootTimeout)
	}
	return !c.failed
}

// doctorBoot boots a minimal VM and reports whether its agent answered.
func doctorBoot(ctx context.Context, c *checkList, timeout time.Duration) {
	if c.failed {
		fmt.Fprintf(c.w, "- boot: not tried, a VM cannot start before the ✗ above are fixed\n")
		return
	}
	h, err := hostapi.NewHost()
	if err != nil {
		c.bad(true, "boot", err, "")
		return
	}
	r, err := h.CheckBoot(ctx, timeout)
	if err != nil {
		var be *hostapi.BootError
		if errors.As(err, &be) {
			c.badCause(true, "boot", err, be.Cause, be.Hint())
		} else {
			c.bad(true, "boot", err, "")
		}
		return
	}
	c.ok("boot", "a VM boots and answers in %d ms", r.Ready.Milliseconds())
}

// doctorNamespaces reports whether sandbox roots can be overlays: whether
// the VM runner gets its namespaces and can mount an overlay there.
// Without, sandboxes still run, on a copy of their image.
func doctorNamespaces(c *checkList) {
	const copied = "sandboxes will use a copied root (slower to create, more disk)"
	if err := vmm.CheckNamespaces(); err != nil {
		c.bad(false, "namespaces", fmt.Errorf("%w; %s", err, copied),
			"allow unprivileged user namespaces: on Ubuntu 23.10 and later an AppArmor profile granting krunbox userns (see README), or sysctl kernel.apparmor_restrict_unprivileged_userns=0; "+
				"elsewhere sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces above 0; in a container, allow unshare(2); or run as root")
		return
	}
	dirs, err := hostapi.DefaultDirs()
	if err == nil {
		err = os.MkdirAll(dirs.Sandboxes(), 0o700)
	}
	if err != nil {
		c.bad(false, "namespaces", fmt.Errorf("the runner gets its namespaces; the overlay mount was not checked: %w", err), "see the state directory line")
		return
	}
	if err := vmm.CheckOverlay(dirs.Sandboxes()); err != nil {
		c.bad(false, "namespaces", fmt.Errorf("the runner gets its namespaces but cannot mount an overlay root: %w; %s", err, copied),
			"unprivileged overlay mounts need Linux 5.11 or later, and the state directory on a local file system other than overlayfs or NFS, at a path without ',', ':' or '\\' (set KRUNBOX_HOME to move it)")
		return
	}
	c.ok("namespaces", "the runner gets its namespaces and mounts overlay roots: creating a sandbox copies nothing")
}

// doctorRoot says whether this host gives block roots (root = "block";
// auto still takes an overlay, see the namespaces line), and what they
// need when it cannot.
func doctorRoot(c *checkList, r *vmm.ProbeReport) {
	err := vmm.BlockUnavailable(r)
	mke2fs, merr := hostapi.Mke2fs()
	if err == nil {
		err = merr
	}
	if err != nil {
		c.bad(false, "block root", fmt.Errorf("%w; --root block is refused here and auto takes an overlay or a copy (see the namespaces line)", err),
			"block roots (the guest's writes on a disk of its own, bounded by disk_size) need krunbox's libkrun 1.19, built with BLK=1 (the release bundle's, or make libkrun), and mke2fs (e2fsprogs)")
		return
	}
	c.ok("block root", "auto and --root block give one: libkrun has disks, %s formats them", mke2fs)
}

// doctorLibkrun reports what the probe of libkrun found: the library, its
// features, libkrunfw and a representative context.
func doctorLibkrun(c *checkList, r *vmm.ProbeReport, err error) {
	if err != nil {
		c.bad(true, "libkrun", err, "the library crashed while being probed: reinstall libkrun, or point "+krun.LibraryEnv+" at a working one")
		return
	}
	if r.LoadErr != "" {
		c.bad(true, "libkrun", errors.New(r.LoadErr), r.LoadHint())
		return
	}
	kind := ""
	if r.TestDouble {
		kind = " (krunbox's test double: no VM, for tests)"
	}
	why := ""
	if r.LibraryWhy != "" {
		why = " (" + r.LibraryWhy + ")"
	}
	c.ok("libkrun", "%s%s%s", r.Library, why, kind)

	var have, lack []string
	for f, ok := range r.Features {
		if ok {
			have = append(have, f)
		} else {
			lack = append(lack, f)
		}
	}
	sort.Strings(have)
	switch {
	case len(r.Missing) > 0:
		c.bad(false, "libkrun version", fmt.Errorf("lacks %s", strings.Join(r.Missing, ", ")),
			"install libkrun 1.19 or later: older versions cannot turn networking off, share read-only or serve the agent from memory")
	case r.Features == nil:
		c.ok("libkrun features", "unknown (no krun_has_feature)")
	case len(have) == 0:
		c.ok("libkrun features", "a default build (none of %d optional features)", len(lack))
	default:
		c.ok("libkrun features", "%s", strings.Join(have, ", "))
	}
	switch {
	case r.Features["net"]:
		c.ok("network", "virtio-net (NET): networks public, allow= and open can start")
	case r.Features == nil:
		c.bad(false, "network", errors.New("this libkrun cannot say whether it has virtio-net (NET): networks public, allow= and open may fail to start"),
			"install libkrun 1.19 built with NET=1 (the release bundle's is), or use --net tsi or none")
	default:
		c.bad(false, "network", errors.New("this libkrun has no virtio-net (it was built without NET): networks public, allow= and open cannot start"),
			"install libkrun built with NET=1 (the release bundle's is), or use --net tsi or none (config network)")
	}

	if r.StaleShares != "" {
		c.bad(false, "live workspace", errors.New(r.StaleShares),
			"krunbox's libkrun adds "+krun.ShareCacheFunc+" to libkrun 1.19 (hack/libkrun): the release bundle and the pi package carry it; make libkrun builds it")
	} else {
		c.ok("live workspace", "the guest sees each host change to the workspace and -v mounts at its next access (%s)", krun.ShareCacheFunc)
	}

	switch {
	case r.KrunfwErr == "":
		from := krun.WhySystem
		if r.KrunfwBeside {
			from = "beside libkrun"
		}
		c.ok("libkrunfw", "%s, ABI version %d (%s)", r.Krunfw, r.KrunfwVersion, from)
	case r.TestDouble:
		c.ok("libkrunfw", "not found, and not needed by the test double")
	default:
		c.bad(true, "libkrunfw", errors.New(r.KrunfwErr), "install libkrunfw (libkrunfw.so.5 on Linux, libkrunfw.5.dylib on macOS), which holds the guest kernel libkrun loads: "+krun.InstallHint())
	}

	doctorFileEvents(c, r)

	if r.ContextErr != "" {
		c.bad(r.Missing == nil, "libkrun context", errors.New(r.ContextErr), "")
	} else {
		c.ok("libkrun context", "created, configured like a sandbox and freed")
	}
}

// doctorFileEvents says whether the guest kernel that libkrunfw holds can
// take host changes, which wake the guest's file watchers.
func doctorFileEvents(c *checkList, r *vmm.ProbeReport) {
	const fix = "krunbox's libkrunfw adds the fsnotify injection to the guest kernel: make libkrunfw builds it (hack/README.md), and a release bundle made with it carries it"
	switch {
	case r.TestDouble && os.Getenv("TESTKRUN_NO_FSNOTIFY") != "":
		c.bad(false, "file events", errors.New("the test double stands for a stock libkrunfw (TESTKRUN_NO_FSNOTIFY): the guest's file watchers do not wake for host edits"), "")
	case r.TestDouble:
		c.ok("file events", "the test double records the events the agent fires, for tests")
	case r.KrunfwErr != "":
		// The libkrunfw line says why there is none.
	case r.KrunfwFileEventsErr != "":
		c.bad(false, "file events", errors.New(r.KrunfwFileEventsErr), fix)
	case r.KrunfwFileEvents:
		c.ok("file events", "host edits to the workspace and -v mounts wake the guest's file watchers (the guest kernel has fsnotify injection)")
	default:
		c.bad(false, "file events", fmt.Errorf("the guest kernel in %s has no fsnotify injection: the guest's file watchers (dev servers, test watchers) do not wake for host edits", r.Krunfw), fix)
	}
}

// doctorEntitlement checks that this executable carries the hypervisor
// entitlement macOS requires of the process calling krun_start_enter.
func doctorEntitlement(c *checkList) {
	exe, err := os.Executable()
	if err != nil {
		c.bad(true, "entitlement", err, "")
		return
	}
	out, err := exec.Command("codesign", "-d", "--entitlements", "-", exe).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "com.apple.security.hypervisor") {
		c.bad(true, "entitlement", fmt.Errorf("%s is not signed with com.apple.security.hypervisor", exe),
			"codesign --entitlements hack/hvf-entitlements.plist --force -s - "+exe+" (make build does it)")
		return
	}
	c.ok("entitlement", "%s has com.apple.security.hypervisor", exe)
}
