// Package userconfig loads the krunbox CLI's layered configuration:
// built-in defaults, then the user's config.toml, then KRUNBOX_*
// environment variables. Command-line flags override all three and are
// applied by the commands themselves.
package userconfig

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/go-units"
	"github.com/pelletier/go-toml/v2"

	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/internal/netstack"
)

// FileName is the name of the configuration file in the config directory.
const FileName = "config.toml"

// Config is the effective configuration.
type Config struct {
	// Image is the image of sandboxes created without one.
	Image string
	// CPUs is the number of vCPUs of a sandbox.
	CPUs int
	// MemoryMiB is the memory of a sandbox, in MiB.
	MemoryMiB int
	// DiskMiB is the size of a block-root sandbox's disk, in MiB
	// (hostapi.Config.DiskMiB).
	DiskMiB int
	// Network is "public" (the default), "allow=RULE,...", "open", "tsi"
	// (the host's network, through libkrun's TSI) or "none" (package
	// netpolicy).
	Network string
	// PullPolicy is "if-missing", "always" or "never".
	PullPolicy string
	// Platform is the image platform, os/arch[/variant]; empty means the
	// host's.
	Platform string
	// IdleTimeout stops a sandbox after this long without exec or file
	// activity; 0 never does.
	IdleTimeout time.Duration
	// StopTimeout is how long a stop waits for the guest to shut down
	// before killing the VM.
	StopTimeout time.Duration
	// StartTimeout is how long a start waits for the guest agent to
	// answer before it stops the VM and fails.
	StartTimeout time.Duration
	// Env is added to the environment of every sandbox (KEY=VALUE).
	Env []string
	// Root is how a new sandbox's root file system is made: "auto" (a
	// block root where the host gives one, else an overlay where it allows
	// it, else a copy), "block", "overlay" or "copy".
	Root string
	// GitWritable lets the guest of a new sandbox change the hooks and
	// config that the host's git runs or obeys (hostapi.Config.GitWritable).
	GitWritable bool
	// Limits bound what the host spends on a sandbox's behalf
	// (hostapi.Limits): the [limits] table of the file.
	Limits Limits

	sources map[string]string
}

// Limits are the [limits] table: hostapi.Limits, each field at its
// effective value.
type Limits struct {
	TCPConnections   int
	UDPFlows         int
	DNSConnections   int
	DNSQueries       int
	ConnectionBuffer int
	NetworkBuffer    int64
	LogSize          int64
}

// limitsTable is the name of the file's table of limits; its keys are
// settings named limitsTable + "." + key.
const limitsTable = "limits"

// A setting is one key of the configuration: how to read it from a string
// (file values are read the same way) and how to show it.
type setting struct {
	key  string
	env  string
	help string
	set  func(c *Config, v string) error
	get  func(c *Config) string
}

