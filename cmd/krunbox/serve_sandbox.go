package main

import (
	"context"
	"encoding/json"
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

// The sandbox methods of the serve protocol (docs/serve-protocol.md §4).

// checkName checks a sandbox name as the protocol accepts it: 1 to 63
// lowercase letters, digits or '-', starting with a letter or digit. A loop
// rather than a regexp, which every krunbox command would compile at init.
func checkName(field, name string) error {
	ok := len(name) >= 1 && len(name) <= 63
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && c == '-'
	}
	if !ok {
		return invalidParams("%s %q: want 1 to 63 lowercase letters, digits or '-', starting with a letter or digit", field, name)
	}
	return nil
}

// defaultStartTimeout is how long sandbox.ensure waits for the agent by
// default.
const defaultStartTimeout = 120 * time.Second

// sandboxStatus is the protocol's SandboxStatus.
type sandboxStatus struct {
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

// Protocol states.
const (
	stateAbsent       = "absent"
	stateStopped      = "stopped"
	stateStarting     = "starting"
	stateReady        = "ready"
	stateUnresponsive = "unresponsive"
	stateDead         = "dead"
	stateFailed       = "failed"
)

// startFailure is why the last start of a sandbox failed.
type startFailure struct{ reason, hint string }

type mountParams struct {
	Host     string `json:"host"`
	Guest    string `json:"guest"`
	ReadOnly bool   `json:"readOnly"`
}

// secretParams is a secret: the guest variable Name, the host Source of its
// value (env:VAR or file:/ABSOLUTE/PATH) and the Hosts it may be sent to.
type secretParams struct {
	Name   string   `json:"name"`
	Source string   `json:"source"`
	Hosts  []string `json:"hosts"`
}

type configParams struct {
	Image string `json:"image"`
	// ImageTrusted says the image comes from the user (their own
	// configuration, environment or flags), not from a project's file:
	// only then may it be a local source.
	ImageTrusted   bool              `json:"imageTrusted"`
	Pull           string            `json:"pull"`
	CPUs           *int              `json:"cpus"`
	MemoryMiB      *int              `json:"memoryMiB"`
	Network        string            `json:"network"`
	Mounts         []mountParams     `json:"mounts"`
	Env            map[string]string `json:"env"`
	IdleTimeoutSec *int64            `json:"idleTimeoutSec"`
	Labels         map[string]string `json:"labels"`
	Secrets        []secretParams    `json:"secrets"`
	// Isolate gives the sandbox its own checkout of the workspace's
	// HEAD (hostapi.Config.Isolate).
	Isolate bool `json:"isolate"`
}

type ensureParams struct {
	Name           string        `json:"name"`
	Workspace      string        `json:"workspace"`
	Config         *configParams `json:"config"`
	StartTimeoutMs *int64        `json:"startTimeoutMs"`
	Recreate       bool          `json:"recreate"`
}

// ensureRequest is a checked sandbox.ensure or sandbox.restart.
type ensureRequest struct {
	cfg          hostapi.Config
	startTimeout time.Duration
	recreate     bool
}

// parseEnsure checks the params of sandbox.ensure and sandbox.restart and
// turns them into a sandbox configuration.
func parseEnsure(raw json.RawMessage) (*ensureRequest, error) {
	var p ensureParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if err := checkName("name", p.Name); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(p.Workspace) {
		return nil, invalidParams("workspace %q: want an absolute host path", p.Workspace)
	}
	if p.Config == nil {
		return nil, invalidParams("config: required")
	}
	req := &ensureRequest{startTimeout: defaultStartTimeout, recreate: p.Recreate}
	if p.StartTimeoutMs != nil {
		if *p.StartTimeoutMs <= 0 {
			return nil, invalidParams("startTimeoutMs %d: want more than 0", *p.StartTimeoutMs)
		}
		req.startTimeout = time.Duration(*p.StartTimeoutMs) * time.Millisecond
	}
	c := p.Config
	invalid := func(format string, a ...any) error { return newError(codeInvalidConfig, nil, format, a...) }
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
	env, err := envList(c.Env)
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
	req.cfg = cfg
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

// envList turns an environment object into sorted KEY=VALUE entries.
func envList(env map[string]string) ([]string, error) {
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

// configDiff returns the protocol keys in which two configurations differ.
func configDiff(have, want hostapi.Config) []string {
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

func (s *server) sandboxEnsure(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	req, err := parseEnsure(raw)
	if err != nil {
		return nil, nil, err
	}
	name := req.cfg.Name
	host, err := s.startHost(ctx, name, req.startTimeout)
	if err != nil {
		return nil, nil, err
	}
	created := false
	sb, err := host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		sb, created, err = s.create(ctx, host, req.cfg)
	}
	if err != nil {
		return nil, nil, s.startError(ctx, name, err)
	}
	changed := []string{}
	if !created {
		diff := configDiff(sb.Config(), req.cfg)
		var reach []string
		for _, k := range diff {
			if slices.Contains(reachKeys, k) {
				reach = append(reach, k)
			} else {
				changed = append(changed, k)
			}
		}
		if len(reach) > 0 {
			st := s.status(ctx, name)
			return nil, nil, newError(codeConfigMismatch, map[string]any{
				"keys":   reach,
				"status": st,
				"hint":   "restart the sandbox with recreate to apply the new configuration (its changes outside the mounts are lost)",
			}, "sandbox %s exists with another %s", name, strings.Join(reach, ", "))
		}
	}
	st, err := s.start(ctx, sb)
	if err != nil {
		return nil, nil, err
	}
	st.Created, st.ConfigChanged = &created, &changed
	return st, nil, nil
}

// create creates the sandbox of cfg; a sandbox of that name created
// meanwhile (by another connection) is returned instead, with created
// false.
func (s *server) create(ctx context.Context, host *hostapi.Host, cfg hostapi.Config) (*hostapi.Sandbox, bool, error) {
	s.progress(cfg.Name, "create", "creating the sandbox from "+cfg.Image)
	sb, err := host.Create(ctx, cfg)
	if errors.Is(err, hostapi.ErrExists) {
		sb, err = host.Get(cfg.Name)
		return sb, false, err
	}
	if err != nil {
		// The configuration was checked: the image could not be had.
		return nil, false, withHint(err, fmt.Sprintf("check the image reference %s and that its source is reachable; 'krunbox pull %s' tries the pull alone", cfg.Image, cfg.Image))
	}
	return sb, true, nil
}

// startHost returns a Host for starting one sandbox: the server's
// directories, the request's start timeout, and pull progress sent as
// sandbox.progress.
func (s *server) startHost(_ context.Context, name string, timeout time.Duration) (*hostapi.Host, error) {
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
		s.progress(name, phase, msg)
	}
	h, err := hostapi.NewHost(hostapi.WithDirs(s.host.Dirs()), hostapi.WithStartTimeout(timeout),
		hostapi.WithPullProgress(progress), hostapi.WithLogger(s.log))
	if err != nil {
		return nil, fmt.Errorf("open the state directories: %w", err)
	}
	return h, nil
}

func (s *server) progress(name, phase, msg string) {
	s.out.send(&message{Method: "sandbox.progress", Params: map[string]string{"name": name, "phase": phase, "message": msg}})
}

// start starts sb if it does not run and waits for its agent; it returns
// its status, ready, or a start-failed error.
func (s *server) start(ctx context.Context, sb *hostapi.Sandbox) (*sandboxStatus, error) {
	name := sb.Name()
	var bootMs *int64
	if st, err := sb.Status(ctx); err != nil || st.State != hostapi.StateRunning {
		s.progress(name, "boot", "starting the VM")
		t0 := time.Now()
		if err := sb.Start(ctx); err != nil {
			return nil, s.startError(ctx, name, err)
		}
		ms := time.Since(t0).Milliseconds()
		bootMs = &ms
		s.log.Info("started", "sandbox", name, "ms", ms)
	}
	s.mu.Lock()
	delete(s.failures, name)
	s.mu.Unlock()
	st := s.status(ctx, name)
	if st.State != stateReady {
		return nil, newError(codeStartFailed, map[string]any{"status": st, "hint": st.Hint},
			"sandbox %s started but is %s: %s", name, st.State, st.Reason)
	}
	st.BootMs = bootMs
	s.watch(sb)
	return st, nil
}

// startError turns a failure to create or start a sandbox into the
// protocol's error, and remembers it for its status.
func (s *server) startError(ctx context.Context, name string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var bad *refname.ErrBadName
	if errors.As(err, &bad) {
		return newError(codeInvalidConfig, nil, "config.image: %v", err)
	}
	hint := fmt.Sprintf("see /krunbox logs, or 'krunbox logs %s' and 'krunbox doctor'", name)
	var h hinter
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
	s.mu.Lock()
	s.failures[name] = &startFailure{reason: oneLine(err.Error()), hint: hint}
	s.mu.Unlock()
	s.log.Warn("start failed", "sandbox", name, "err", err)
	return newError(codeStartFailed, map[string]any{"hint": hint, "status": s.status(ctx, name), "consoleTail": console}, "%v", err)
}

// status describes a sandbox as the protocol does.
func (s *server) status(ctx context.Context, name string) *sandboxStatus {
	sb, err := s.host.Get(name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &sandboxStatus{Name: name, State: stateAbsent}
	}
	if err != nil {
		return &sandboxStatus{Name: name, State: stateFailed, Reason: oneLine(err.Error()), Hint: "remove the sandbox and create it again"}
	}
	img := sb.Image()
	out := &sandboxStatus{Name: name, Image: img.Ref, ImageDigest: img.Digest, Workspace: sb.Config().Workspace, Hostname: name}
	st, err := sb.Status(ctx)
	if err != nil {
		out.State, out.Reason = stateFailed, oneLine(err.Error())
		return out
	}
	switch st.State {
	case hostapi.StateRunning:
		out.State = stateReady
		if st.Agent != nil && st.Agent.Hostname != "" {
			out.Hostname = st.Agent.Hostname
		}
	case hostapi.StateStarting:
		out.State = stateStarting
	case hostapi.StateUnresponsive:
		out.State, out.Reason = stateUnresponsive, oneLine(st.Reason)
		out.Hint = fmt.Sprintf("restart the sandbox; see 'krunbox logs %s'", name)
	case hostapi.StateDead:
		out.State, out.Reason = stateDead, oneLine(st.Reason)
		out.Hint = fmt.Sprintf("see 'krunbox logs %s' and 'krunbox doctor'; starting it again may work", name)
	default: // created, stopped
		out.State = stateStopped
	}
	if out.State == stateDead || out.State == stateStopped {
		s.mu.Lock()
		f := s.failures[name]
		s.mu.Unlock()
		if f != nil {
			out.State, out.Reason, out.Hint = stateFailed, f.reason, f.hint
		}
	}
	return out
}

// watch sends sandbox.state when the VM that sb runs now stops. A newer VM
// of the same sandbox, once ready, replaces the one watched.
func (s *server) watch(sb *hostapi.Sandbox) {
	st, err := sb.Status(context.Background())
	if err != nil || st.Pid == 0 {
		return
	}
	name, pid := sb.Name(), st.Pid
	s.mu.Lock()
	if s.watching[name] == pid {
		s.mu.Unlock()
		return
	}
	s.watching[name] = pid
	s.mu.Unlock()
	s.requests.Add(1)
	go func() {
		defer s.requests.Done()
		ctx := s.life
		if _, err := sb.Wait(ctx); err != nil {
			return // the server is ending
		}
		s.mu.Lock()
		current := s.watching[name] == pid
		if current {
			delete(s.watching, name)
		}
		s.mu.Unlock()
		if !current {
			return
		}
		st := s.status(ctx, name)
		if st.State == stateReady {
			if now, err := s.host.Get(name); err == nil {
				s.watch(now) // started again meanwhile, from elsewhere
			}
			return
		}
		s.log.Info("sandbox no longer ready", "sandbox", name, "state", st.State)
		s.out.send(&message{Method: "sandbox.state", Params: map[string]any{"name": name, "status": st}})
	}()
}

// unwatch stops watching a sandbox that this connection is about to stop:
// the client knows, no sandbox.state is due.
func (s *server) unwatch(name string) {
	s.mu.Lock()
	delete(s.watching, name)
	s.mu.Unlock()
}

func (s *server) sandboxStatus(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name string `json:"name"`
		// TimeoutMs bounds the ping of the guest agent (default 2 s), so
		// that a client with a deadline of its own hears "unresponsive"
		// from the server rather than nothing.
		TimeoutMs int `json:"timeoutMs"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkName("name", p.Name); err != nil {
		return nil, nil, err
	}
	if p.TimeoutMs < 0 {
		return nil, nil, &rpcError{Code: codeInvalidParams, Message: "timeoutMs: want 0 (the default) or more"}
	}
	if p.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(p.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	return s.status(ctx, p.Name), nil, nil
}

func (s *server) sandboxRestart(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	req, err := parseEnsure(raw)
	if err != nil {
		return nil, nil, err
	}
	name := req.cfg.Name
	if sb, err := s.host.Get(name); err == nil && req.recreate && sb.Isolation() != nil {
		// Recreating would remove its checkout with it.
		if unlanded, uerr := sb.Unlanded(ctx); uerr != nil || unlanded {
			return nil, nil, newError(codeStartFailed, map[string]any{
				"hint": "land its work first (krunbox land " + name + ", or /krunbox land in pi), or remove it (krunbox rm -f " + name + ")",
			}, "restart %s: its isolated checkout holds work not landed, which recreating it would lose", name)
		}
	}
	s.unwatch(name)
	s.killExecs(name)
	host, err := s.startHost(ctx, name, req.startTimeout)
	if err != nil {
		return nil, nil, err
	}
	created := false
	sb, err := host.Get(name)
	switch {
	case err == nil && req.recreate:
		if err := sb.Remove(ctx); err != nil && !errors.Is(err, hostapi.ErrNotFound) {
			return nil, nil, newError(codeStartFailed, nil, "restart %s: %v", name, err)
		}
		sb, created, err = s.create(ctx, host, req.cfg)
	case err == nil:
		err = sb.Stop(ctx)
	case errors.Is(err, hostapi.ErrNotFound):
		sb, created, err = s.create(ctx, host, req.cfg)
	}
	if err != nil {
		return nil, nil, s.startError(ctx, name, err)
	}
	st, err := s.start(ctx, sb)
	if err != nil {
		return nil, nil, err
	}
	st.Created = &created
	return st, nil, nil
}

func (s *server) sandboxStop(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name   string `json:"name"`
		Remove bool   `json:"remove"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkName("name", p.Name); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	delete(s.failures, p.Name)
	s.mu.Unlock()
	s.unwatch(p.Name)
	sb, err := s.host.Get(p.Name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &sandboxStatus{Name: p.Name, State: stateAbsent}, nil, nil
	}
	if err == nil {
		if p.Remove {
			err = sb.Remove(ctx)
		} else {
			err = sb.Stop(ctx)
		}
	}
	if err != nil && !errors.Is(err, hostapi.ErrNotFound) {
		return nil, nil, newError(codeIO, nil, "stop %s: %v", p.Name, err)
	}
	return s.status(ctx, p.Name), nil, nil
}

type logsResult struct {
	Text      string `json:"text"`
	Truncated bool   `json:"truncated"`
}

// sandboxNetwork changes the rules of a running sandbox whose network is
// allow=...: {name, op: "allow"|"deny", rules: [RULE...]} → {network}.
func (s *server) sandboxNetwork(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name  string   `json:"name"`
		Op    string   `json:"op"`
		Rules []string `json:"rules"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkName("name", p.Name); err != nil {
		return nil, nil, err
	}
	if p.Op != "allow" && p.Op != "deny" {
		return nil, nil, invalidParams("op %q: want allow or deny", p.Op)
	}
	if len(p.Rules) == 0 {
		return nil, nil, invalidParams("rules: want at least one")
	}
	if _, err := netpolicy.ParseRules(p.Rules); err != nil {
		return nil, nil, newError(codeInvalidConfig, nil, "%v", err)
	}
	sb, err := s.host.Get(p.Name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, nil, newError(codeNotFound, nil, "sandbox %s: not found", p.Name)
	}
	if err != nil {
		return nil, nil, newError(codeIO, nil, "sandbox %s: %v", p.Name, err)
	}
	n, err := sb.ChangeNetwork(ctx, p.Op, p.Rules)
	if err != nil {
		return nil, nil, newError(codeNotReady, nil, "%v", err)
	}
	return map[string]string{"network": n}, nil, nil
}

func (s *server) sandboxLogs(_ context.Context, raw json.RawMessage) (any, func(), error) {
	var p struct {
		Name     string `json:"name"`
		MaxBytes *int64 `json:"maxBytes"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if err := checkName("name", p.Name); err != nil {
		return nil, nil, err
	}
	limit := int64(64 << 10)
	if p.MaxBytes != nil {
		if *p.MaxBytes < 0 || *p.MaxBytes > maxReadBytes {
			return nil, nil, invalidParams("maxBytes %d: want 0 to %d", *p.MaxBytes, maxReadBytes)
		}
		limit = *p.MaxBytes
	}
	sb, err := s.host.Get(p.Name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return &logsResult{}, nil, nil
	}
	if err != nil {
		return nil, nil, newError(codeIO, nil, "logs of %s: %v", p.Name, err)
	}
	b, more, err := logfile.Tail(sb.ConsolePath(), limit)
	if errors.Is(err, fs.ErrNotExist) {
		return &logsResult{}, nil, nil
	}
	if err != nil {
		return nil, nil, newError(codeIO, nil, "logs of %s: %v", p.Name, err)
	}
	return &logsResult{Text: strings.ToValidUTF8(string(b), "\uFFFD"), Truncated: more}, nil, nil
}
