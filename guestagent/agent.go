//go:build linux

package guestagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/krunbox/krunbox/guestagent/netsetup"
	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/guestagent/vmdev"
	"golang.org/x/sys/unix"
)

// Options configure an Agent.
type Options struct {
	// Config is the boot configuration.
	Config *protocol.Config
	// Version is the agent's build version, reported in the hello.
	Version string
	// Started is CLOCK_BOOTTIME at the start of main (see BootTime).
	Started time.Duration
	// Setup sets the hostname and mounts the shares: true in a VM, false
	// for an agent serving a unix socket on a host unless the config asks.
	Setup bool
	// Sync syncs the file systems at shutdown: true in a VM, where the VM
	// stops right after; pointless (and slow) for a process on a host.
	Sync bool
	// Logger receives the agent's log; nil means slog.Default().
	Logger *slog.Logger
	// FileEvents is the guest kernel's fsnotify injection interface
	// (vmdev.FsnotifyInjectPath), through which host changes to the shares
	// reach the guest's watchers; empty means there is none.
	FileEvents string
	// Console receives the output of a main command whose connection
	// ended (see protocol.ExecRequest.Main): the VM's console in a VM; nil
	// discards it.
	Console io.Writer
}

// Agent serves the krunbox protocol: exec, files, health and shutdown.
type Agent struct {
	cfg      *protocol.Config
	sync     bool
	version  string
	log      *slog.Logger
	console  io.Writer
	reaper   *reaper
	boot     protocol.BootTimes
	mounts   []protocol.MountStatus
	warnings []string
	hostname string
	kernel   string
	trustEnv []string // the environment pointing at the CA bundle (setupTrust)
	events   *injector

	mu         sync.Mutex
	active     int       // requests that count as activity, in progress
	lastActive time.Time // when the last of them ended
	listeners  []net.Listener
	answers    []func() // of the hosts that asked for the shutdown
	conns      map[*conn]struct{}

	shutdownOnce sync.Once
	stopping     atomic.Bool   // set once shutting down
	mainStarted  atomic.Bool   // set once a main command has started (Config.MainWait)
	done         chan struct{} // closed once the agent has shut down
}

// BootTime returns CLOCK_BOOTTIME: the time since the guest kernel booted.
func BootTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// New prepares an agent: it makes the agent a child subreaper, and with
// Setup sets the hostname and mounts the configured shares. A failed mount
// does not fail New: it is logged and reported in the hello, so the host
// can tell the user why.
func New(opts Options) (*Agent, error) {
	cfg := opts.Config
	if cfg == nil {
		cfg = &protocol.Config{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	r, err := newReaper()
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:        cfg,
		sync:       opts.Sync,
		version:    opts.Version,
		log:        log,
		console:    cmp.Or[io.Writer](opts.Console, io.Discard),
		reaper:     r,
		lastActive: time.Now(),
		conns:      make(map[*conn]struct{}),
		done:       make(chan struct{}),
	}
	a.boot.AgentStart = opts.Started
	if opts.Setup && cfg.RootDisk != nil {
		// Before anything else: every later write to the root (mount
		// points, CA bundles, the guest's own) must reach the disk.
		if err := switchRoot(cfg.RootDisk); err != nil {
			return nil, err
		}
	}
	if opts.Setup {
		a.setup()
	}
	// Outside a VM (tests), the shares are the host's directories at the
	// mounts' paths.
	shares := mountPaths(a.mounts)
	if !opts.Setup {
		for _, m := range cfg.Mounts {
			shares = append(shares, filepath.Clean(m.Path))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-a.done; cancel() }()
	a.events = newInjector(ctx, opts.FileEvents, shares, log)
	if s := a.events.status; !s.Delivered || !s.Filtered {
		log.Info("file events: " + s.String())
	}
	a.hostname, _ = os.Hostname()
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		a.kernel = unix.ByteSliceToString(uts.Release[:])
	}
	return a, nil
}

// setup sets the hostname, the network interface, and mounts the shares.
func (a *Agent) setup() {
	if h := a.cfg.Hostname; h != "" {
		if err := unix.Sethostname([]byte(h)); err != nil {
			a.warn(fmt.Sprintf("set hostname %q: %v", h, err))
		}
	}
	if c := a.cfg.Net; c != nil {
		if err := netsetup.Configure(c); err != nil {
			a.warn(fmt.Sprintf("network: %v", err))
		}
	}
	for _, m := range a.cfg.Mounts {
		st := protocol.MountStatus{Mount: m}
		if err := os.MkdirAll(m.Path, 0o755); err != nil {
			st.Error = fmt.Sprintf("create mount point: %v", err)
		} else if err := vmdev.MountVirtiofs(m.Tag, m.Path, m.ReadOnly); err != nil {
			st.Error = err.Error()
		}
		if st.Error != "" {
			a.log.Error("mount failed", "tag", m.Tag, "path", m.Path, "err", st.Error)
		}
		a.mounts = append(a.mounts, st)
	}
	// A missing working directory is made, as docker makes its WORKDIR.
	if d := a.cfg.Workdir; d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			a.warn(fmt.Sprintf("create the working directory %s: %v", d, err))
		}
	}
	a.setupTrust()
}

func (a *Agent) warn(msg string) {
	a.log.Warn(msg)
	a.warnings = append(a.warnings, msg)
}