var settings = []setting{
	{"image", "KRUNBOX_IMAGE", "image of sandboxes created without one",
		func(c *Config, v string) error { c.Image = v; return nil },
		func(c *Config) string { return c.Image }},
	{"cpus", "KRUNBOX_CPUS", "vCPUs of a sandbox (1-255)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 255 {
				return fmt.Errorf("want a whole number from 1 to 255, got %q", v)
			}
			c.CPUs = n
			return nil
		},
		func(c *Config) string { return strconv.Itoa(c.CPUs) }},
	{"memory", "KRUNBOX_MEMORY", "memory of a sandbox (e.g. 2GiB, 512MiB)",
		func(c *Config, v string) error {
			n, err := ParseMemory(v)
			if err != nil {
				return err
			}
			c.MemoryMiB = n
			return nil
		},
		func(c *Config) string { return FormatMemory(c.MemoryMiB) }},
	{"disk_size", "KRUNBOX_DISK_SIZE", "disk of a sandbox with a block root, the most its guest can write to its root (e.g. 16GiB); sparse: the host spends only what the guest writes",
		func(c *Config, v string) error {
			n, err := ParseDiskSize(v)
			if err != nil {
				return err
			}
			c.DiskMiB = n
			return nil
		},
		func(c *Config) string { return FormatMemory(c.DiskMiB) }},
	{"network", "KRUNBOX_NETWORK", "public (the internet, no private or host address; the default), allow=RULE,..., open, tsi (the host's network) or none",
		func(c *Config, v string) error {
			if v == "" {
				return errors.New("want public, allow=RULE,..., open, tsi or none")
			}
			if _, err := netpolicy.Parse(v); err != nil {
				return err
			}
			c.Network = v
			return nil
		},
		func(c *Config) string { return c.Network }},
	{"pull_policy", "KRUNBOX_PULL_POLICY", "missing (or if-missing), always or never",
		func(c *Config, v string) error {
			if v == "missing" { // docker's spelling
				v = "if-missing"
			}
			return oneOf(&c.PullPolicy, v, "if-missing", "always", "never")
		},
		func(c *Config) string { return c.PullPolicy }},
	{"platform", "KRUNBOX_PLATFORM", "image platform, os/arch[/variant]; empty for the host's",
		func(c *Config, v string) error { c.Platform = v; return nil },
		func(c *Config) string { return c.Platform }},
	{"idle_timeout", "KRUNBOX_IDLE_TIMEOUT", "stop a sandbox idle this long (e.g. 30m); 0 never",
		func(c *Config, v string) error { return duration(&c.IdleTimeout, v) },
		func(c *Config) string { return c.IdleTimeout.String() }},
	{"stop_timeout", "KRUNBOX_STOP_TIMEOUT", "how long a stop waits for the guest before killing it",
		func(c *Config, v string) error { return duration(&c.StopTimeout, v) },
		func(c *Config) string { return c.StopTimeout.String() }},
	{"start_timeout", "KRUNBOX_START_TIMEOUT", "how long a start waits for the guest to answer before stopping the VM",
		func(c *Config, v string) error {
			if err := duration(&c.StartTimeout, v); err != nil {
				return err
			}
			if c.StartTimeout <= 0 {
				return fmt.Errorf("want a duration above 0, got %q", v)
			}
			return nil
		},
		func(c *Config) string { return c.StartTimeout.String() }},
	{"env", "KRUNBOX_ENV", "KEY=VALUE added to every sandbox (environment: comma-separated)",
		func(c *Config, v string) error {
			c.Env = nil
			for _, e := range strings.Split(v, ",") {
				if e = strings.TrimSpace(e); e == "" {
					continue
				}
				if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
					return fmt.Errorf("want KEY=VALUE, got %q", e)
				}
				c.Env = append(c.Env, e)
			}
			return nil
		},
		func(c *Config) string { return strings.Join(c.Env, ",") }},
	{"root", "KRUNBOX_ROOT", "root file system of new sandboxes: auto (a block root where the host gives one, else an overlay where it allows it, else a copy), block (the guest's writes on a disk of its own, disk_size), overlay or copy",
		func(c *Config, v string) error { return oneOf(&c.Root, v, "auto", "block", "overlay", "copy") },
		func(c *Config) string { return c.Root }},
	{"git_writable", "KRUNBOX_GIT_WRITABLE", "let the guest change the hooks and config your git runs in the workspace's .git (default false: read-only)",
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			c.GitWritable = b
			return nil
		},
		func(c *Config) string { return strconv.FormatBool(c.GitWritable) }},
	{"limits.tcp_connections", "KRUNBOX_LIMIT_TCP_CONNECTIONS", "TCP connections a sandbox's guest may hold at once through krunbox's network stack",
		func(c *Config, v string) error { return count(&c.Limits.TCPConnections, v) },
		func(c *Config) string { return strconv.Itoa(c.Limits.TCPConnections) }},
	{"limits.udp_flows", "KRUNBOX_LIMIT_UDP_FLOWS", "UDP flows a sandbox's guest may hold at once",
		func(c *Config, v string) error { return count(&c.Limits.UDPFlows, v) },
		func(c *Config) string { return strconv.Itoa(c.Limits.UDPFlows) }},
	{"limits.dns_connections", "KRUNBOX_LIMIT_DNS_CONNECTIONS", "DNS-over-TCP connections to a sandbox's DNS server at once",
		func(c *Config, v string) error { return count(&c.Limits.DNSConnections, v) },
		func(c *Config) string { return strconv.Itoa(c.Limits.DNSConnections) }},
	{"limits.dns_queries", "KRUNBOX_LIMIT_DNS_QUERIES", "DNS questions a sandbox's DNS server answers at once",
		func(c *Config, v string) error { return count(&c.Limits.DNSQueries, v) },
		func(c *Config) string { return strconv.Itoa(c.Limits.DNSQueries) }},
	{"limits.connection_buffer", "KRUNBOX_LIMIT_CONNECTION_BUFFER", "bytes one TCP connection buffers each way on the host (e.g. 4MiB)",
		func(c *Config, v string) error {
			var n int64
			if err := size(&n, v); err != nil {
				return err
			}
			if n > 1<<30 {
				return fmt.Errorf("want at most 1GiB, got %q", v)
			}
			c.Limits.ConnectionBuffer = int(n)
			return nil
		},
		func(c *Config) string { return units.BytesSize(float64(c.Limits.ConnectionBuffer)) }},
	{"limits.network_buffer", "KRUNBOX_LIMIT_NETWORK_BUFFER", "bytes all of a sandbox's bulk connections buffer at once (e.g. 64MiB)",
		func(c *Config, v string) error { return size(&c.Limits.NetworkBuffer, v) },
		func(c *Config) string { return units.BytesSize(float64(c.Limits.NetworkBuffer)) }},
	{"limits.log_size", "KRUNBOX_LIMIT_LOG_SIZE", "bytes of each file of a sandbox's console, runner and network logs (one previous file is kept)",
		func(c *Config, v string) error {
			var n int64
			if err := size(&n, v); err != nil {
				return err
			}
			if n < logfile.MinMax {
				return fmt.Errorf("want at least %s, got %q", units.BytesSize(logfile.MinMax), v)
			}
			c.Limits.LogSize = n
			return nil
		},
		func(c *Config) string { return units.BytesSize(float64(c.Limits.LogSize)) }},
}

