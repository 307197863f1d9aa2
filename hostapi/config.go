package hostapi

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/krunbox/krunbox/guestagent/protocol"
	"github.com/krunbox/krunbox/hostapi/vmm"
	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/oci"
)

// Network selects a sandbox's network: NetworkPublic (the internet
// through krunbox's userspace network stack, no private, loopback,
// link-local, multicast or host address), "allow=RULE,..." (only
// what the rules name: host names, *.domain wildcards, IPs, CIDRs, each
// optionally with :PORT), NetworkOpen (everything through the stack, the
// host's loopback at the gateway address included), NetworkTSI (the host's
// network identity through libkrun's transparent socket impersonation;
// guest listeners become host listeners) or NetworkNone (only loopback). The stack's modes need a libkrun built
// with its NET feature.
type Network string

// Networks.
const (
	// NetworkPublic is the default.
	NetworkPublic Network = "public"
	NetworkOpen   Network = "open"
	NetworkTSI    Network = "tsi"
	NetworkNone   Network = "none"
)

// PortMapping publishes a guest TCP port on a host port.
type PortMapping struct {
	// HostIP is the host address listened on: 127.0.0.1 when empty.
	// Under NetworkTSI libkrun chooses, and HostIP must be empty.
	HostIP string `json:"host_ip,omitempty"`
	Host   uint16 `json:"host"`  // the host port
	Guest  uint16 `json:"guest"` // the guest port
}

// Defaults of a Config.
const (
	DefaultCPUs      = 2
	DefaultMemoryMiB = 2048
)

