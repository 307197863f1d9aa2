package vmm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/krunbox/krunbox/hostapi/internal/fileevents"
	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/krun"
)

// roleEnv carries the role of a re-executed runner process. It is removed
// from the environment before anything else runs.
const roleEnv = "_KRUNBOX_VMM_ROLE"

// Roles of a re-executed process.
const (
	roleRunner = "vm"    // becomes the VM (after the C monitor forked it, monitor_cgo.go)
	roleProbe  = "probe" // loads libkrun for Probe and reports
)

// KVMDeviceEnv overrides the device the runner checks before touching
// libkrun, for tests: when set, the check is made even under the test
// double, so a missing file simulates a host without KVM.
const KVMDeviceEnv = "KRUNBOX_KVM_DEVICE"

// Exit codes of the runner when it gives up before the VM boots.
const (
	// ExitRunnerFailed: no KVM, no libkrun, a configuration libkrun
	// refused. The log says which.
	ExitRunnerFailed = 125
)

// Fds the runner (and its monitor) inherit from Start, and the console's
// pipe, which the monitor gives the runner (monitor_cgo.go).
const (
	fdLock    = 3
	fdReady   = 4
	fdConsole = 5
)

// The monitor's environment (monitor_cgo.go): consoleEnv is the console
// log it copies the console's pipe into, logMaxEnv the bound of each log
// file (Spec.LogMax). The runner removes them.
const (
	consoleEnv = "_KRUNBOX_VMM_CONSOLE"
	logMaxEnv  = "_KRUNBOX_VMM_LOG_MAX"
)

// The runner entry point: a process started by Start carries roleEnv, and
// this package's init turns it into the runner before main (or any package
// that imports this one) runs. Any program importing hostapi/vmm, directly
// or through hostapi, is therefore its own VM runner with no extra line in
// main and no separate binary.
func init() {
	role, ok := os.LookupEnv(roleEnv)
	if !ok {
		return
	}
	os.Unsetenv(roleEnv)
	os.Exit(runRole(role, os.Args[1:]))
}

func runRole(role string, args []string) int {
	switch {
	case role == roleRunner && len(args) == 1:
		return runnerMain(args[0])
	case role == roleProbe && len(args) == 1:
		return probeMain(args[0])
	case role == roleNamespaces:
		return 0
	case role == roleOverlay && len(args) == 1:
		return overlayCheckMain(args[0])
	}
	fmt.Fprintf(os.Stderr, "krunbox runner: bad invocation (role %q, args %q)\n", role, args)
	return ExitRunnerFailed
}

// fail reports why the runner gives up and returns its exit code.
func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "krunbox runner: "+format+"\n", a...)
	return ExitRunnerFailed
}