// Defaults returns the built-in configuration.
func Defaults() *Config {
	c := &Config{
		Image:        "alpine",
		CPUs:         2,
		MemoryMiB:    2048,
		DiskMiB:      16 << 10,
		Network:      "public",
		PullPolicy:   "if-missing",
		StopTimeout:  10 * time.Second,
		StartTimeout: 60 * time.Second,
		Root:         "auto",
		Limits:       defaultLimits(),
		sources:      map[string]string{},
	}
	for _, s := range settings {
		c.sources[s.key] = "default"
	}
	return c
}

func defaultLimits() Limits {
	n := netstack.DefaultLimits()
	return Limits{
		TCPConnections:   n.TCPConns,
		UDPFlows:         n.UDPFlows,
		DNSConnections:   n.DNSConns,
		DNSQueries:       n.DNSQueries,
		ConnectionBuffer: n.ConnBuffer,
		NetworkBuffer:    n.Buffer,
		LogSize:          logfile.DefaultMax,
	}
}

// Load returns the effective configuration: the defaults, overridden by
// dir/config.toml when it exists, overridden by the environment (lookup is
// os.LookupEnv outside tests).
func Load(dir string, lookup func(string) (string, bool)) (*Config, error) {
	c := Defaults()
	path := filepath.Join(dir, FileName)
	if err := c.loadFile(path); err != nil {
		return nil, err
	}
	for _, s := range settings {
		v, ok := lookup(s.env)
		if !ok {
			continue
		}
		if err := s.set(c, strings.TrimSpace(v)); err != nil {
			return nil, fmt.Errorf("environment variable %s: %w", s.env, err)
		}
		c.sources[s.key] = "env " + s.env
	}
	return c, nil
}

func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	var raw map[string]any
	dec := toml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return fmt.Errorf("configuration %s:%d:%d: %s", path, row, col, de.Error())
		}
		return fmt.Errorf("configuration %s: %w", path, err)
	}
	if t, ok := raw[limitsTable]; ok {
		table, ok := t.(map[string]any)
		if !ok {
			return fmt.Errorf("configuration %s: %s: want a table ([%s])", path, limitsTable, limitsTable)
		}
		delete(raw, limitsTable)
		for k, v := range table {
			raw[limitsTable+"."+k] = v
		}
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		i := slices.IndexFunc(settings, func(s setting) bool { return s.key == k })
		if i < 0 {
			return fmt.Errorf("configuration %s: unknown key %q (known: %s)", path, k, strings.Join(Keys(), ", "))
		}
		v, err := fileValue(raw[k])
		if err == nil {
			err = settings[i].set(c, v)
		}
		if err != nil {
			return fmt.Errorf("configuration %s: %s: %w", path, k, err)
		}
		c.sources[k] = path
	}
	return nil
}

