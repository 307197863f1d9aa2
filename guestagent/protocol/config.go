package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"
)

// Where the host puts the agent and its boot configuration in the sandbox's
// root file system before boot. libkrun's init execs AgentPath with the
// arguments "--config ConfigPath".
const (
	GuestDir   = "/.krunbox"
	AgentPath  = GuestDir + "/krunbox-agent"
	ConfigPath = GuestDir + "/agent.json"
	// CACertPath is where the host places Config.CACert as a file.
	CACertPath = GuestDir + "/ca.pem"
)

// DefaultPort is the vsock port the agent listens on unless its config
// says otherwise.
const DefaultPort uint32 = 9421

// Config is the agent's boot configuration: a JSON file the host writes to
// ConfigPath in the sandbox's root before boot (never the kernel command
// line, which cannot carry quotes and is visible in /proc/cmdline). Fields
// a given agent does not know are ignored, so the host may add new ones.
type Config struct {
	// Port is the vsock port to listen on; 0 means DefaultPort.
	Port uint32 `json:"port,omitempty"`
	// Hostname, when set, becomes the guest's hostname.
	Hostname string `json:"hostname,omitempty"`
	// Mounts are the virtio-fs shares to mount, in order.
	Mounts []Mount `json:"mounts,omitempty"`
	// Env (KEY=VALUE) is the default environment of every process,
	// overridden entry by entry by an exec's own env.
	Env []string `json:"env,omitempty"`
	// User is the default user of processes (name or uid[:gid]); empty
	// means the agent's own (root).
	User string `json:"user,omitempty"`
	// Workdir is the default working directory of processes and the base of
	// relative paths in file requests; empty means "/".
	Workdir string `json:"workdir,omitempty"`
	// IdleTimeout, when positive, shuts the VM down once there has been no
	// exec or file request and no running process for that long. Pings and
	// health requests do not count as activity.
	IdleTimeout time.Duration `json:"idle_timeout_ns,omitempty"`
	// MainWait, when positive, says the VM was started to run a main
	// command (ExecRequest.Main) that its host sends once the agent is
	// ready: if none has started within MainWait of that, the host is
	// gone (a "krunbox run" killed in between) and the agent shuts the VM
	// down rather than leave it running with nothing to do.
	MainWait time.Duration `json:"main_wait_ns,omitempty"`
	// CACert is a certificate authority in PEM (the sandbox's secrets CA,
	// whose key stays on the host): at boot the agent appends it to the
	// system's CA bundles that exist, and sets SSL_CERT_FILE,
	// REQUESTS_CA_BUNDLE and NODE_EXTRA_CA_CERTS in the environment of
	// processes (Config.Env and an exec's env override them).
	CACert string `json:"ca_cert,omitempty"`
	// SetupOutsideVM makes an agent listening on a unix socket (a test or
	// debugging run outside a VM) still set the hostname and mount the
	// shares. Production configs never set it.
	SetupOutsideVM bool `json:"setup_outside_vm,omitempty"`
	// Net, when set, is the guest's network interface to set up at boot
	// (a virtio-net device connected to the host's network stack).
	Net *NetConfig `json:"net,omitempty"`
	// RootDisk, when set, is a block root's disk: before anything else
	// the agent mounts it and makes the guest's root an overlay of "/"
	// (the image tree, read-only) under the disk's file system, so that
	// every write to the root reaches the disk. An agent that cannot
	// exits, which stops the VM, saying why on the console.
	RootDisk *RootDisk `json:"root_disk,omitempty"`
}

// RootDisk is a block root's disk.
type RootDisk struct {
	// ID is the disk's libkrun id; the guest finds the disk by it
	// (package vmdev).
	ID string `json:"id"`
	// FSType is the disk's file system: "ext4".
	FSType string `json:"fs_type"`
}

// RootDiskFSType is the file system of block roots' disks.
const RootDiskFSType = "ext4"