// Serve accepts connections on l until the agent shuts down, by request or
// for idleness; it then returns nil. Processes still running have been
// terminated and file systems synced by then.
func (a *Agent) Serve(l net.Listener) error {
	a.mu.Lock()
	a.listeners = append(a.listeners, l)
	if a.boot.Ready == 0 {
		a.boot.Ready = BootTime()
	}
	a.mu.Unlock()
	if a.cfg.IdleTimeout > 0 {
		go a.watchIdle(a.cfg.IdleTimeout)
	}
	if a.cfg.MainWait > 0 {
		go a.watchMain(a.cfg.MainWait)
	}
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-a.done:
				return nil
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			// Out of file descriptors, an aborted connection: the agent
			// must not die of it (that would stop the VM); wait and retry.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			a.log.Warn("accept failed, retrying", "err", err, "in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		c := newConn(a, nc)
		a.mu.Lock()
		a.conns[c] = struct{}{}
		a.mu.Unlock()
		go func() {
			c.serve()
			a.mu.Lock()
			delete(a.conns, c)
			a.mu.Unlock()
		}()
	}
}

// Done is closed once the agent has shut down.
func (a *Agent) Done() <-chan struct{} { return a.done }

// busy records the start (+1) or end (-1) of activity.
func (a *Agent) busy(delta int) {
	a.mu.Lock()
	a.active += delta
	a.lastActive = time.Now()
	a.mu.Unlock()
}

// watchIdle shuts the agent down after idle of no activity and no process.
func (a *Agent) watchIdle(idle time.Duration) {
	tick := min(idle/4, time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-a.done:
			return
		case <-t.C:
		}
		a.mu.Lock()
		quiet := a.active == 0 && time.Since(a.lastActive) >= idle
		a.mu.Unlock()
		if !quiet {
			continue
		}
		if len(children()) > 0 {
			a.busy(0) // processes run: not idle, start counting again
			continue
		}
		a.log.Info("idle, shutting down", "idle_timeout", idle)
		a.Shutdown(protocol.DefaultShutdownGrace)
		return
	}
}

// watchMain shuts the agent down unless a main command has started within
// wait (Config.MainWait): the host that started the VM to run one is gone.
func (a *Agent) watchMain(wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-a.done:
		return
	case <-t.C:
	}
	if a.mainStarted.Load() {
		return
	}
	fmt.Fprintf(a.console, "krunbox-agent: no main command started within %v of the VM being ready (the krunbox run that started it is gone): stopping the VM\n", wait)
	a.log.Info("no main command, shutting down", "main_wait", wait)
	a.Shutdown(protocol.DefaultShutdownGrace)
}

// Shutdown terminates every process the agent started and their
// descendants (SIGTERM to each process group, SIGKILL to what is left
// after grace), syncs the file systems (Options.Sync), and stops Serve. It returns once
// all of that is done; calling it again waits for the first call.
func (a *Agent) Shutdown(grace time.Duration) { a.shutdown(grace, nil) }

// shutdown is Shutdown; answer, when not nil, runs after the sync and
// before Serve returns, to answer the host that asked, also when another
// shutdown (a main command's end, idleness) was under way.
func (a *Agent) shutdown(grace time.Duration, answer func()) {
	if answer != nil {
		a.mu.Lock()
		a.answers = append(a.answers, answer)
		a.mu.Unlock()
	}
	a.shutdownOnce.Do(func() {
		a.stopping.Store(true)
		a.terminate(grace)
		if a.sync {
			unix.Sync()
		}
		a.mu.Lock()
		answers := a.answers
		a.answers = nil
		a.mu.Unlock()
		for _, answer := range answers {
			answer()
		}
		a.mu.Lock()
		close(a.done)
		for _, l := range a.listeners {
			l.Close()
		}
		a.mu.Unlock()
	})
	<-a.done
}

// CloseConns closes every connection (after Shutdown has answered).
func (a *Agent) CloseConns() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for c := range a.conns {
		c.nc.Close()
	}
}

// terminate signals every child's process group, then waits for them.
func (a *Agent) terminate(grace time.Duration) {
	signalAll := func(sig syscall.Signal) int {
		kids := children()
		self := syscall.Getpgrp()
		for _, k := range kids {
			if k.pgid != self && k.pgid > 1 {
				syscall.Kill(-k.pgid, sig)
			} else {
				syscall.Kill(k.pid, sig)
			}
		}
		return len(kids)
	}
	if signalAll(syscall.SIGTERM) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if waitFor(ctx, func() bool { return len(children()) == 0 }) {
		return
	}
	signalAll(syscall.SIGKILL)
	ctx, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	waitFor(ctx, func() bool { return len(children()) == 0 })
}

// waitFor polls cond until it holds (true) or ctx ends (false).
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

func (a *Agent) helloReply(hello *protocol.Hello) protocol.HelloReply {
	r := protocol.HelloReply{
		MinVersion:   protocol.MinVersion,
		MaxVersion:   protocol.Version,
		AgentVersion: a.version,
		Window:       protocol.DefaultWindow,
		Mounts:       a.mounts,
		Warnings:     a.warnings,
		Hostname:     a.hostname,
		Arch:         runtime.GOARCH,
		Kernel:       a.kernel,
		FileEvents:   &a.events.status,
	}
	a.mu.Lock()
	r.Boot = a.boot
	a.mu.Unlock()
	if v := min(hello.MaxVersion, protocol.Version); v >= max(hello.MinVersion, protocol.MinVersion) {
		r.Version = v
	}
	return r
}