// runnerMain configures libkrun from the spec and becomes the VM.
func runnerMain(dir string) int {
	ready := os.NewFile(fdReady, "ready")
	spec, err := ReadSpec(dir)
	if err != nil {
		return fail("%v", err)
	}

	// libkrun aborts the process without KVM, so check first; only the
	// test double, which exports a marker, runs without it.
	dev, forced := KVMDevice()
	kvmErr := checkHypervisor(dev)
	lib, err := krun.Open(spec.Library)
	if kvmErr != nil && (forced || err != nil || !lib.IsTestDouble()) {
		if err != nil {
			return fail("%v; and %v", kvmErr, err)
		}
		return fail("%v", kvmErr)
	}
	if err != nil {
		return fail("%v", err)
	}

	namespaces := os.Getenv(noNamespacesEnv) == ""
	os.Unsetenv(noNamespacesEnv)
	if os.Getenv(consoleEnv) != "" {
		// libkrun writes the console into the monitor's pipe, opening it
		// by path as it would open the file (O_TRUNC changes nothing on
		// a pipe).
		if err := checkPipe(fdConsole); err != nil {
			return fail("console pipe: %v", err)
		}
		spec.ConsoleLog = fdPath(fdConsole)
	}
	os.Unsetenv(consoleEnv)
	os.Unsetenv(logMaxEnv)
	if err := setupRoot(spec.Root, namespaces); err != nil {
		return fail("root filesystem: %v", err)
	}
	if err := protectPaths(spec.Protect, namespaces); err != nil {
		return fail("protect paths in the shares: %v", err)
	}
	if err := raiseNofile(); err != nil {
		return fail("raise RLIMIT_NOFILE: %v", err)
	}
	ctx, shares, netHost, err := configure(lib, spec)
	if err != nil {
		return fail("configure libkrun: %v", err)
	}
	if netHost != nil {
		// The stack runs in this process's other threads while this one
		// becomes the VM.
		if _, err := startNet(dir, spec, lib, netHost); err != nil {
			return fail("network: %v", err)
		}
	}
	if err := writeRunnerInfo(dir, lib); err != nil {
		return fail("%v", err)
	}
	if spec.FileEvents != nil {
		if err := startFileEvents(spec); err != nil {
			return fail("file events: %v", err)
		}
	}

	os.Stdout.Sync()
	os.Stderr.Sync()
	ready.Write([]byte{'R'})
	ready.Close()
	err = ctx.StartEnter() // returns only if the VM could not be built
	// The shared directories stay open while libkrun serves them: it was
	// given their descriptors' paths (sharePath).
	runtime.KeepAlive(shares)
	return fail("start the VM: %v", err)
}

// startFileEvents watches the shares of spec.FileEvents in this process's
// other threads while this one becomes the VM, and delivers their changes
// to the agent once it is up (the runner log says whether the guest takes
// them). It ends with the process, which is the VM's.
func startFileEvents(spec *Spec) error {
	fe := spec.FileEvents
	socket, err := shortSocketPath(fe.Socket)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	go func() {
		if err := fileevents.Serve(context.Background(), socket, watchedShares(spec), fe.Limits, log); err != nil {
			log.Warn("file events stopped", "err", err)
		}
	}()
	return nil
}

// watchedShares are the shares of spec.FileEvents, without the protected
// paths (the git directories the guest may not change: the host's git
// changing them is nothing for the guest's watchers).
func watchedShares(spec *Spec) []fileevents.Share {
	shares := slices.Clone(spec.FileEvents.Shares)
	for i := range shares {
		for _, p := range spec.Protect {
			shares[i].Exclude = append(shares[i].Exclude, p.Path)
		}
	}
	return shares
}