// Config describes a sandbox.
type Config struct {
	// Name names the sandbox; empty generates one.
	Name string `json:"name"`
	// Image is the image reference (see oci.ReferenceHelp).
	Image string `json:"image"`
	// PullPolicy says when to pull the image; empty means if-missing.
	PullPolicy PullPolicy `json:"pull_policy,omitempty"`
	// Platform picks the image platform (os/arch[/variant]); empty means
	// the host's.
	Platform string `json:"platform,omitempty"`
	// CPUs is the number of vCPUs; 0 means DefaultCPUs.
	CPUs int `json:"cpus,omitempty"`
	// MemoryMiB is the guest memory; 0 means DefaultMemoryMiB.
	MemoryMiB int `json:"memory_mib,omitempty"`
	// DiskMiB is the size of a block root's disk (RootBlock): the most
	// the guest can write to its root file system before it gets ENOSPC;
	// the host file takes only what the guest wrote. 0 means
	// DefaultDiskMiB. Other roots ignore it.
	DiskMiB int `json:"disk_mib,omitempty"`
	// Workspace is a host directory mounted live at the same absolute path
	// in the guest and used as the default working directory. A git
	// worktree's or submodule's git directories outside it are mounted
	// too, at their own paths, so git works in the guest.
	Workspace string `json:"workspace,omitempty"`
	// Isolate gives the sandbox its own checkout of the workspace's git
	// repository instead of the workspace itself: the files of the commit
	// HEAD points to (nothing untracked or ignored), in a repository of
	// its own on branch krunbox/NAME, kept under krunbox's state until the
	// sandbox is removed, seen at the workspace's path in the guest. The
	// user's checkout is never written; Sandbox.Diff, Export and Land take
	// the work out. The workspace must be the top of a git checkout.
	Isolate bool `json:"isolate,omitempty"`
	// Mounts are further host directories shared with the guest.
	Mounts []Mount `json:"mounts,omitempty"`
	// Env (KEY=VALUE) is added to the image's environment. Nothing of the
	// host's environment is forwarded otherwise.
	Env []string `json:"env,omitempty"`
	// Workdir is the default working directory of commands; empty means
	// the workspace, else the image's.
	Workdir string `json:"workdir,omitempty"`
	// User runs commands as this guest user (name or uid[:gid]); empty
	// means the image's.
	User string `json:"user,omitempty"`
	// Network is the sandbox's network (see [Network]); empty means
	// NetworkPublic.
	Network Network `json:"network,omitempty"`
	// Ports publishes guest ports on the host, on 127.0.0.1 unless a
	// mapping names its host address (not possible under TSI).
	Ports []PortMapping `json:"ports,omitempty"`
	// IdleTimeout stops the VM after this long without exec or file
	// activity and with no command running; 0 never does. Pings and
	// status checks are not activity.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Labels are free-form metadata.
	Labels map[string]string `json:"labels,omitempty"`
	// AutoRemove removes the sandbox once its VM has run and stopped, also
	// when the program that started it is gone (killed, crashed): the next
	// Host.List or Host.Create removes it. "krunbox run --rm" sets it.
	AutoRemove bool `json:"auto_remove,omitempty"`
	// Root chooses how the sandbox's root file system is made: RootAuto
	// (the default), RootBlock, RootOverlay or RootCopy.
	Root RootKind `json:"root,omitempty"`
	// Secrets are keys the guest may use without holding them: it sees
	// each Name set to a random placeholder, and the host replaces the
	// placeholder with the value (read from Source at each start, never
	// stored) in the HTTP and HTTPS requests the guest sends to the
	// secret's Hosts, verifying their real certificates; HTTPS to them is
	// intercepted with a certificate authority of the sandbox's own, which
	// the guest trusts. Needs network public or allow=RULES.
	Secrets []Secret `json:"secrets,omitempty"`
	// GitWritable lets the guest change what the host's git runs or
	// obeys in the git directories of the workspace and the read-write
	// mounts: hooks, config, config.worktree, submodules' too, and the
	// core.hooksPath directories and included config files in a share.
	// By default they reach the guest read-only, and the git directories
	// cannot be renamed or removed (see Sandbox.GitProtection).
	GitWritable bool `json:"git_writable,omitempty"`
	// Limits bound what the host spends on the sandbox's behalf (its
	// network stack's connections, flows and buffers, its logs); zero
	// fields mean their defaults (see DefaultLimits).
	Limits Limits `json:"limits,omitzero"`
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.PullPolicy == "" {
		c.PullPolicy = PullIfMissing
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.MemoryMiB == 0 {
		c.MemoryMiB = DefaultMemoryMiB
	}
	if c.DiskMiB == 0 {
		c.DiskMiB = DefaultDiskMiB
	}
	if c.Network == "" {
		c.Network = NetworkPublic
	}
	if c.Root == "" {
		c.Root = RootAuto
	}
	c.Mounts = slices.Clone(c.Mounts)
	c.Env = slices.Clone(c.Env)
	c.Ports = slices.Clone(c.Ports)
	c.Labels = maps.Clone(c.Labels)
	c.Secrets = slices.Clone(c.Secrets)
	return c
}

// Validate checks c as Create does before it pulls anything: its fields,
// its workspace and its mounts (existing host directories whose guest
// paths neither overlap nor shadow /, /proc, /sys, /dev or krunbox's own
// directory). A Config that passes may still fail to create: its image
// may not be pullable.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	_, err := sandboxMounts(&c)
	return err
}