// NetConfig is the static setup of the guest's network interface.
type NetConfig struct {
	// Interface is the interface's name, such as "eth0".
	Interface string `json:"interface"`
	// Addresses are the interface's addresses with their prefix length
	// ("192.168.127.2/24", "fd7b:6b62:6f78::2/64").
	Addresses []string `json:"addresses"`
	// Gateways are the default routes' next hops, one per address family.
	Gateways []string `json:"gateways"`
	// DNS are the name servers written to /etc/resolv.conf.
	DNS []string `json:"dns,omitempty"`
	// MTU is the interface's MTU; 0 leaves it.
	MTU int `json:"mtu,omitempty"`
}

// Mount is one virtio-fs share.
type Mount struct {
	// Tag is the virtio-fs tag the host exported the directory under.
	Tag string `json:"tag"`
	// Path is the absolute guest path to mount it on; missing directories
	// are created.
	Path string `json:"path"`
	// ReadOnly mounts it read-only.
	ReadOnly bool `json:"read_only,omitempty"`
}

// Validate checks a config for values the agent cannot use.
func (c *Config) Validate() error {
	var errs []error
	for i, m := range c.Mounts {
		if m.Tag == "" {
			errs = append(errs, fmt.Errorf("mount %d: empty tag", i))
		}
		if !path.IsAbs(m.Path) {
			errs = append(errs, fmt.Errorf("mount %d (%s): path %q is not absolute", i, m.Tag, m.Path))
		}
	}
	for _, e := range c.Env {
		if err := CheckEnv(e); err != nil {
			errs = append(errs, err)
		}
	}
	if strings.ContainsRune(c.User, 0) {
		errs = append(errs, fmt.Errorf("user %q holds a NUL byte", c.User))
	}
	if c.Workdir != "" && !path.IsAbs(c.Workdir) {
		errs = append(errs, fmt.Errorf("workdir %q is not absolute", c.Workdir))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, errors.New("negative idle timeout"))
	}
	if c.MainWait < 0 {
		errs = append(errs, errors.New("negative main command wait"))
	}
	if d := c.RootDisk; d != nil && (d.ID == "" || strings.ContainsAny(d.ID, "/\x00") || d.FSType != RootDiskFSType) {
		errs = append(errs, fmt.Errorf("root disk %q (%s): want an id without '/' and file system %s", d.ID, d.FSType, RootDiskFSType))
	}
	if c.CACert != "" && !strings.HasPrefix(c.CACert, "-----BEGIN CERTIFICATE-----") {
		errs = append(errs, errors.New("ca_cert is not a PEM certificate"))
	}
	return errors.Join(errs...)
}

// CheckEnv checks one environment entry: KEY=VALUE with a KEY, and no NUL
// byte, which no process environment can hold.
func CheckEnv(e string) error {
	if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
		return fmt.Errorf("env entry %q is not KEY=VALUE", e)
	}
	if strings.ContainsRune(e, 0) {
		return fmt.Errorf("env entry %q holds a NUL byte", e)
	}
	return nil
}

// ListenPort is the vsock port the agent listens on.
func (c *Config) ListenPort() uint32 {
	if c.Port == 0 {
		return DefaultPort
	}
	return c.Port
}

// ReadConfig reads and validates a config file.
func ReadConfig(name string) (*Config, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read agent config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("agent config %s: %w", name, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("agent config %s: %w", name, err)
	}
	return &c, nil
}

// WriteConfig writes c to name (mode 0644), for the host to place in the
// sandbox's root before boot.
func WriteConfig(name string, c *Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("agent config: %w", err)
	}
	if err := os.WriteFile(name, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write agent config: %w", err)
	}
	return nil
}

// MergeEnv layers KEY=VALUE lists, later ones overriding earlier ones entry
// by entry, keeping the order in which keys first appear: how an exec's
// environment is made from the agent's defaults, Config.Env and the
// request's own.
func MergeEnv(layers ...[]string) []string {
	var out []string
	index := make(map[string]int)
	for _, layer := range layers {
		for _, kv := range layer {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := index[k]; ok {
				out[i] = kv
				continue
			}
			index[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}