// configure creates and configures the libkrun context for spec. It opens
// each shared directory with no symlink in any component of its path (the
// path was resolved when the sandbox was created; a symlink planted since
// by a guest that writes a parent directory is refused) and gives libkrun
// that directory (sharePath), not a path it would resolve again. The
// returned files must stay open as long as the VM runs. For a network of
// krunbox's stack it also returns the host's end of the guest's link.
func configure(lib *krun.Library, spec *Spec) (*krun.Context, []*os.File, *os.File, error) {
	if spec.LogLevel > 0 {
		err := lib.InitLog(2, spec.LogLevel)
		if errors.Is(err, krun.ErrUnsupported) {
			err = lib.SetLogLevel(spec.LogLevel)
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	ctx, err := lib.NewContext()
	if err != nil {
		return nil, nil, nil, err
	}
	var shares []*os.File
	var netHost *os.File
	steps := []func() error{
		func() error {
			if spec.VCPUs == 0 && spec.MemoryMiB == 0 {
				return nil
			}
			return ctx.SetVMConfig(max(spec.VCPUs, 1), cmpOr(spec.MemoryMiB, 128))
		},
		func() error {
			if !spec.Root.IsBlock() {
				return ctx.SetRoot(spec.Root.Path())
			}
			// The image tree, read-only: the guest agent overlays the
			// disk's file system on it.
			if err := ctx.AddVirtiofs(krun.RootTag, spec.Root.Image, true); err != nil {
				return fmt.Errorf("block root: %w", err)
			}
			if err := initMountPoints(ctx, lib, spec.Root.Image); err != nil {
				return fmt.Errorf("block root: %w", err)
			}
			disk, err := openDisk(spec.Root.Disk, spec.Root.DiskSize)
			if err != nil {
				return err
			}
			shares = append(shares, disk)
			if err := ctx.AddDisk(DiskID, fdPath(int(disk.Fd())), krun.DiskRaw, false); err != nil {
				return fmt.Errorf("block root: %w", err)
			}
			return nil
		},
		func() error { return placeFiles(ctx, lib, spec) },
		func() error {
			for _, sh := range spec.Shares {
				dir, err := confine.OpenDirNoSymlinks(sh.HostPath)
				if err != nil {
					return fmt.Errorf("share %s: %w", sh.Tag, err)
				}
				shares = append(shares, dir)
				if err := ctx.AddVirtiofs(sh.Tag, sharePath(dir, sh.HostPath), sh.ReadOnly); err != nil {
					return fmt.Errorf("share %s: %w", sh.Tag, err)
				}
				// Without the function the share keeps libkrun's caching:
				// the runner records that (LibkrunInfo.StaleShares), and
				// whoever starts the VM says so.
				if !sh.Cached && lib.Has(krun.ShareCacheFunc) {
					if err := ctx.SetShareCache(sh.Tag, krun.Coherent); err != nil {
						return fmt.Errorf("share %s: %w", sh.Tag, err)
					}
				}
			}
			return nil
		},
		func() error { return ctx.SetExec(spec.Exec.Path, spec.Exec.Args, spec.Exec.Env) },
		func() error {
			if spec.Workdir == "" {
				return nil
			}
			return ctx.SetWorkdir(spec.Workdir)
		},
		func() error {
			if len(spec.Rlimits) == 0 {
				return nil
			}
			return ctx.SetRlimits(spec.krunRlimits())
		},
		func() error {
			if spec.Network != NetworkNone {
				return nil
			}
			if err := ctx.DisableImplicitVsock(); err != nil {
				return fmt.Errorf("network none: %w", err)
			}
			if err := ctx.AddVsock(0); err != nil {
				return fmt.Errorf("network none: %w", err)
			}
			return nil
		},
		func() error {
			var err error
			netHost, err = configureNet(ctx, lib, spec)
			return err
		},
		func() error {
			for _, p := range spec.Vsock {
				path, err := shortSocketPath(p.HostPath)
				if err != nil {
					return fmt.Errorf("vsock port %d: %w", p.Port, err)
				}
				if err := ctx.AddVsockPort(p.Port, path, p.Listen); err != nil {
					return fmt.Errorf("vsock port %d: %w", p.Port, err)
				}
			}
			return nil
		},
		func() error {
			if len(spec.PortMap) == 0 || netHost != nil {
				return nil // the stack publishes them
			}
			return ctx.SetPortMap(spec.portMap())
		},
		func() error {
			if spec.ConsoleLog == "" {
				return nil
			}
			return ctx.SetConsoleOutput(spec.ConsoleLog)
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			ctx.Free()
			closeAll(shares)
			if netHost != nil {
				netHost.Close()
			}
			return nil, nil, nil, err
		}
	}
	return ctx, shares, netHost, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func cmpOr(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// placeFiles puts spec.Files into the guest. A file whose top-level
// directory is absent from the image becomes a libkrun overlay file (in
// overlay directories), leaving the root untouched; the others, and all of
// them when the library has no overlay files, are written into the
// writable root.
//
// The root is the image's and the guest's to shape: a symlink at
// /.krunbox, planted by an image layer or by the guest before this start,
// must not lead the runner's writes (or its check of the image) anywhere
// on the host. So the image tree is looked at and the root written below
// an [os.Root] of each, through package confine: spec.Files and their
// directories are krunbox's, and anything else in their place (a link, a
// directory where a file goes) is replaced.
func placeFiles(ctx *krun.Context, lib *krun.Library, spec *Spec) error {
	overlay := lib.Has("krun_fs_add_overlay_file") && lib.Has("krun_fs_add_overlay_dir")
	lowerDir := spec.Root.Path()
	if spec.Root.IsOverlay() {
		lowerDir = spec.Root.Lower
	}
	if spec.Root.IsBlock() && !overlay {
		return errors.New("a block root needs libkrun's overlay files (libkrun 1.19): its image tree is shared read-only")
	}
	lower, err := os.OpenRoot(lowerDir)
	if err != nil {
		return fmt.Errorf("open the image tree: %w", err)
	}
	defer lower.Close()
	var root *os.Root // opened at the first file written into it
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	dirs := map[string]bool{}
	for _, f := range spec.Files {
		data := f.Data
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return fmt.Errorf("file %s: %w", f.Path, err)
			}
		}
		rel := strings.TrimPrefix(path.Clean(f.Path), "/")
		top, _, nested := strings.Cut(rel, "/")
		_, statErr := lower.Lstat(top)
		// libkrun's overlay entries shadow the directory's own names
		// (AugmentFs looks them up first): a block root's image tree,
		// which must never be written, gets them even where it has
		// /.krunbox itself.
		if overlay && (spec.Root.IsBlock() || !nested || errors.Is(statErr, fs.ErrNotExist)) {
			parts := strings.Split(rel, "/")
			for i := 1; i < len(parts); i++ {
				d := strings.Join(parts[:i], "/")
				if dirs[d] {
					continue
				}
				if err := ctx.AddOverlayDir(krun.RootTag, d, unix.S_IFDIR|0o755); err != nil {
					return fmt.Errorf("file %s: %w", f.Path, err)
				}
				dirs[d] = true
			}
			if err := ctx.AddOverlayFile(krun.RootTag, rel, data, unix.S_IFREG|uint32(f.Mode.Perm()), false); err != nil {
				return fmt.Errorf("file %s: %w", f.Path, err)
			}
			continue
		}
		if root == nil {
			if root, err = os.OpenRoot(spec.Root.Path()); err != nil {
				return fmt.Errorf("open the root: %w", err)
			}
		}
		if err := confine.MkdirAll(root, path.Dir(rel), 0o755, true); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
		// The file replaces whatever is there, but a directory cannot be
		// renamed over.
		if fi, err := root.Lstat(rel); err == nil && fi.IsDir() {
			if err := root.RemoveAll(rel); err != nil {
				return fmt.Errorf("file %s: %w", f.Path, err)
			}
		}
		if err := confine.WriteFile(root, rel, data, f.Mode.Perm()); err != nil {
			return fmt.Errorf("file %s: %w", f.Path, err)
		}
	}
	return nil
}

// writeRunnerInfo records the runner's pid and start time, and the libkrun
// it loaded.
func writeRunnerInfo(dir string, lib *krun.Library) error {
	st, err := processStartTime(os.Getpid())
	if err != nil {
		return fmt.Errorf("runner start time: %w", err)
	}
	data, _ := json.Marshal(RunnerInfo{Pid: os.Getpid(), StartTime: st, Monitor: os.Getppid(), Libkrun: libkrunInfo(lib)})
	return atomicfile.Write(filepath.Join(dir, PidFile), append(data, '\n'), 0o600)
}

// checkPipe checks that fd is a pipe.
func checkPipe(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fmt.Errorf("descriptor %d is not a pipe (mode %#o)", fd, st.Mode)
	}
	return nil
}

func raiseNofile() error {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return err
	}
	rl.Cur = rl.Max
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &rl)
}