// fileValue turns a TOML value into the string form settings parse.
func fileValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case bool:
		return strconv.FormatBool(v), nil
	case []any:
		parts := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("want a list of strings, got %v", v)
			}
			if strings.Contains(s, ",") {
				return "", fmt.Errorf("value %q contains a comma", s)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("unsupported value %v (%T)", v, v)
	}
}

// Set overrides one setting with value, read as an environment variable's
// value is, and records source as where it came from: the layer above the
// environment, such as a command-line flag ("flag --cpus").
func (c *Config) Set(key, value, source string) error {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.key == key })
	if i < 0 {
		return fmt.Errorf("unknown configuration key %q (known: %s)", key, strings.Join(Keys(), ", "))
	}
	if err := settings[i].set(c, strings.TrimSpace(value)); err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	c.sources[key] = source
	return nil
}

// Keys lists the configuration keys.
func Keys() []string {
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return keys
}

// Entry is one effective setting and where its value came from.
type Entry struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
	Env    string `json:"env"`
	Help   string `json:"help"`
}

// Entries lists every setting with its effective value and source:
// "default", the configuration file's path, or "env NAME".
func (c *Config) Entries() []Entry {
	out := make([]Entry, len(settings))
	for i, s := range settings {
		out[i] = Entry{Key: s.key, Value: s.get(c), Source: c.sources[s.key], Env: s.env, Help: s.help}
	}
	return out
}

// ParseMemory parses a memory size such as "2GiB", "512m" or "1.5g" (binary
// units) into MiB. A bare number is in MiB.
func ParseMemory(v string) (int, error) { return parseMiB("memory", v, 128, 1<<22, "2GiB or 512MiB") }

// ParseDiskSize parses a disk size such as "16GiB" or "512m" (binary
// units) into MiB: 256MiB to 16TiB (hostapi.MinDiskMiB, MaxDiskMiB). A
// bare number is in MiB.
func ParseDiskSize(v string) (int, error) {
	return parseMiB("disk size", v, 256, 16<<20, "16GiB or 512MiB")
}

// parseMiB parses a size into MiB, within lo and hi MiB.
func parseMiB(what, v string, lo, hi int64, example string) (int, error) {
	var bytes int64
	if n, err := strconv.Atoi(v); err == nil {
		bytes = int64(n) << 20
	} else if bytes, err = units.RAMInBytes(v); err != nil {
		return 0, fmt.Errorf("%s %q: want a size such as %s", what, v, example)
	}
	mib := bytes >> 20
	if mib < lo || mib > hi {
		return 0, fmt.Errorf("%s %q: want %s to %s", what, v, FormatMemory(int(lo)), formatBig(hi))
	}
	return int(mib), nil
}

// formatBig shows a bound in MiB in TiB when whole.
func formatBig(mib int64) string {
	if mib%(1<<20) == 0 {
		return strconv.FormatInt(mib>>20, 10) + "TiB"
	}
	return FormatMemory(int(mib))
}

// FormatMemory shows a size in MiB the way ParseMemory reads it.
func FormatMemory(mib int) string {
	if mib%1024 == 0 {
		return strconv.Itoa(mib/1024) + "GiB"
	}
	return strconv.Itoa(mib) + "MiB"
}

func oneOf(dst *string, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return fmt.Errorf("want one of %s, got %q", strings.Join(allowed, ", "), v)
	}
	*dst = v
	return nil
}

// count reads a whole number above 0.
func count(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("want a whole number above 0, got %q", v)
	}
	*dst = n
	return nil
}

// size reads a size in bytes above 0, such as 4MiB or 65536 (binary units).
func size(dst *int64, v string) error {
	n, err := units.RAMInBytes(v)
	if err != nil || n < 1 {
		return fmt.Errorf("want a size such as 4MiB or 65536, got %q", v)
	}
	*dst = n
	return nil
}

func duration(dst *time.Duration, v string) error {
	if v == "0" {
		*dst = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration such as 30m or 90s, got %q", v)
	}
	*dst = d
	return nil
}
