package hostapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/gofrs/flock"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/internal/agentbin"
	"github.com/krunbox/krunbox/hostapi/internal/fileevents"
	"github.com/krunbox/krunbox/hostapi/internal/isolate"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/krun"
	"github.com/krunbox/krunbox/oci"
)

// Files of a sandbox directory, beside those of its VM (package vmm).
const (
	recordFile  = "sandbox.json" // the record, written once at create
	lockFile    = "lock"         // serialises start, stop and remove
	socketFile  = "agent.sock"   // the guest agent, through libkrun's vsock
	consoleFile = "console.log"  // the VM's console
	stopFile    = "stopped"      // present when the last stop was asked for
)

// recordVersion is the version of sandbox.json this code writes. Version
// 2 added Root; a version 1 record has an overlay root.
const recordVersion = 2

// record is what a sandbox is made of, stored in sandbox.json.
type record struct {
	Version int       `json:"version"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Config is the configuration as given, with defaults applied.
	Config Config `json:"config"`
	// Mounts are the resolved mounts: the workspace, the git directories
	// it needs, then Config.Mounts.
	Mounts []Mount  `json:"mounts"`
	Image  imageRef `json:"image"`
	// Root is the root chosen at create, kept for the sandbox's life.
	Root RootInfo `json:"root,omitzero"`
	// Placeholders are what the guest sees of each of Config.Secrets, by
	// name, made at create. The values are never stored.
	Placeholders map[string]string `json:"placeholders,omitempty"`
	// Isolate is the isolated checkout, for Config.Isolate; its shares
	// are the first two Mounts.
	Isolate *isolate.Record `json:"isolate,omitempty"`
}

// imageRef is the image a sandbox was made from.
type imageRef struct {
	// Ref is the reference as given; Name its normalized form.
	Ref  string `json:"ref"`
	Name string `json:"name"`
	// Digest is the manifest digest: the sandbox keeps using this image
	// even if the tag moves.
	Digest   string      `json:"digest"`
	Platform string      `json:"platform"`
	Config   ImageConfig `json:"config"`
}

func writeRecord(dir string, rec *record) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, recordFile), append(b, '\n'), 0o600)
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", filepath.Join(dir, recordFile), err)
	}
	if rec.Version > recordVersion {
		return nil, fmt.Errorf("%s was written by a newer krunbox (version %d, this one reads %d)", filepath.Join(dir, recordFile), rec.Version, recordVersion)
	}
	return &rec, nil
}

// Sandbox is a named microVM made from an image, with its own writable
// root file system that persists across stops and starts.
type Sandbox struct {
	host *Host
	name string
	dir  string
	rec  *record
}

func (h *Host) open(name string, rec *record) *Sandbox {
	return &Sandbox{host: h, name: name, dir: h.sandboxDir(name), rec: rec}
}

// Name is the sandbox's name.
func (s *Sandbox) Name() string { return s.name }

// Dir is the sandbox's state directory.
func (s *Sandbox) Dir() string { return s.dir }

// Config is the sandbox's configuration, with defaults applied.
func (s *Sandbox) Config() Config { return s.rec.Config.withDefaults() }

// Mounts are the directories shared with the guest: the workspace, the git
// directories it needs, then the configured mounts; all resolved.
func (s *Sandbox) Mounts() []Mount { return slices.Clone(s.rec.Mounts) }

// Created is when the sandbox was created.
func (s *Sandbox) Created() time.Time { return s.rec.Created }

// ImageInfo describes the image a sandbox was made from.
type ImageInfo struct {
	// Ref is the reference as given; Name its normalized form.
	Ref  string `json:"ref"`
	Name string `json:"name"`
	// Digest is the image manifest's digest.
	Digest   string      `json:"digest"`
	Platform string      `json:"platform"`
	Config   ImageConfig `json:"config"`
}

// Image describes the sandbox's image.
func (s *Sandbox) Image() ImageInfo { return ImageInfo(s.rec.Image) }

func (s *Sandbox) path(name string) string { return filepath.Join(s.dir, name) }

// SocketPath is the unix socket of the sandbox's guest agent.
func (s *Sandbox) SocketPath() string { return s.path(socketFile) }

// ConsolePath is the file receiving the VM's console.
func (s *Sandbox) ConsolePath() string { return s.path(consoleFile) }

// Client returns a client of the sandbox's guest agent, for exec and file
// operations. The caller closes it. A call made while the sandbox's VM
// does not run fails with an error matching ErrNotRunning: a
// *NotRunningError for a sandbox never started or stopped, a *DeadError
// for one whose VM ended on its own (as CheckReady says), and, for a
// sandbox removed meanwhile, one matching ErrNotFound too. A call whose VM
// stops while it runs fails with ErrConnectionLost.
func (s *Sandbox) Client(opts ...ClientOption) *Client {
	dial := UnixDialer(s.SocketPath())
	return NewClient(func(ctx context.Context) (net.Conn, error) {
		nc, err := dial(ctx)
		if err != nil {
			if nr := s.notRunning(); nr != nil {
				return nil, nr
			}
		}
		return nc, err
	}, opts...)
}

// notRunning says why the sandbox's agent cannot be reached when its VM
// does not run: a *NotRunningError, a *DeadError, or, for a sandbox
// removed, an error matching both ErrNotFound and ErrNotRunning. It
// returns nil while the VM runs (or its state cannot be read).
func (s *Sandbox) notRunning() error {
	if _, err := os.Lstat(s.path(recordFile)); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox %s: %w (%w)", s.name, ErrNotFound, ErrNotRunning)
	}
	vm := vmm.Open(s.dir)
	st, err := vm.State()
	if err != nil {
		return nil
	}
	switch st {
	case vmm.StateNone:
		return &NotRunningError{Name: s.name, State: StateCreated}
	case vmm.StateStopped:
		if s.stoppedCleanly(vm) {
			return &NotRunningError{Name: s.name, State: StateStopped}
		}
		return s.deathError(vm)
	}
	return nil
}

// stoppedCleanly reports whether a stopped VM was asked to stop, or ended
// with status 0 (idle), rather than dying.
func (s *Sandbox) stoppedCleanly(vm *vmm.VM) bool {
	if _, err := os.Stat(s.path(stopFile)); err == nil {
		return true
	}
	es, _ := vm.ExitStatus()
	return es != nil && es.Code == 0 && es.Signal == ""
}

// lock takes the sandbox's lifecycle lock, waiting until ctx is done.
func (s *Sandbox) lock(ctx context.Context) (func(), error) {
	l := flock.New(s.path(lockFile))
	ok, err := l.TryLockContext(ctx, 10*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: lock: %w", s.name, err)
	}
	if !ok {
		return nil, fmt.Errorf("sandbox %s: lock: %w", s.name, ctx.Err())
	}
	return func() { l.Unlock() }, nil
}

// Start boots the sandbox's VM, if it does not run yet, and waits until its
// guest agent answers. Concurrent starts of one sandbox, from any process,
// start one VM. Every start checks the shares again as Create did (the
// guest may have changed them since): one that no longer passes, or has a
// symlink on its way now, refuses the start with an error wrapping
// ErrInvalidMount, and the sandbox stays as it was. A start that fails
// says why: what this host lacks to run VMs at all (a *PreflightError:
// no KVM, no libkrun), or the runner's exit status and log (with libkrun's
// warnings and errors), the console's last lines, the mounts the guest
// could not make. A VM whose agent does not answer within the start
// timeout is stopped: a *NotReadyError with Stopped set.
func (s *Sandbox) Start(ctx context.Context, opts ...StartOption) error {
	var o startOptions
	for _, fn := range opts {
		fn(&o)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Stat(s.path(recordFile)); err != nil {
		return fmt.Errorf("start %s: %w", s.name, ErrNotFound)
	}
	vm := vmm.Open(s.dir)
	st, err := vm.State()
	if err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	// What the guest may have changed in git's hooks and config, where
	// they could not be made read-only, is reviewed before anything goes
	// on.
	if err := s.CheckGit(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	if st == vmm.StateRunning {
		// Started by another process: running is enough; answering too.
		_, err := s.waitReady(ctx, vm)
		return err
	}
	// Before anything is made or changed: a refused start leaves the
	// sandbox as it was (created, stopped or dead).
	if err := s.checkMounts(); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	spec, err := s.vmSpec(ctx, o)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	if err := s.protectGit(spec); err != nil {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	if err := os.Remove(s.path(stopFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	if _, err := vmm.Start(ctx, s.dir, spec); err != nil {
		return fmt.Errorf("start %s: %w", s.name, s.diagnose(ctx, sdkError(err)))
	}
	info, err := s.waitReady(ctx, vm)
	if err == nil {
		err = mountErrors(info)
	}
	if err == nil {
		s.warnStaleShares(vm)
	}
	if err != nil {
		// Do not leave a VM behind that the caller was told did not start.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, serr := vm.Stop(sctx, time.Second)
		if nr := (*NotReadyError)(nil); errors.As(err, &nr) && (serr == nil || errors.Is(serr, vmm.ErrNotRunning)) {
			nr.Stopped = true
		}
		var de *DeadError
		if errors.As(err, &de) {
			err = s.diagnose(ctx, err)
		}
		return fmt.Errorf("start %s: %w", s.name, err)
	}
	return nil
}

// warnStaleShares warns, once per Host, when the VM's libkrun could not
// make the sandbox's shares coherent (see LibkrunInfo.StaleShares).
func (s *Sandbox) warnStaleShares(vm *vmm.VM) {
	if !slices.ContainsFunc(s.rec.Mounts, func(m Mount) bool { return !m.Cached }) {
		return
	}
	ri, err := vm.Runner()
	if err != nil || ri.Libkrun == nil || ri.Libkrun.StaleShares == "" {
		return
	}
	s.host.staleSharesOnce.Do(func() {
		s.host.log.Warn("the workspace may be stale in the guest: "+ri.Libkrun.StaleShares, "sandbox", s.name)
	})
}

// StartOption configures Start.
type StartOption func(*startOptions)

type startOptions struct {
	mainWait time.Duration
}

// ForMainCommand says the VM is started to run a main command (Cmd.Main)
// that the caller sends once Start returns, as krunbox run does: if none
// has started within wait of the VM being ready, the caller is gone
// (killed in between) and the VM stops rather than run on with nothing to
// do. A VM that was running already is left as it is.
func ForMainCommand(wait time.Duration) StartOption {
	return func(o *startOptions) { o.mainWait = wait }
}

// diagnose explains a VM that could not boot: by what this host lacks
// (Host.Preflight's error, with its fix) when something is missing, else
// by err. Checking only after a failure keeps the probe, a process start,
// off the path of every start.
func (s *Sandbox) diagnose(ctx context.Context, err error) error {
	if perr := s.host.Preflight(ctx); perr != nil {
		return &hostError{lacks: perr, boot: err}
	}
	return err
}

// hostError is a VM that could not boot on a host that lacks what VMs
// need. It reads as the lack, with its fix (Hint), and wraps both that
// error (a *PreflightError) and the boot's (a *RunnerError or a
// *DeadError), for errors.As.
type hostError struct {
	lacks, boot error
}

func (e *hostError) Error() string   { return e.lacks.Error() }
func (e *hostError) Unwrap() []error { return []error{e.lacks, e.boot} }

// Hint says how to fix what the host lacks.
func (e *hostError) Hint() string {
	var h interface{ Hint() string }
	if errors.As(e.lacks, &h) {
		return h.Hint()
	}
	return ""
}

// mountErrors reports the mounts the guest agent could not make.
func mountErrors(info *AgentInfo) error {
	var errs []error
	for _, m := range info.Mounts {
		if m.Error != "" {
			errs = append(errs, fmt.Errorf("the guest could not mount %s: %s", m.Path, m.Error))
		}
	}
	return errors.Join(errs...)
}

// waitReady waits until the guest agent answers, the VM stops, or the
// start timeout passes.
func (s *Sandbox) waitReady(ctx context.Context, vm *vmm.VM) (*AgentInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, s.host.startTimeout)
	defer cancel()
	c := s.Client()
	defer c.Close()
	info, err := awaitAgent(ctx, c, vm)
	switch {
	case errors.Is(err, errVMEnded):
		return nil, s.deathError(vm)
	case err != nil:
		return nil, &NotReadyError{Name: s.name, Err: fmt.Errorf("the guest agent did not answer within %v: %w", s.host.startTimeout, err),
			Console: s.consoleTail(), Log: tail(s.RunnerLogPath(), 1024)}
	}
	return info, nil
}

// errVMEnded is returned by awaitAgent when the VM stopped first.
var errVMEnded = errors.New("the VM ended before its guest agent answered")

// awaitAgent waits until the guest agent behind c answers, returning its
// hello; errVMEnded when vm stops first; or, when ctx ends first, the last
// error of the agent's connection.
func awaitAgent(ctx context.Context, c *Client, vm *vmm.VM) (*AgentInfo, error) {
	start, delay := time.Now(), time.Millisecond
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		info, err := c.Info(actx)
		acancel()
		if err == nil {
			return info, nil
		}
		if st, serr := vm.State(); serr == nil && st != vmm.StateRunning {
			return nil, errVMEnded
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = nextReadyPoll(delay, time.Since(start))
	}
}

// NotReadyError reports a VM that runs but whose agent does not answer,
// or, when Stopped, a start whose VM did not reach the agent in time and
// was stopped.
type NotReadyError struct {
	Name string
	Err  error
	// Log and Console are the last lines of the runner's log (its own and
	// libkrun's warnings and errors) and of the VM's console.
	Log, Console string
	// Stopped says that Start stopped the VM, which did not answer within
	// the start timeout.
	Stopped bool
}

func (e *NotReadyError) Error() string {
	msg := fmt.Sprintf("sandbox %s is not answering: %v", e.Name, e.Err)
	if e.Stopped {
		msg = fmt.Sprintf("sandbox %s did not start, so its VM was stopped: %v", e.Name, e.Err)
	}
	if e.Log != "" {
		msg += "; log: " + e.Log
	}
	if e.Console != "" {
		msg += "; console: " + e.Console
	} else if e.Stopped {
		msg += "; the console is empty"
	}
	return msg
}

func (e *NotReadyError) Unwrap() error { return e.Err }

// Hint says what to do.
func (e *NotReadyError) Hint() string {
	if e.Stopped {
		return fmt.Sprintf("see 'krunbox logs %s' and 'krunbox doctor'; 'krunbox start %s' tries again", e.Name, e.Name)
	}
	return fmt.Sprintf("see 'krunbox logs %s'; 'krunbox stop %s' and start it again", e.Name, e.Name)
}

// DeadError reports a VM that stopped when it should run.
type DeadError struct {
	Name string
	// Exit is how the VM ended, when known.
	Exit *ExitStatus
	// Log and Console are the last lines of the runner's log and of the
	// VM's console.
	Log, Console string
}

func (e *DeadError) Error() string {
	msg := fmt.Sprintf("sandbox %s stopped", e.Name)
	if e.Exit != nil {
		msg += " (" + e.Exit.String() + ")"
	}
	if e.Log != "" {
		msg += ": " + e.Log
	}
	if e.Console != "" {
		msg += "; console: " + e.Console
	}
	return msg
}

// Unwrap returns ErrNotRunning.
func (e *DeadError) Unwrap() error { return ErrNotRunning }

// Hint says what to do.
func (e *DeadError) Hint() string {
	return fmt.Sprintf("see 'krunbox logs %s' and 'krunbox doctor'; 'krunbox start %s' boots it again, with what its root file system holds", e.Name, e.Name)
}

// ErrNotRunning is wrapped by the errors reporting a sandbox whose VM does
// not run: *NotRunningError and *DeadError.
var ErrNotRunning = errors.New("sandbox is not running")

// NotRunningError reports a sandbox that was never started or was stopped.
type NotRunningError struct {
	Name string
	// State is StateCreated or StateStopped.
	State State
}

func (e *NotRunningError) Error() string {
	if e.State == StateCreated {
		return fmt.Sprintf("sandbox %s is not running: it was never started", e.Name)
	}
	return fmt.Sprintf("sandbox %s is not running: it was stopped", e.Name)
}

// Unwrap returns ErrNotRunning.
func (e *NotRunningError) Unwrap() error { return ErrNotRunning }

// Hint says what to do.
func (e *NotRunningError) Hint() string {
	return fmt.Sprintf("start it with 'krunbox start %s'", e.Name)
}

// CheckReady returns nil when the sandbox's guest agent answers, and
// otherwise says why not: a *NotRunningError for a sandbox never started or
// stopped, a *DeadError (with how its VM ended and the console's last
// lines) for one whose VM ended on its own or was killed, a *NotReadyError
// for one whose VM runs but whose agent does not answer. Use it to explain
// a failed call of the sandbox's Client.
func (s *Sandbox) CheckReady(ctx context.Context) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	switch st.State {
	case StateRunning:
		return nil
	case StateCreated, StateStopped:
		return &NotRunningError{Name: s.name, State: st.State}
	case StateDead:
		return s.deathError(vmm.Open(s.dir))
	}
	return &NotReadyError{Name: s.name, Err: errors.New(st.Reason), Console: s.consoleTail()}
}

func (s *Sandbox) deathError(vm *vmm.VM) error {
	es, _ := vm.ExitStatus()
	return &DeadError{Name: s.name, Exit: (*ExitStatus)(es), Log: tail(s.RunnerLogPath(), 1024), Console: s.consoleTail()}
}

func (s *Sandbox) consoleTail() string { return tail(s.ConsolePath(), 1024) }

// vmSpec builds the VM spec: the sandbox's root (the image tree under its
// writable layer, or its copy of the image), the guest agent and its
// configuration, the shares.
func (s *Sandbox) vmSpec(ctx context.Context, o startOptions) (*vmm.Spec, error) {
	root, err := s.root(ctx)
	if err != nil {
		return nil, err
	}
	arch := runtime.GOARCH
	agent, err := s.host.agentFile(arch)
	if err != nil {
		return nil, err
	}
	cfg := s.Config()
	ac := protocol.Config{
		Port:        protocol.DefaultPort,
		Hostname:    s.name,
		Env:         protocol.MergeEnv(s.rec.Image.Config.Env, cfg.Env),
		User:        cmpOr(cfg.User, s.rec.Image.Config.User),
		Workdir:     s.workdir(),
		IdleTimeout: cfg.IdleTimeout,
		MainWait:    o.mainWait,
	}
	spec := &vmm.Spec{
		VCPUs:     uint8(cfg.CPUs),
		MemoryMiB: uint32(cfg.MemoryMiB),
		Root:      root,
		Exec: vmm.Exec{
			Path: protocol.AgentPath,
			Args: []string{"--config", protocol.ConfigPath},
		},
		Workdir:    "/",
		Rlimits:    []vmm.Rlimit{{Resource: "nofile", Cur: 65536, Max: 1 << 20}},
		Vsock:      []vmm.VsockPort{{Port: protocol.DefaultPort, HostPath: s.SocketPath(), Listen: true}},
		Network:    vmm.Network(cfg.Network),
		NetLimits:  cfg.Limits.netstack(),
		LogMax:     cfg.Limits.LogSize,
		ConsoleLog: s.ConsolePath(),
		LogLevel:   krun.LogWarn,
		Library:    s.host.libkrun,
	}
	for _, p := range cfg.Ports {
		spec.PortMap = append(spec.PortMap, vmm.PortMapping(p))
	}
	if np, err := vmm.Network(cfg.Network).Policy(); err != nil {
		return nil, err
	} else if np.UsesStack() {
		ac.Net = guestNet()
	}
	if root.IsBlock() {
		ac.RootDisk = &protocol.RootDisk{ID: vmm.DiskID, FSType: protocol.RootDiskFSType}
	}
	for i, m := range s.rec.Mounts {
		tag := mountTag(i)
		spec.Shares = append(spec.Shares, vmm.Share{Tag: tag, HostPath: m.HostPath, ReadOnly: m.ReadOnly, Cached: m.Cached})
		ac.Mounts = append(ac.Mounts, protocol.Mount{Tag: tag, Path: m.GuestPath, ReadOnly: m.ReadOnly})
	}
	if len(s.rec.Mounts) > 0 {
		// The host's changes to the workspace and mounts wake the guest's
		// watchers where its kernel can take them (the runner asks the
		// agent first).
		spec.FileEvents = &vmm.FileEvents{Socket: s.SocketPath()}
		for _, m := range s.rec.Mounts {
			spec.FileEvents.Shares = append(spec.FileEvents.Shares, fileevents.Share{HostPath: m.HostPath, GuestPath: path.Clean(m.GuestPath)})
		}
	}
	if err := s.addSecrets(spec, &ac, cfg); err != nil {
		return nil, err
	}
	// The agent refuses a config it cannot use; say why here rather than
	// by a VM that stops (records made before Create checked the image's
	// config may hold what it refuses).
	if err := ac.Validate(); err != nil {
		return nil, fmt.Errorf("the guest agent cannot use this configuration (recreate the sandbox): %w", err)
	}
	acData, err := json.Marshal(&ac)
	if err != nil {
		return nil, err
	}
	spec.Files = append(spec.Files,
		vmm.File{Path: protocol.AgentPath, Mode: 0o755, Source: agent},
		vmm.File{Path: protocol.ConfigPath, Mode: 0o644, Data: acData},
	)
	return spec, nil
}

// workdir is the default working directory of the sandbox's commands.
func (s *Sandbox) workdir() string {
	cfg := s.rec.Config
	switch {
	case cfg.Workdir != "":
		return cfg.Workdir
	case cfg.Workspace != "":
		return cfg.Workspace
	case s.rec.Image.Config.WorkingDir != "":
		return s.rec.Image.Config.WorkingDir
	}
	return "/"
}

// imageTree returns the sandbox's image tree, finding it again by digest
// (offline), or pulling the image again if the cache lost it.
func (s *Sandbox) imageTree(ctx context.Context) (string, error) {
	store, err := s.host.images()
	if err != nil {
		return "", err
	}
	digest, err := v1.NewHash(s.rec.Image.Digest)
	if err != nil {
		return "", fmt.Errorf("image digest of %s: %w", s.name, err)
	}
	root, err := store.Rootfs(ctx, digest)
	if !errors.Is(err, oci.ErrNotFound) {
		return root, err
	}
	// Not before the host is known to run VMs: nothing is pulled for a VM
	// that cannot start.
	if err := s.host.Preflight(ctx); err != nil {
		return "", err
	}
	img, perr := s.host.pull(ctx, store, Config{Image: s.rec.Image.Ref, PullPolicy: PullIfMissing, Platform: s.rec.Image.Platform})
	if perr != nil {
		return "", fmt.Errorf("the image of %s is no longer cached, and pulling it again failed: %w", s.name, perr)
	}
	if img.Digest != digest {
		return "", fmt.Errorf("the image of %s (%s) is no longer cached, and %s now names another image (%s)", s.name, digest, s.rec.Image.Ref, img.Digest)
	}
	return img.Rootfs, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// agentFile returns a host file holding the guest agent for arch, written
// once into the cache by content.
func (h *Host) agentFile(arch string) (string, error) {
	bin, err := agentbin.Lookup(arch, h.dirs.Cache)
	if err != nil {
		return "", err
	}
	if bin.Path != "" {
		return bin.Path, nil
	}
	digest, err := bin.Digest()
	if err != nil {
		return "", fmt.Errorf("guest agent: %w", err)
	}
	dir := filepath.Join(h.dirs.Cache, "agent")
	path := filepath.Join(dir, digest)
	if fi, err := os.Stat(path); err == nil && fi.Size() == bin.Size {
		return path, nil
	}
	data, err := bin.Data()
	if err == nil {
		err = os.MkdirAll(dir, 0o700)
	}
	if err == nil {
		err = atomicfile.Write(path, data, 0o755)
	}
	if err != nil {
		return "", fmt.Errorf("guest agent: %w", err)
	}
	return path, nil
}

// Stop stops the sandbox's VM: it asks the guest agent to shut down (it
// ends the guest's processes and syncs), then, past the stop timeout,
// signals the runner (SIGTERM, then SIGKILL). Stopping a stopped sandbox
// does nothing. Once stopped, it returns a *GitChangedError when the guest
// changed git hooks or config it could write (see CheckGit).
func (s *Sandbox) Stop(ctx context.Context) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.stop(ctx); err != nil {
		return err
	}
	if err := s.CheckGit(); err != nil {
		return fmt.Errorf("stopped %s, but: %w", s.name, err)
	}
	if g, err := s.GitProtection(); err == nil && len(g.Appeared) > 0 {
		s.host.log.Warn("the guest made these git directories, with hooks and config of its choosing, protected from the next start on: review them before running git there", "sandbox", s.name, "paths", g.Appeared)
	}
	return nil
}

func (s *Sandbox) stop(ctx context.Context) error {
	vm := vmm.Open(s.dir)
	if st, err := vm.State(); err != nil || st != vmm.StateRunning {
		return err
	}
	if err := os.WriteFile(s.path(stopFile), nil, 0o600); err != nil {
		return fmt.Errorf("stop %s: %w", s.name, err)
	}
	timeout := s.host.stopTimeout
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := s.Client()
	defer c.Close()
	if err := c.Shutdown(gctx, timeout/2); err == nil {
		if _, err := vm.Wait(gctx); err == nil {
			return nil
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop %s: %w", s.name, ctx.Err())
	}
	// The guest did not shut down in time: end the VM itself.
	if _, err := vm.Stop(ctx, 5*time.Second); err != nil && !errors.Is(err, vmm.ErrNotRunning) {
		return fmt.Errorf("stop %s: %w", s.name, err)
	}
	return nil
}

// Remove stops the sandbox if it runs and deletes it: its writable layer,
// logs and state, and an isolated sandbox's checkout with whatever work
// it holds (see Unlanded). The image stays in the cache.
func (s *Sandbox) Remove(ctx context.Context) error {
	if _, err := os.Stat(s.dir); errors.Is(err, fs.ErrNotExist) {
		s.host.emptyTrash()
		return fmt.Errorf("remove %s: %w", s.name, ErrNotFound)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return s.remove(ctx)
}

// removeIfEnded removes an auto-remove sandbox whose VM has run and
// stopped, unless another process holds its lock (starting, stopping or
// removing it). It reports whether it removed it.
func (s *Sandbox) removeIfEnded(ctx context.Context) (bool, error) {
	if !s.rec.Config.AutoRemove {
		return false, nil
	}
	if st, err := vmm.Open(s.dir).State(); err != nil || st != vmm.StateStopped {
		return false, err
	}
	l := flock.New(s.path(lockFile))
	if ok, err := l.TryLock(); err != nil || !ok {
		return false, err
	}
	defer l.Unlock()
	// Checked again under the lock: it may have been started meanwhile.
	if st, err := vmm.Open(s.dir).State(); err != nil || st != vmm.StateStopped {
		return false, err
	}
	return true, s.remove(ctx)
}

// remove stops the sandbox and deletes it; its lock is held.
func (s *Sandbox) remove(ctx context.Context) error {
	if err := s.stop(ctx); err != nil {
		return err
	}
	trash := filepath.Join(s.host.dirs.State, "trash")
	if err := os.MkdirAll(trash, 0o700); err != nil {
		return fmt.Errorf("remove %s: %w", s.name, err)
	}
	// Renamed away first, so the name is free at once and a failure half
	// way leaves no half sandbox under it.
	gone, err := os.MkdirTemp(trash, s.name+"-")
	if err != nil {
		return fmt.Errorf("remove %s: %w", s.name, err)
	}
	if err := os.Rename(s.dir, filepath.Join(gone, "sandbox")); err != nil {
		os.Remove(gone)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", s.name, ErrNotFound)
		}
		return fmt.Errorf("remove %s: %w", s.name, err)
	}
	return s.host.emptyTrash()
}

// Remove removes the sandbox called name as Sandbox.Remove does, also when
// its record is damaged or missing: it completes what an interrupted
// create or removal left. It returns an error wrapping ErrNotFound when
// there is no such sandbox.
func (h *Host) Remove(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return h.open(name, nil).Remove(ctx)
}

// emptyTrash deletes removed sandboxes, including what an interrupted
// removal left.
func (h *Host) emptyTrash() error {
	trash := filepath.Join(h.dirs.State, "trash")
	entries, err := os.ReadDir(trash)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := removeTree(filepath.Join(trash, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Logs opens the VM's console log: kernel and init messages, and what the
// guest agent writes. It holds the latest output only, bounded (see
// vmm.Spec.LogMax): its previous file, then its current one.
func (s *Sandbox) Logs() (io.ReadCloser, error) {
	r, err := logfile.Open(s.ConsolePath())
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", s.name, err)
	}
	return r, nil
}

// Wait waits until the sandbox's VM stops and returns how it ended.
func (s *Sandbox) Wait(ctx context.Context) (*ExitStatus, error) {
	es, err := vmm.Open(s.dir).Wait(ctx)
	return (*ExitStatus)(es), err
}

// State is a sandbox's state.
type State string

// States of a sandbox.
const (
	// StateCreated: never started.
	StateCreated State = "created"
	// StateStarting: its VM runs and is being started (or stopped); the
	// guest agent does not answer.
	StateStarting State = "starting"
	// StateRunning: its VM runs and the guest agent answers.
	StateRunning State = "running"
	// StateUnresponsive: its VM runs but the guest agent does not answer.
	StateUnresponsive State = "unresponsive"
	// StateStopped: its VM stopped cleanly: asked to, or idle.
	StateStopped State = "stopped"
	// StateDead: its VM ended on its own, or its runner was killed.
	StateDead State = "dead"
)

// Status is what Status found.
type Status struct {
	State State `json:"state"`
	// Pid is the VM runner's pid, while it runs.
	Pid int `json:"pid,omitempty"`
	// Exit is how the VM last ended, when stopped or dead and known.
	Exit *ExitStatus `json:"exit,omitempty"`
	// Reason says why a sandbox is dead or unresponsive.
	Reason string `json:"reason,omitempty"`
	// Console is the end of the console log, for a dead sandbox.
	Console string `json:"console,omitempty"`
	// Agent is the guest agent's hello, when running.
	Agent *AgentInfo `json:"agent,omitempty"`
	// Libkrun is the libkrun the running VM loaded, and why that copy.
	Libkrun *LibkrunInfo `json:"libkrun,omitempty"`
}

// Status reports the sandbox's state. A running VM counts as running only
// when its guest agent answers a ping within the context's deadline (or 2
// seconds).
func (s *Sandbox) Status(ctx context.Context) (*Status, error) {
	vm := vmm.Open(s.dir)
	st, err := vm.State()
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", s.name, err)
	}
	switch st {
	case vmm.StateNone:
		return &Status{State: StateCreated}, nil
	case vmm.StateStopped:
		es, _ := vm.ExitStatus()
		out := &Status{State: StateStopped, Exit: (*ExitStatus)(es)}
		if s.stoppedCleanly(vm) {
			return out, nil
		}
		out.State = StateDead
		out.Reason = s.deathError(vm).Error()
		out.Console = s.consoleTail()
		return out, nil
	}
	out := &Status{State: StateRunning}
	if ri, err := vm.Runner(); err == nil {
		out.Pid, out.Libkrun = ri.Pid, (*LibkrunInfo)(ri.Libkrun)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
	}
	c := s.Client()
	defer c.Close()
	info, err := c.Info(ctx)
	if err == nil {
		out.Agent = info
		return out, nil
	}
	out.State, out.Reason = StateUnresponsive, err.Error()
	if l := flock.New(s.path(lockFile)); l != nil {
		if ok, _ := l.TryRLock(); ok {
			l.Unlock()
		} else {
			out.State = StateStarting
		}
	}
	return out, nil
}