func libkrunInfo(lib *krun.Library) *LibkrunInfo {
	return &LibkrunInfo{Library: lib.Path(), Why: lib.Why(), Krunfw: lib.Krunfw(), StaleShares: StaleShares(lib)}
}

// StaleShares says, for a library that cannot make shares coherent (it
// lacks krun.ShareCacheFunc, as every upstream libkrun release does), what
// that means for the user; "" for a library that can.
func StaleShares(lib *krun.Library) string {
	if lib.Has(krun.ShareCacheFunc) {
		return ""
	}
	return fmt.Sprintf("this libkrun (%s) lacks %s, so the guest may see the workspace and -v mounts up to %v stale: "+
		"a file the host replaces (an editor's save) reads as its old content that long, and an edit in the guest meanwhile "+
		"overwrites the host's change; use the libkrun krunbox ships (the release bundle's, or make libkrun)",
		lib.Path(), krun.ShareCacheFunc, krun.DefaultShareTimeout)
}

// maxSocketPath is the longest unix socket path every platform accepts
// (sun_path is 104 bytes on macOS, 108 on Linux, NUL included).
const maxSocketPath = 103

// ProbeReport is what [Probe] found out about a libkrun library.
type ProbeReport struct {
	// Library is the file loaded.
	Library string `json:"library"`
	// LibraryWhy says why that file: a krun.Why* constant.
	LibraryWhy string `json:"library_why,omitempty"`
	// KrunfwBeside is true when libkrunfw was loaded from libkrun's
	// folder rather than by name from the system.
	KrunfwBeside bool `json:"krunfw_beside,omitempty"`
	// TestDouble is true for krunbox's test double.
	TestDouble bool `json:"test_double"`
	// Features maps libkrun's build features to whether it has them;
	// empty when the library cannot say (before libkrun 1.18).
	Features map[string]bool `json:"features,omitempty"`
	// Missing lists the optional functions the library lacks.
	Missing []string `json:"missing,omitempty"`
	// Disks is true when the library can add virtio-blk disks (a BLK
	// build: [krun.DiskFunc]), which block roots need.
	Disks bool `json:"disks,omitempty"`
	// StaleShares, when not empty, says that the library cannot make
	// shares coherent and what that means ([StaleShares]).
	StaleShares string `json:"stale_shares,omitempty"`
	// Krunfw is the libkrunfw file and Version its version; KrunfwErr
	// says why it could not be loaded.
	Krunfw        string `json:"krunfw,omitempty"`
	KrunfwVersion int    `json:"krunfw_version,omitempty"`
	KrunfwErr     string `json:"krunfw_error,omitempty"`
	// KrunfwFileEvents says whether libkrunfw's kernel has the fsnotify
	// injection the guest agent fires host changes through
	// ([KrunfwHasFileEvents]); KrunfwFileEventsErr why that is unknown.
	KrunfwFileEvents    bool   `json:"krunfw_file_events,omitempty"`
	KrunfwFileEventsErr string `json:"krunfw_file_events_error,omitempty"`
	// ContextErr, when not empty, says what failed while creating,
	// configuring and freeing a representative context.
	ContextErr string `json:"context_error,omitempty"`
	// LoadErr, when not empty, says why the library could not be loaded.
	LoadErr string `json:"load_error,omitempty"`
	// NoCgo says the library could not be loaded because this krunbox was
	// built without cgo.
	NoCgo bool `json:"no_cgo,omitempty"`
}