// validate checks the fields that need no file system.
func (c *Config) validate() error {
	var errs []error
	if c.Name != "" {
		if err := ValidateName(c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	if c.Image == "" {
		errs = append(errs, errors.New("no image"))
	}
	if _, err := oci.ParsePullPolicy(string(c.PullPolicy)); err != nil {
		errs = append(errs, err)
	}
	if err := c.Limits.validate(); err != nil {
		errs = append(errs, fmt.Errorf("limits: %w", err))
	}
	if c.CPUs < 1 || c.CPUs > 255 {
		errs = append(errs, fmt.Errorf("cpus %d: want 1 to 255", c.CPUs))
	}
	if c.MemoryMiB < 128 {
		errs = append(errs, fmt.Errorf("memory %d MiB: want at least 128 MiB", c.MemoryMiB))
	}
	if c.DiskMiB < MinDiskMiB || c.DiskMiB > MaxDiskMiB {
		errs = append(errs, fmt.Errorf("disk %d MiB: want %d MiB to %d MiB", c.DiskMiB, MinDiskMiB, MaxDiskMiB))
	}
	for _, e := range c.Env {
		if err := protocol.CheckEnv(e); err != nil {
			errs = append(errs, err)
		}
	}
	if np, err := vmm.Network(c.Network).Policy(); err != nil {
		errs = append(errs, err)
	} else {
		if np.Mode == netpolicy.None && len(c.Ports) > 0 {
			errs = append(errs, errors.New("published ports need a network: not possible with network none"))
		}
		for _, p := range c.Ports {
			if p.HostIP == "" {
				continue
			}
			if np.Mode == netpolicy.TSI {
				errs = append(errs, fmt.Errorf("port mapping %s:%d:%d: a host address is not possible with network tsi (libkrun binds its own)", p.HostIP, p.Host, p.Guest))
			} else if _, err := netip.ParseAddr(p.HostIP); err != nil {
				errs = append(errs, fmt.Errorf("port mapping: host address %q: %w", p.HostIP, err))
			}
		}
	}
	seen := map[uint16]bool{}
	for _, p := range c.Ports {
		if p.Host == 0 || p.Guest == 0 {
			errs = append(errs, fmt.Errorf("port mapping %d:%d: ports must be 1 to 65535", p.Host, p.Guest))
		}
		if seen[p.Host] {
			errs = append(errs, fmt.Errorf("host port %d is published twice", p.Host))
		}
		seen[p.Host] = true
	}
	errs = append(errs, c.validateSecrets()...)
	if _, err := ParseRootKind(string(c.Root)); err != nil {
		errs = append(errs, err)
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("idle timeout %v: want 0 or more", c.IdleTimeout))
	}
	if c.Isolate && c.Workspace == "" {
		errs = append(errs, errors.New("isolate needs a workspace: the git checkout to isolate"))
	}
	if c.Workdir != "" && !strings.HasPrefix(c.Workdir, "/") {
		errs = append(errs, fmt.Errorf("workdir %q: want an absolute guest path", c.Workdir))
	}
	return errors.Join(errs...)
}

// ParsePortMapping parses [IP:]HOST:GUEST, or a single PORT for the same
// port on both sides, as given to "krunbox run -p" (IP: the host address
// listened on, 127.0.0.1 when absent; an IPv6 one in brackets).
func ParsePortMapping(s string) (PortMapping, error) {
	var p PortMapping
	rest := s
	// [IP:]HOST:GUEST; an IPv6 address in brackets.
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		if j := strings.LastIndex(rest[:i], ":"); j >= 0 {
			p.HostIP = strings.TrimSuffix(strings.TrimPrefix(rest[:j], "["), "]")
			if _, err := netip.ParseAddr(p.HostIP); err != nil {
				return PortMapping{}, fmt.Errorf("port mapping %q: host address %q: want an IP address", s, p.HostIP)
			}
			rest = rest[j+1:]
		}
	}
	hostStr, guestStr, ok := strings.Cut(rest, ":")
	if !ok {
		guestStr = hostStr
	}
	for _, f := range []struct {
		s   string
		dst *uint16
	}{{hostStr, &p.Host}, {guestStr, &p.Guest}} {
		var n uint64
		if _, err := fmt.Sscanf(f.s, "%d", &n); err != nil || fmt.Sprint(n) != f.s || n < 1 || n > 65535 {
			return PortMapping{}, fmt.Errorf("port mapping %q: want [IP:]HOST:GUEST with ports 1 to 65535", s)
		}
		*f.dst = uint16(n)
	}
	return p, nil
}
