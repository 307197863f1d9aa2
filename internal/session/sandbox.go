package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	refname "github.com/google/go-containerregistry/pkg/name"

	"github.com/krunbox/krunbox/hostapi"
	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/krun"
	"github.com/krunbox/krunbox/oci"
)

// A session's sandboxes (docs/serve-protocol.md §4).

// CheckName checks a sandbox name as the protocol accepts it: 1 to 63
// lowercase letters, digits or '-', starting with a letter or digit. A loop
// rather than a regexp, which every krunbox command would compile at init.
func CheckName(field, name string) error {
	ok := len(name) >= 1 && len(name) <= 63
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && c == '-'
	}
	if !ok {
		return InvalidParams("%s %q: want 1 to 63 lowercase letters, digits or '-', starting with a letter or digit", field, name)
	}
	return nil
}

// DefaultStartTimeout is how long Ensure and Restart wait for the agent by
// default.
const DefaultStartTimeout = 120 * time.Second

// Status is the protocol's SandboxStatus.
type Status struct {
	Name          string    `json:"name"`
	State         string    `json:"state"`
	Image         string    `json:"image,omitempty"`
	ImageDigest   string    `json:"imageDigest,omitempty"`
	Workspace     string    `json:"workspace,omitempty"`
	Hostname      string    `json:"hostname,omitempty"`
	BootMs        *int64    `json:"bootMs,omitempty"`
	Created       *bool     `json:"created,omitempty"`
	ConfigChanged *[]string `json:"configChanged,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	Hint          string    `json:"hint,omitempty"`
}

// The states of a Status.
const (
	StateAbsent       = "absent"
	StateStopped      = "stopped"
	StateStarting     = "starting"
	StateReady        = "ready"
	StateUnresponsive = "unresponsive"
	StateDead         = "dead"
	StateFailed       = "failed"
)

// startFailure is why the last start of a sandbox failed.
type startFailure struct{ reason, hint string }

// MountParams is a host directory mounted in the guest (Guest: the host
// path when empty).
type MountParams struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	ReadOnly bool   `json:"readOnly"`
}

// SecretParams is a secret: the guest variable Name, the host Source of its
// value (env:VAR or file:/ABSOLUTE/PATH) and the Hosts it may be sent to.
type SecretParams struct {
	Name   string   `json:"name"`
	Source string   `json:"source"`
	Hosts  []string `json:"hosts"`
}

// ConfigParams is a sandbox's configuration as a client gives it.
type ConfigParams struct {
	Image string `json:"image"`
	// ImageTrusted says the image comes from the user (their own
	// configuration, environment or flags), not from a project's file:
	// only then may it be a local source.
	ImageTrusted   bool              `json:"imageTrusted"`
	Pull           string            `json:"pull"`
	CPUs           *int              `json:"cpus"`
	MemoryMiB      *int              `json:"memoryMiB"`
	Network        string            `json:"network"`
	Mounts         []MountParams     `json:"mounts"`
	Env            map[string]string `json:"env"`
	IdleTimeoutSec *int64            `json:"idleTimeoutSec"`
	Labels         map[string]string `json:"labels"`
	Secrets        []SecretParams    `json:"secrets"`
	// Isolate gives the sandbox its own checkout of the workspace's
	// HEAD (hostapi.Config.Isolate).
	Isolate bool `json:"isolate"`
}

// EnsureParams are the params of Ensure and Restart.
type EnsureParams struct {
	Name           string        `json:"name"`
	Workspace      string        `json:"workspace"`
	Config         *ConfigParams `json:"config"`
	StartTimeoutMs *int64        `json:"startTimeoutMs"`
	Recreate       bool          `json:"recreate"`
}

// EnsureRequest is a checked Ensure or Restart.
type EnsureRequest struct {
	// Config is the sandbox's configuration.
	Config hostapi.Config
	// StartTimeout bounds the wait for the agent.
	StartTimeout time.Duration
	// Recreate (Restart only) removes the sandbox and creates it again.
	Recreate bool
}

// ParseEnsure checks the params of Ensure and Restart and turns them into
// a sandbox configuration.
func ParseEnsure(p *EnsureParams) (*EnsureRequest, error) {
	if err := CheckName("name", p.Name); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(p.Workspace) {
		return nil, InvalidParams("workspace %q: want an absolute host path", p.Workspace)
	}
	if p.Config == nil {
		return nil, InvalidParams("config: required")
	}
	req := &EnsureRequest{StartTimeout: DefaultStartTimeout, Recreate: p.Recreate}
	if p.StartTimeoutMs != nil {
		if *p.StartTimeoutMs <= 0 {
			return nil, InvalidParams("startTimeoutMs %d: want more than 0", *p.StartTimeoutMs)
		}
		req.StartTimeout = time.Duration(*p.StartTimeoutMs) * time.Millisecond
	}
	c := p.Config
	invalid := func(format string, a ...any) error { return NewError(CodeInvalidConfig, nil, format, a...) }
	cfg := hostapi.Config{
		Name:      p.Name,
		Image:     c.Image,
		Workspace: filepath.Clean(p.Workspace),
		CPUs:      hostapi.DefaultCPUs,
		MemoryMiB: hostapi.DefaultMemoryMiB,
		Network:   hostapi.Network(c.Network),
		Labels:    c.Labels,
		Isolate:   c.Isolate,
	}
	if cfg.Image == "" {
		return nil, invalid("config.image: required")
	}
	if err := checkLocalImage(c.Image, c.ImageTrusted); err != nil {
		return nil, invalid("config.image: %v", err)
	}
	switch c.Pull {
	case "", "missing":
		cfg.PullPolicy = hostapi.PullIfMissing
	case "always":
		cfg.PullPolicy = hostapi.PullAlways
	case "never":
		cfg.PullPolicy = hostapi.PullNever
	default:
		return nil, invalid("config.pull %q: want missing, always or never", c.Pull)
	}
	if c.CPUs != nil {
		if *c.CPUs < 1 {
			return nil, invalid("config.cpus %d: want 1 or more", *c.CPUs)
		}
		cfg.CPUs = *c.CPUs
	}
	if c.MemoryMiB != nil {
		if *c.MemoryMiB < 128 {
			return nil, invalid("config.memoryMiB %d: want 128 or more", *c.MemoryMiB)
		}
		cfg.MemoryMiB = *c.MemoryMiB
	}
	if cfg.Network == "" {
		cfg.Network = hostapi.NetworkPublic
	}
	if c.IdleTimeoutSec != nil {
		if *c.IdleTimeoutSec < 0 {
			return nil, invalid("config.idleTimeoutSec %d: want 0 or more", *c.IdleTimeoutSec)
		}
		cfg.IdleTimeout = time.Duration(*c.IdleTimeoutSec) * time.Second
	}
	for _, m := range c.Mounts {
		if !filepath.IsAbs(m.Host) {
			return nil, invalid("config.mounts: host %q: want an absolute path", m.Host)
		}
		guest := m.Guest
		if guest == "" {
			guest = m.Host
		}
		if !filepath.IsAbs(guest) {
			return nil, invalid("config.mounts: guest %q: want an absolute path", guest)
		}
		cfg.Mounts = append(cfg.Mounts, hostapi.Mount{HostPath: filepath.Clean(m.Host), GuestPath: filepath.Clean(guest), ReadOnly: m.ReadOnly})
	}
	env, err := EnvList(c.Env)
	if err != nil {
		return nil, invalid("config.env: %v", err)
	}
	cfg.Env = env
	for _, sp := range c.Secrets {
		cfg.Secrets = append(cfg.Secrets, hostapi.Secret{Name: sp.Name, Source: sp.Source, Hosts: sp.Hosts})
	}
	if err := cfg.Validate(); err != nil {
		return nil, invalid("invalid sandbox configuration: %v", err)
	}
	for _, sec := range cfg.Secrets {
		if err := sec.Check(); err != nil {
			return nil, invalid("config.secrets: %v", err)
		}
	}
	req.Config = cfg
	return req, nil
}

// checkLocalImage refuses a local image source (oci:, docker-archive:)
// that the client did not mark as the user's own choice: a repository's
// configuration file may name a registry image only, never a layout or
// tarball it ships, nor any other path on the host. It also refuses a
// local source with a relative path, which serve would resolve against its
// working directory, the workspace: the client makes it absolute.
func checkLocalImage(ref string, trusted bool) error {
	var rest string
	switch {
	case strings.HasPrefix(ref, oci.LayoutPrefix):
		rest = strings.TrimPrefix(ref, oci.LayoutPrefix)
	case strings.HasPrefix(ref, oci.ArchivePrefix):
		rest = strings.TrimPrefix(ref, oci.ArchivePrefix)
	default:
		return nil
	}
	if !trusted {
		return fmt.Errorf("%q is a local image source, which only the user's own configuration may name (imageTrusted); a project's configuration may name a registry image only", ref)
	}
	if p, _, _ := strings.Cut(rest, ":"); !filepath.IsAbs(p) {
		return fmt.Errorf("%q: a local image's path must be absolute (serve never resolves it against its working directory, the workspace)", ref)
	}
	return nil
}

// EnvList turns an environment object into sorted KEY=VALUE entries.
func EnvList(env map[string]string) ([]string, error) {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(env[k], 0) {
			return nil, fmt.Errorf("variable %q: want a name without '=' and a value, without NUL", k)
		}
		out = append(out, k+"="+env[k])
	}
	return out, nil
}

// reachKeys are the configuration keys that change what a sandbox can
// reach: an existing sandbox that differs in one is never reused as is.
var reachKeys = []string{"workspace", "isolate", "image", "network", "mounts", "secrets"}

// ConfigDiff returns the protocol keys in which two configurations differ.
func ConfigDiff(have, want hostapi.Config) []string {
	norm := func(ms []hostapi.Mount) []hostapi.Mount {
		out := make([]hostapi.Mount, 0, len(ms))
		for _, m := range ms {
			g := m.GuestPath
			if g == "" {
				g = m.HostPath
			}
			out = append(out, hostapi.Mount{HostPath: filepath.Clean(m.HostPath), GuestPath: filepath.Clean(g), ReadOnly: m.ReadOnly})
		}
		return out
	}
	var keys []string
	add := func(key string, differs bool) {
		if differs {
			keys = append(keys, key)
		}
	}
	add("workspace", filepath.Clean(have.Workspace) != filepath.Clean(want.Workspace))
	add("isolate", have.Isolate != want.Isolate)
	add("image", have.Image != want.Image)
	add("network", have.Network != want.Network)
	add("mounts", !slices.Equal(norm(have.Mounts), norm(want.Mounts)))
	add("cpus", have.CPUs != want.CPUs)
	add("memoryMiB", have.MemoryMiB != want.MemoryMiB)
	add("env", !slices.Equal(slices.Sorted(slices.Values(have.Env)), slices.Sorted(slices.Values(want.Env))))
	add("idleTimeoutSec", have.IdleTimeout != want.IdleTimeout)
	add("labels", !maps.Equal(have.Labels, want.Labels))
	add("secrets", !slices.Equal(secretKeys(have.Secrets), secretKeys(want.Secrets)))
	return keys
}

// secretKeys are comparable forms of secrets: a file source with its
// symlinks resolved, as create stores it.
func secretKeys(secs []hostapi.Secret) []string {
	out := make([]string, len(secs))
	for i, sec := range secs {
		if p, ok := strings.CutPrefix(sec.Source, "file:"); ok {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				sec.Source = "file:" + real
			}
		}
		out[i] = sec.String()
	}
	slices.Sort(out)
	return out
}

// Ensure makes sure the sandbox of req exists and runs, creating and
// starting it as needed, and returns its status, ready. An existing
// sandbox whose configuration differs in what it can reach (reachKeys) is
// a CodeConfigMismatch error; other differences are listed in
// ConfigChanged, not applied.
func (m *Manager) Ensure(ctx context.Context, req *EnsureRequest) (*Status, error) {
	name := req.Config.Name
	host, err := m.startHost(ctx, name, req.StartTimeout)
	if err != nil {
		return nil, err
	}
	created := false
	sb, err := host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		sb, created, err = m.create(ctx, host, req.Config)
	}
	if err != nil {
		return nil, m.startError(ctx, name, err)
	}
	changed := []string{}
	if !created {
		diff := ConfigDiff(sb.Config(), req.Config)
		var reach []string
		for _, k := range diff {
			if slices.Contains(reachKeys, k) {
				reach = append(reach, k)
			} else {
				changed = append(changed, k)
			}
		}
		if len(reach) > 0 {
			st := m.status(ctx, name)
			return nil, NewError(CodeConfigMismatch, map[string]any{
				"keys":   reach,
				"status": st,
				"hint":   "restart the sandbox with recreate to apply the new configuration (its changes outside the mounts are lost)",
			}, "sandbox %s exists with another %s", name, strings.Join(reach, ", "))
		}
	}
	st, err := m.start(ctx, sb)
	if err != nil {
		return nil, err
	}
	st.Created, st.ConfigChanged = &created, &changed
	return st, nil
}

// create creates the sandbox of cfg; a sandbox of that name created
// meanwhile (by another connection) is returned instead, with created
// false.
func (m *Manager) create(ctx context.Context, host *hostapi.Host, cfg hostapi.Config) (*hostapi.Sandbox, bool, error) {
	m.progress(cfg.Name, "create", "creating the sandbox from "+cfg.Image)
	sb, err := host.Create(ctx, cfg)
	if errors.Is(err, hostapi.ErrExists) {
		sb, err = host.Get(cfg.Name)
		return sb, false, err
	}
	if err != nil {
		// The configuration was checked: the image could not be had.
		return nil, false, &hintError{err: err, hint: fmt.Sprintf("check the image reference %s and that its source is reachable; 'krunbox pull %s' tries the pull alone", cfg.Image, cfg.Image)}
	}
	return sb, true, nil
}

// startHost returns a Host for starting one sandbox: the session's
// directories, the request's start timeout, and pull progress reported as
// Events.Progress.
func (m *Manager) startHost(_ context.Context, name string, timeout time.Duration) (*hostapi.Host, error) {
	var mu sync.Mutex
	var last time.Time
	progress := func(p hostapi.PullProgress) {
		phase, msg := "pull", fmt.Sprintf("pulling %s: layer %d of %d %s", p.Image, p.Index+1, p.Count, p.Label())
		switch p.State {
		case hostapi.LayerDownloading:
			if p.Size > 0 {
				msg += fmt.Sprintf(" %.1f of %.1f MB", float64(p.Done)/1e6, float64(p.Size)/1e6)
			}
		case hostapi.LayerExtracting, hostapi.LayerExtracted:
			phase = "unpack"
		}
		mu.Lock()
		defer mu.Unlock()
		if p.State == hostapi.LayerDownloading && time.Since(last) < 250*time.Millisecond {
			return
		}
		last = time.Now()
		m.progress(name, phase, msg)
	}
	h, err := hostapi.NewHost(hostapi.WithDirs(m.host.Dirs()), hostapi.WithStartTimeout(timeout),
		hostapi.WithPullProgress(progress), hostapi.WithLogger(m.log))
	if err != nil {
		return nil, fmt.Errorf("open the state directories: %w", err)
	}
	return h, nil
}

// start starts sb if it does not run and waits for its agent; it returns
// its status, ready, or a start-failed error.
func (m *Manager) start(ctx context.Context, sb *hostapi.Sandbox) (*Status, error) {
	name := sb.Name()
	var bootMs *int64
	if st, err := sb.Status(ctx); err != nil || st.State != hostapi.StateRunning {
		m.progress(name, "boot", "starting the VM")
		t0 := time.Now()
		if err := sb.Start(ctx); err != nil {
			return nil, m.startError(ctx, name, err)
		}
		ms := time.Since(t0).Milliseconds()
		bootMs = &ms
		m.log.Info("started", "sandbox", name, "ms", ms)
	}
	m.mu.Lock()
	delete(m.failures, name)
	m.mu.Unlock()
	st := m.status(ctx, name)
	if st.State != StateReady {
		return nil, NewError(CodeStartFailed, map[string]any{"status": st, "hint": st.Hint},
			"sandbox %s started but is %s: %s", name, st.State, st.Reason)
	}
	st.BootMs = bootMs
	m.watch(sb)
	return st, nil
}

// startError turns a failure to create or start a sandbox into the
// protocol's error, and remembers it for its status.
func (m *Manager) startError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var bad *refname.ErrBadName
	if errors.As(err, &bad) {
		return NewError(CodeInvalidConfig, nil, "config.image: %v", err)
	}
	hint := fmt.Sprintf("see /krunbox logs, or 'krunbox logs %s' and 'krunbox doctor'", name)
	var h interface{ Hint() string }
	if errors.As(err, &h) && h.Hint() != "" {
		hint = h.Hint()
	}
	var console string
	var dead *hostapi.DeadError
	var notReady *hostapi.NotReadyError
	switch {
	case errors.As(err, &dead):
		console = dead.Console
	case errors.As(err, &notReady):
		console = notReady.Console
	}
	var runner *hostapi.RunnerError
	if errors.As(err, &runner) {
		// The runner gave up before the VM booted: this machine lacks
		// something.
		hint = "'krunbox doctor' says what this machine lacks to run VMs (KVM, libkrun, libkrunfw)"
		if lib := os.Getenv(krun.LibraryEnv); lib != "" && strings.Contains(err.Error(), lib) {
			hint = fmt.Sprintf("%s=%s names the libkrun library krunbox loads: point it at libkrun.so.1, or unset it; %s", krun.LibraryEnv, lib, hint)
		}
	}
	m.mu.Lock()
	m.failures[name] = &startFailure{reason: OneLine(err.Error()), hint: hint}
	m.mu.Unlock()
	m.log.Warn("start failed", "sandbox", name, "err", err)
	return NewError(CodeStartFailed, map[string]any{"hint": hint, "status": m.status(ctx, name), "consoleTail": console}, "%v", err)
}

// status describes a sandbox as the protocol does.
func (m *Manager) status(ctx context.Context, name string) *Status {
	sb, err := m.host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &Status{Name: name, State: StateAbsent}
	}
	if err != nil {
		return &Status{Name: name, State: StateFailed, Reason: OneLine(err.Error()), Hint: "remove the sandbox and create it again"}
	}
	img := sb.Image()
	out := &Status{Name: name, Image: img.Ref, ImageDigest: img.Digest, Workspace: sb.Config().Workspace, Hostname: name}
	st, err := sb.Status(ctx)
	if err != nil {
		out.State, out.Reason = StateFailed, OneLine(err.Error())
		return out
	}
	switch st.State {
	case hostapi.StateRunning:
		out.State = StateReady
		if st.Agent != nil && st.Agent.Hostname != "" {
			out.Hostname = st.Agent.Hostname
		}
	case hostapi.StateStarting:
		out.State = StateStarting
	case hostapi.StateUnresponsive:
		out.State, out.Reason = StateUnresponsive, OneLine(st.Reason)
		out.Hint = fmt.Sprintf("restart the sandbox; see 'krunbox logs %s'", name)
	case hostapi.StateDead:
		out.State, out.Reason = StateDead, OneLine(st.Reason)
		out.Hint = fmt.Sprintf("see 'krunbox logs %s' and 'krunbox doctor'; starting it again may work", name)
	default: // created, stopped
		out.State = StateStopped
	}
	if out.State == StateDead || out.State == StateStopped {
		m.mu.Lock()
		f := m.failures[name]
		m.mu.Unlock()
		if f != nil {
			out.State, out.Reason, out.Hint = StateFailed, f.reason, f.hint
		}
	}
	return out
}

// watch reports Events.StateChanged when the VM that sb runs now stops. A newer VM
// of the same sandbox, once ready, replaces the one watched.
func (m *Manager) watch(sb *hostapi.Sandbox) {
	st, err := sb.Status(context.Background())
	if err != nil || st.Pid == 0 {
		return
	}
	name, pid := sb.Name(), st.Pid
	m.mu.Lock()
	if m.closed || m.watching[name] == pid {
		m.mu.Unlock()
		return
	}
	m.watching[name] = pid
	m.watchers.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.watchers.Done()
		ctx := m.life
		if _, err := sb.Wait(ctx); err != nil {
			return // the session is ending
		}
		m.mu.Lock()
		current := m.watching[name] == pid
		if current {
			delete(m.watching, name)
		}
		m.mu.Unlock()
		if !current {
			return
		}
		st := m.status(ctx, name)
		if st.State == StateReady {
			if now, err := m.host.Get(name); err == nil {
				m.watch(now) // started again meanwhile, from elsewhere
			}
			return
		}
		m.log.Info("sandbox no longer ready", "sandbox", name, "state", st.State)
		m.events.StateChanged(name, st)
	}()
}

// unwatch stops watching a sandbox that this connection is about to stop:
// the client knows, no sandbox.state is due.
func (m *Manager) unwatch(name string) {
	m.mu.Lock()
	delete(m.watching, name)
	m.mu.Unlock()
}

// Status describes a sandbox; timeout, when more than 0, bounds the ping
// of its guest agent (default 2 s), so that a client with a deadline of its
// own hears "unresponsive" rather than nothing.
func (m *Manager) Status(ctx context.Context, name string, timeout time.Duration) (*Status, error) {
	if err := CheckName("name", name); err != nil {
		return nil, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return m.status(ctx, name), nil
}

// Restart stops the sandbox of req if it runs (and removes it when
// req.Recreate), then creates and starts it as Ensure does. The commands of
// this session in it are killed first, their ends reported.
func (m *Manager) Restart(ctx context.Context, req *EnsureRequest) (*Status, error) {
	name := req.Config.Name
	if sb, err := m.host.Get(name); err == nil && req.Recreate && sb.Isolation() != nil {
		// Recreating would remove its checkout with it.
		if unlanded, uerr := sb.Unlanded(ctx); uerr != nil || unlanded {
			return nil, NewError(CodeStartFailed, map[string]any{
				"hint": "land its work first (krunbox land " + name + ", or /krunbox land in pi), or remove it (krunbox rm -f " + name + ")",
			}, "restart %s: its isolated checkout holds work not landed, which recreating it would lose", name)
		}
	}
	m.unwatch(name)
	m.KillExecs(name)
	host, err := m.startHost(ctx, name, req.StartTimeout)
	if err != nil {
		return nil, err
	}
	created := false
	sb, err := host.Get(name)
	switch {
	case err == nil && req.Recreate:
		if err := sb.Remove(ctx); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
			return nil, NewError(CodeStartFailed, nil, "restart %s: %v", name, err)
		}
		sb, created, err = m.create(ctx, host, req.Config)
	case err == nil:
		err = sb.Stop(ctx)
	case errors.Is(err, hostapi.ErrNotFound):
		sb, created, err = m.create(ctx, host, req.Config)
	}
	if err != nil {
		return nil, m.startError(ctx, name, err)
	}
	st, err := m.start(ctx, sb)
	if err != nil {
		return nil, err
	}
	st.Created = &created
	return st, nil
}

// Stop stops a sandbox, and removes it too when remove is true. Stopping
// a stopped or absent sandbox is not an error.
func (m *Manager) Stop(ctx context.Context, name string, remove bool) (*Status, error) {
	if err := CheckName("name", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	delete(m.failures, name)
	m.mu.Unlock()
	m.unwatch(name)
	sb, err := m.host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &Status{Name: name, State: StateAbsent}, nil
	}
	if err == nil {
		if remove {
			err = sb.Remove(ctx)
		} else {
			err = sb.Stop(ctx)
		}
	}
	if err != nil && !errors.Is(err, hostapi.ErrNotFound) {
		return nil, NewError(CodeIO, nil, "stop %s: %v", name, err)
	}
	return m.status(ctx, name), nil
}

// LogsResult is the tail of a sandbox's console log.
type LogsResult struct {
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
}

// Network changes the rules of a running sandbox whose network is
// allow=...: op is "allow" or "deny". It returns the setting after the
// change.
func (m *Manager) Network(ctx context.Context, name, op string, rules []string) (string, error) {
	if err := CheckName("name", name); err != nil {
		return "", err
	}
	if op != "allow" && op != "deny" {
		return "", InvalidParams("op %q: want allow or deny", op)
	}
	if len(rules) == 0 {
		return "", InvalidParams("rules: want at least one")
	}
	if _, err := netpolicy.ParseRules(rules); err != nil {
		return "", NewError(CodeInvalidConfig, nil, "%v", err)
	}
	sb, err := m.host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return "", NewError(CodeNotFound, nil, "sandbox %s: not found", name)
	}
	if err != nil {
		return "", NewError(CodeIO, nil, "sandbox %s: %v", name, err)
	}
	n, err := sb.ChangeNetwork(ctx, op, rules)
	if err != nil {
		return "", NewError(CodeNotReady, nil, "%v", err)
	}
	return n, nil
}

// Logs returns the last limit bytes of a sandbox's console log, as UTF-8
// with invalid bytes replaced; an absent sandbox, or one without a log
// yet, has an empty one.
func (m *Manager) Logs(name string, limit int64) (*LogsResult, error) {
	if err := CheckName("name", name); err != nil {
		return nil, err
	}
	sb, err := m.host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &LogsResult{}, nil
	}
	if err != nil {
		return nil, NewError(CodeIO, nil, "logs of %s: %v", name, err)
	}
	b, more, err := logfile.Tail(sb.ConsolePath(), limit)
	if errors.Is(err, fs.ErrNotExist) {
		return &LogsResult{}, nil
	}
	if err != nil {
		return nil, NewError(CodeIO, nil, "logs of %s: %v", name, err)
	}
	return &LogsResult{Text: strings.ToValidUTF8(string(b), "\uFFFD"), Truncated: more}, nil
}

// hintError attaches advice for the user to an error.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// Hint returns the advice.
func (e *hintError) Hint() string { return e.hint }