// LoadHint says how to fix what LoadErr reports.
func (r *ProbeReport) LoadHint() string {
	if r.NoCgo {
		return "build krunbox with CGO_ENABLED=1 and a C compiler"
	}
	return (&krun.LoadError{}).Hint()
}

// probeMain loads libkrun (path, or the default search when "-"), runs it
// through a representative configuration and prints a ProbeReport.
func probeMain(path string) int {
	if path == "-" {
		path = ""
	}
	var r ProbeReport
	lib, err := krun.Open(path)
	if err != nil {
		r.LoadErr, r.NoCgo = err.Error(), errors.Is(err, krun.ErrNoCgo)
	} else {
		r.Library, r.TestDouble = lib.Path(), lib.IsTestDouble()
		r.LibraryWhy, r.KrunfwBeside = lib.Why(), lib.Krunfw() != ""
		for _, f := range krun.AllFeatures() {
			ok, err := lib.HasFeature(f)
			if err != nil {
				break
			}
			if r.Features == nil {
				r.Features = map[string]bool{}
			}
			r.Features[f.String()] = ok
		}
		for _, fn := range optionalFuncs {
			if !lib.Has(fn) {
				r.Missing = append(r.Missing, fn)
			}
		}
		r.Disks = lib.HasDisks()
		r.StaleShares = StaleShares(lib)
		if err := probeContext(lib); err != nil {
			r.ContextErr = err.Error()
		}
	}
	if f, v, err := krun.KrunfwVersion(); err != nil {
		r.KrunfwErr = err.Error()
	} else {
		r.Krunfw, r.KrunfwVersion = f, v
		if r.KrunfwFileEvents, err = KrunfwHasFileEvents(f); err != nil {
			r.KrunfwFileEventsErr = err.Error()
		}
	}
	json.NewEncoder(os.Stdout).Encode(&r)
	return 0
}

// optionalFuncs are the functions krunbox uses that older libkrun lacks.
var optionalFuncs = []string{
	"krun_add_vsock_port2", "krun_init_log", "krun_has_feature", "krun_disable_implicit_vsock",
	"krun_add_vsock", "krun_add_virtiofs3", "krun_fs_add_overlay_file", "krun_fs_add_overlay_dir",
}

// probeContext creates a context, configures it like a sandbox and frees it.
func probeContext(lib *krun.Library) error {
	tmp, err := os.MkdirTemp("", "krunbox-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	spec := &Spec{
		VCPUs: 2, MemoryMiB: 512,
		Root:       Root{Dir: tmp},
		Shares:     []Share{{Tag: "krunbox-probe", HostPath: tmp, ReadOnly: true}},
		Exec:       Exec{Path: "/.krunbox/krunbox-agent", Env: []string{"PATH=/usr/bin:/bin"}},
		Workdir:    "/",
		Rlimits:    []Rlimit{{Resource: "nofile", Cur: 4096, Max: 4096}},
		Vsock:      []VsockPort{{Port: 1024, HostPath: filepath.Join(tmp, "agent.sock"), Listen: true}},
		Network:    NetworkNone,
		ConsoleLog: filepath.Join(tmp, "console.log"),
		Files:      []File{{Path: "/.krunbox/agent.json", Mode: 0o644, Data: []byte("{}")}},
	}
	ctx, shares, _, err := configure(lib, spec)
	if err != nil {
		return err
	}
	defer closeAll(shares)
	return ctx.Free()
}

// Probe loads libkrun in a child process (path, or the default search when
// empty), so that a library that aborts cannot take the caller down, and
// reports what it found. Cancelling ctx kills the child.
func Probe(ctx context.Context, path string) (*ProbeReport, error) {
	if path == "" {
		path = "-"
	}
	cmd := selfCommand(roleProbe, path)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("probe libkrun: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { cmd.Process.Kill() })
	err := cmd.Wait()
	stop()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("probe libkrun: %w", ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("probe libkrun: %s", crashSummary(err, errOut.String()))
	}
	var r ProbeReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return nil, fmt.Errorf("probe libkrun: %w", err)
	}
	return &r, nil
}

// crashSummary describes how a child process that loaded libkrun failed:
// its own message, without the Go runtime's goroutine dump.
func crashSummary(err error, stderr string) string {
	msg := stderr
	if i := strings.Index(msg, "\ngoroutine "); i >= 0 {
		msg = msg[:i]
	}
	msg = strings.TrimSpace(msg)
	if i := strings.Index(msg, "SIGABRT: abort"); i >= 0 {
		// The Go runtime reports a C abort() as a crash, exit status 2.
		before := strings.TrimSpace(msg[:i])
		msg = "the library aborted the process (SIGABRT)"
		if before != "" {
			msg += ": " + before
		}
	}
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	if msg == "" {
		return fmt.Sprintf("%v, saying nothing", err)
	}
	return fmt.Sprintf("%v: %s", err, strings.ReplaceAll(msg, "\n", "; "))
}
