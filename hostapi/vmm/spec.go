package vmm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/krunbox/krunbox/hostapi/internal/fileevents"
	"github.com/krunbox/krunbox/internal/atomicfile"
	"github.com/krunbox/krunbox/internal/confine"
	"github.com/krunbox/krunbox/internal/logfile"
	"github.com/krunbox/krunbox/internal/netpolicy"
	"github.com/krunbox/krunbox/internal/netstack"
	"github.com/krunbox/krunbox/internal/secrets"
	"github.com/krunbox/krunbox/krun"
)

// Spec describes one VM: what the runner configures libkrun with. It is
// stored as JSON in the VM's directory ([SpecFile]).
type Spec struct {
	// VCPUs is the number of virtual CPUs; 0 means 1.
	VCPUs uint8 `json:"vcpus,omitempty"`
	// MemoryMiB is the guest memory; 0 means libkrun's default, 128 MiB.
	MemoryMiB uint32 `json:"memory_mib,omitempty"`
	// Root is the guest root filesystem.
	Root Root `json:"root"`
	// Shares are host directories shared with the guest over virtio-fs.
	// The guest mounts them itself (the agent does, from its config).
	Shares []Share `json:"shares,omitempty"`
	// Protect are paths within Shares that the runner mounts over
	// themselves in its mount namespace before the VM starts, where the
	// guest's share sees them and the guest cannot undo them: read-only,
	// or read-write to pin them in place (a mount point cannot be renamed
	// or removed). They are mounted in order, so a parent comes before
	// what it holds. A runner without its mount namespace refuses to start
	// with any (see ProtectsPaths).
	Protect []Protect `json:"protect,omitempty"`
	// FileEvents, when set, makes the runner watch shares on the host and
	// deliver their changes to the guest agent, for the guest's file
	// watchers (package fileevents). Protect's paths are not watched.
	FileEvents *FileEvents `json:"file_events,omitempty"`
	// Exec is the program libkrun's init runs in the guest.
	Exec Exec `json:"exec"`
	// Workdir is the program's working directory in the guest; libkrun
	// ignores one that does not exist. No spaces.
	Workdir string `json:"workdir,omitempty"`
	// Rlimits are resource limits applied in the guest before Exec.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Vsock maps guest vsock ports to host unix sockets.
	Vsock []VsockPort `json:"vsock,omitempty"`
	// Network is the guest network: "tsi" (the default here), "none",
	// or one of the modes of krunbox's network stack: "public", "open",
	// "allow=RULE,..." (package netpolicy).
	Network Network `json:"network,omitempty"`
	// NetLimits bound what the guest makes the runner's network stack
	// hold (connections, flows, DNS, buffers); zero fields mean their
	// defaults ([netstack.DefaultLimits]). Only krunbox's stack has them.
	NetLimits netstack.Limits `json:"net_limits,omitzero"`
	// PortMap publishes guest ports on the host: through libkrun under
	// TSI, through the runner's network stack otherwise.
	PortMap []PortMapping `json:"port_map,omitempty"`
	// ConsoleLog is the host file receiving the VM's console: kernel and
	// init messages and the program's stdout and stderr.
	ConsoleLog string `json:"console_log,omitempty"`
	// LogLevel is libkrun's log level (written to the runner's log,
	// [LogFile]); 0 leaves libkrun's logger off.
	LogLevel krun.LogLevel `json:"log_level,omitempty"`
	// LogMax bounds each file of the logs the guest can make grow: the
	// console (ConsoleLog), the runner's log ([LogFile]) and the network
	// refusals ([NetLogFile]). A log whose file would pass it is rotated
	// into one previous file (package logfile: NAME.1), so a log takes at
	// most twice LogMax and always ends with the latest output. 0 means
	// [logfile.DefaultMax]; at least [logfile.MinMax].
	LogMax int64 `json:"log_max,omitempty"`
	// Files are placed into the guest without modifying the image: as
	// libkrun overlay files where the library has them (libkrun 1.19),
	// else written into the sandbox's writable root.
	Files []File `json:"files,omitempty"`
	// Secrets are the sandbox's secrets with their placeholders, never
	// their values: the runner's network stack intercepts their hosts with
	// secrets.Load(the VM's directory, Secrets), which reads the values
	// from their sources and the CA from the directory at each start.
	Secrets []secrets.Placed `json:"secrets,omitempty"`
	// Library is the libkrun file to load; empty means the default search
	// (krun.Candidates: KRUNBOX_LIBKRUN, a libkrun installed with the
	// runner's executable, $KRUNBOX_HOME/lib, the system's loader), made by
	// the runner, which is the same executable as its caller.
	Library string `json:"library,omitempty"`
}

// logMax is the bound of each log file.
func (s *Spec) logMax() int64 {
	if s.LogMax == 0 {
		return logfile.DefaultMax
	}
	return s.LogMax
}

// Root is the guest root filesystem: either Dir, used as it is (the guest
// writes into it), or an overlay of the read-only Lower tree, the image
// cache shared between sandboxes, with this VM's writes going to Upper, or
// a block root: the read-only Image tree and a Disk that the guest agent
// mounts and overlays on it in the guest, so the guest's writes reach only
// the disk image (see [Root.IsBlock]).
type Root struct {
	// Dir is a plain directory used as the root.
	Dir string `json:"dir,omitempty"`

	// Lower is the read-only image tree. It is never written to.
	Lower string `json:"lower,omitempty"`
	// Upper receives the guest's changes; it persists across restarts.
	Upper string `json:"upper,omitempty"`
	// Work is overlayfs's work directory, on Upper's filesystem.
	Work string `json:"work,omitempty"`
	// Merged is where the runner mounts the overlay, in its own mount
	// namespace; it stays an empty directory on the host.
	Merged string `json:"merged,omitempty"`

	// Image is a block root's image tree, shared read-only as the guest's
	// "/" (krun_add_virtiofs3): the lower layer of the guest's overlay.
	Image string `json:"image,omitempty"`
	// Disk is a block root's disk: a raw image holding a file system,
	// the guest's /dev/vda, read-write. The runner opens it without
	// following a symlink and refuses anything but a regular file of
	// DiskSize bytes; the host never mounts or reads what it holds.
	Disk string `json:"disk,omitempty"`
	// DiskSize is the size of Disk in bytes, a multiple of 512.
	DiskSize int64 `json:"disk_size,omitempty"`
}

// IsOverlay reports whether the root is an overlay mounted by the runner
// rather than a plain directory.
func (r Root) IsOverlay() bool { return r.Lower != "" }

// IsBlock reports whether the root is a block root: the guest agent
// mounts Disk and assembles the overlay over Image in the guest.
func (r Root) IsBlock() bool { return r.Disk != "" }

// Path is the directory libkrun serves as the root: Merged, Image or Dir.
func (r Root) Path() string {
	switch {
	case r.IsOverlay():
		return r.Merged
	case r.IsBlock():
		return r.Image
	}
	return r.Dir
}

// Share is a host directory shared with the guest.
type Share struct {
	// Tag names the share for the guest's mount: 1 to 36 bytes.
	Tag string `json:"tag"`
	// HostPath is the shared host directory: an absolute path with no
	// symlink in any component (resolve it first), or the runner refuses
	// to share it, since a symlink there may have been planted by whoever
	// can write its parent.
	HostPath string `json:"host_path"`
	// ReadOnly makes the share read-only (libkrun 1.18 or later).
	ReadOnly bool `json:"read_only,omitempty"`
	// Cached keeps libkrun's default caching of the share (entries and
	// attributes for krun.DefaultShareTimeout): faster metadata, but the
	// guest may see a host change that late. Otherwise the share is
	// coherent (krun.Coherent): the guest sees each host change at its next
	// access, where the library can do it (krun.ShareCacheFunc).
	Cached bool `json:"cached,omitempty"`
}

// FileEvents says which shares the runner watches, and how to reach the
// guest agent that takes their changes.
type FileEvents struct {
	// Socket is the host end of the agent's vsock port (one of Vsock).
	Socket string `json:"socket"`
	// Shares are the shares to watch (some of Shares) and their guest
	// mount points.
	Shares []fileevents.Share `json:"shares"`
	// Limits bound the watcher; zero fields mean their defaults.
	Limits fileevents.Limits `json:"limits,omitzero"`
}

// Protect is a host path, a directory or a regular file within a share,
// that the guest may not replace, nor write unless Writable.
type Protect struct {
	// Path is absolute, clean and without symlinks; the runner refuses
	// one that has any.
	Path string `json:"path"`
	// Writable pins Path without making it read-only.
	Writable bool `json:"writable,omitempty"`
}

// Exec is the program the guest runs.
type Exec struct {
	// Path is the program inside the guest, absolute or looked up in the
	// guest PATH. No spaces.
	Path string `json:"path"`
	// Args are its arguments, without argv[0].
	Args []string `json:"args,omitempty"`
	// Env is its whole environment, KEY=VALUE entries: short and
	// explicit, since libkrun passes it on the kernel command line.
	Env []string `json:"env,omitempty"`
}

// Rlimit is a guest resource limit.
type Rlimit struct {
	// Resource is the limit's name, as in prlimit(1): "nofile", "nproc",
	// "core", "stack", "memlock", "as", ...
	Resource string `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// rlimitIDs are the Linux RLIMIT_* numbers of the guest (asm-generic, the
// same on x86_64 and arm64); libkrun's init wants numbers.
var rlimitIDs = map[string]int{
	"cpu": 0, "fsize": 1, "data": 2, "stack": 3, "core": 4, "rss": 5, "nproc": 6,
	"nofile": 7, "memlock": 8, "as": 9, "locks": 10, "sigpending": 11, "msgqueue": 12,
	"nice": 13, "rtprio": 14, "rttime": 15,
}

// VsockPort maps a guest vsock port to a host unix socket.
type VsockPort struct {
	Port uint32 `json:"port"`
	// HostPath is the host unix socket.
	HostPath string `json:"host_path"`
	// Listen true: libkrun listens on HostPath and each host connection
	// reaches the guest listening on Port. Listen false: the guest
	// connects to Port and libkrun connects to a host listener on
	// HostPath.
	Listen bool `json:"listen,omitempty"`
}

// Network selects the guest's network.
type Network string

// Networks.
const (
	// NetworkTSI gives the guest the host's network identity through
	// libkrun's Transparent Socket Impersonation (the default).
	NetworkTSI Network = "tsi"
	// NetworkNone gives the guest no network at all; vsock ports still
	// work (krun_disable_implicit_vsock + krun_add_vsock(ctx, 0)).
	NetworkNone Network = "none"
	// NetworkPublic gives the guest the internet through the runner's
	// network stack, but no private, loopback, link-local, multicast or
	// host address.
	NetworkPublic Network = "public"
	// NetworkOpen gives the guest everything through the runner's
	// network stack, the LAN and the host's loopback included.
	NetworkOpen Network = "open"
)

// Policy parses the network setting.
func (n Network) Policy() (netpolicy.Spec, error) {
	if n == "" {
		return netpolicy.Spec{Mode: netpolicy.TSI}, nil
	}
	return netpolicy.Parse(string(n))
}

// PortMapping exposes a guest TCP port on a host port.
type PortMapping struct {
	// HostIP is the host address listened on: 127.0.0.1 when empty.
	// Under TSI libkrun chooses, and HostIP must be empty.
	HostIP string `json:"host_ip,omitempty"`
	Host   uint16 `json:"host"`
	Guest  uint16 `json:"guest"`
}

// File is a file placed into the guest. Its directories are krunbox's:
// when it is written into the root, anything in their place that is not a
// directory (a symlink the image or the guest planted) is replaced.
type File struct {
	// Path is the absolute path in the guest, such as
	// "/.krunbox/krunbox-agent".
	Path string `json:"path"`
	// Mode is the permission bits, such as 0o755.
	Mode os.FileMode `json:"mode"`
	// Source is a host file holding the content, read when the VM
	// starts; or
	Source string `json:"source,omitempty"`
	// Data is the content itself, for small files.
	Data []byte `json:"data,omitempty"`
}

// Limits of what fits on the guest kernel command line, through which
// libkrun passes the program, its arguments and environment: the guest
// kernel reads at most 32 environment entries and 32 arguments for init
// (it adds some of its own) and a command line of 2 KiB on arm64.
const (
	MaxEnv         = 24
	MaxArgs        = 24
	MaxCommandLine = 1536
)

// Validate checks the spec, saying what is wrong and how to fix it.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	abs := func(what, p string) {
		if !filepath.IsAbs(p) {
			bad("%s %q: want an absolute path", what, p)
		}
	}

	r := s.Root
	kinds := 0
	for _, set := range []bool{r.Dir != "", r.IsOverlay(), r.IsBlock() || r.Image != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		bad("root: set one of dir, lower/upper/work/merged and image/disk, not several")
	case r.IsBlock() || r.Image != "":
		abs("root image", r.Image)
		abs("root disk", r.Disk)
		if r.DiskSize <= 0 || r.DiskSize%512 != 0 {
			bad("root disk size %d: want a positive multiple of 512 bytes", r.DiskSize)
		}
	case r.Dir != "":
		abs("root dir", r.Dir)
	case r.IsOverlay():
		for _, p := range []struct{ what, p string }{{"root lower", r.Lower}, {"root upper", r.Upper}, {"root work", r.Work}, {"root merged", r.Merged}} {
			abs(p.what, p.p)
			if strings.ContainsAny(p.p, ",:\\") {
				bad("%s %q: overlayfs cannot take ',', ':' or '\\' in a path", p.what, p.p)
			}
		}
	default:
		bad("root: no directory")
	}

	tags := map[string]bool{}
	for _, sh := range s.Shares {
		if sh.Tag == "" || len(sh.Tag) > krun.MaxTagLen || sh.Tag == krun.RootTag {
			bad("share tag %q: want 1 to %d bytes, not %q", sh.Tag, krun.MaxTagLen, krun.RootTag)
		}
		if tags[sh.Tag] {
			bad("share tag %q used twice", sh.Tag)
		}
		tags[sh.Tag] = true
		abs("share "+sh.Tag, sh.HostPath)
	}

	for _, p := range s.Protect {
		if !filepath.IsAbs(p.Path) || filepath.Clean(p.Path) != p.Path {
			bad("protected path %q: want a clean absolute path", p.Path)
			continue
		}
		if !slices.ContainsFunc(s.Shares, func(sh Share) bool { return confine.Within(sh.HostPath, p.Path) }) {
			bad("protected path %s: not within a share", p.Path)
		}
	}

	if fe := s.FileEvents; fe != nil {
		abs("file events socket", fe.Socket)
		for _, w := range fe.Shares {
			// Only what the guest mounts is watched.
			if !slices.ContainsFunc(s.Shares, func(sh Share) bool { return sh.HostPath == w.HostPath }) {
				bad("file events: %s is not a share", w.HostPath)
			}
			if !filepath.IsAbs(w.GuestPath) || filepath.Clean(w.GuestPath) != w.GuestPath {
				bad("file events: guest path %q: want a clean absolute path", w.GuestPath)
			}
		}
	}

	cmdline := 0
	if s.Exec.Path == "" {
		bad("exec: no program")
	}
	if strings.ContainsAny(s.Exec.Path, " \t\n\"") {
		bad("exec path %q: libkrun cannot pass spaces or '\"' here", s.Exec.Path)
	}
	if len(s.Exec.Args) > MaxArgs {
		bad("exec: %d arguments, at most %d fit on the guest kernel command line; pass more through a file", len(s.Exec.Args), MaxArgs)
	}
	if len(s.Exec.Env) > MaxEnv {
		bad("exec: %d environment entries, at most %d fit on the guest kernel command line; pass more through a file", len(s.Exec.Env), MaxEnv)
	}
	for _, a := range s.Exec.Args {
		if strings.ContainsAny(a, "\"\n") {
			bad("exec argument %q: libkrun cannot pass '\"' or newlines", a)
		}
		cmdline += len(a) + 3
	}
	for _, e := range s.Exec.Env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.ContainsAny(k, ". \t") || strings.ContainsAny(e, "\"\n") {
			bad("environment entry %q: want KEY=VALUE, no '.' or space in KEY, no '\"' or newline", e)
		}
		cmdline += len(e) + 3
	}
	if cmdline+len(s.Exec.Path)+len(s.Workdir) > MaxCommandLine {
		bad("exec: arguments and environment take %d bytes, at most %d fit on the guest kernel command line", cmdline, MaxCommandLine)
	}
	if s.Workdir != "" && (!strings.HasPrefix(s.Workdir, "/") || strings.ContainsAny(s.Workdir, " \t\n\"")) {
		bad("workdir %q: want an absolute guest path without spaces", s.Workdir)
	}

	if s.LogMax != 0 && s.LogMax < logfile.MinMax {
		bad("log max %d: want 0 (the default, %d) or at least %d bytes", s.LogMax, logfile.DefaultMax, logfile.MinMax)
	}

	for _, rl := range s.Rlimits {
		if _, ok := rlimitIDs[rl.Resource]; !ok {
			bad("rlimit %q: unknown resource", rl.Resource)
		}
		if rl.Cur > rl.Max {
			bad("rlimit %s: cur %d above max %d", rl.Resource, rl.Cur, rl.Max)
		}
	}

	ports := map[uint32]bool{}
	for _, v := range s.Vsock {
		if ports[v.Port] {
			bad("vsock port %d mapped twice", v.Port)
		}
		ports[v.Port] = true
		abs(fmt.Sprintf("vsock port %d", v.Port), v.HostPath)
	}

	np, err := s.Network.Policy()
	if err != nil {
		bad("%v", err)
	}
	if err := s.NetLimits.Validate(); err != nil {
		bad("%v", err)
	}
	hostPorts, guestPorts := map[uint16]bool{}, map[uint16]bool{}
	for _, pm := range s.PortMap {
		if np.Mode == netpolicy.None {
			bad("port map: needs a network")
			break
		}
		if pm.HostIP != "" {
			if np.Mode == netpolicy.TSI {
				bad("port map %s:%d:%d: a host address needs a network other than tsi", pm.HostIP, pm.Host, pm.Guest)
			} else if _, err := netip.ParseAddr(pm.HostIP); err != nil {
				bad("port map: host address %q: %v", pm.HostIP, err)
			}
		}
		if hostPorts[pm.Host] || guestPorts[pm.Guest] {
			bad("port map %d:%d: host or guest port mapped twice", pm.Host, pm.Guest)
		}
		hostPorts[pm.Host], guestPorts[pm.Guest] = true, true
	}

	if s.ConsoleLog != "" {
		abs("console log", s.ConsoleLog)
	}
	for _, sec := range s.Secrets {
		if err := sec.Validate(); err != nil {
			bad("%v", err)
		}
		if !secrets.ValidPlaceholder(sec.Placeholder) {
			bad("secret %s: no valid placeholder", sec.Name)
		}
	}
	seen := map[string]bool{}
	for _, f := range s.Files {
		if !strings.HasPrefix(f.Path, "/") || filepath.Clean(f.Path) != f.Path || f.Path == "/" {
			bad("file %q: want a clean absolute guest path", f.Path)
		}
		if seen[f.Path] {
			bad("file %q placed twice", f.Path)
		}
		seen[f.Path] = true
		if (f.Source == "") == (f.Data == nil) {
			bad("file %q: set exactly one of source and data", f.Path)
		}
		if f.Source != "" {
			abs("file source", f.Source)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid VM spec: %w", err)
	}
	return nil
}

// krunRlimits converts the limits to libkrun's numeric form.
func (s *Spec) krunRlimits() []krun.Rlimit {
	out := make([]krun.Rlimit, len(s.Rlimits))
	for i, rl := range s.Rlimits {
		out[i] = krun.Rlimit{Resource: rlimitIDs[rl.Resource], Cur: rl.Cur, Max: rl.Max}
	}
	return out
}

// portMap converts the port map to libkrun's "host:guest" entries.
func (s *Spec) portMap() []string {
	out := make([]string, len(s.PortMap))
	for i, pm := range s.PortMap {
		out[i] = strconv.Itoa(int(pm.Host)) + ":" + strconv.Itoa(int(pm.Guest))
	}
	return out
}

// WriteSpec validates s and stores it in dir, atomically.
func WriteSpec(dir string, s *Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode VM spec: %w", err)
	}
	return atomicfile.Write(filepath.Join(dir, SpecFile), append(data, '\n'), 0o600)
}

// ReadSpec reads and validates the spec stored in dir.
func ReadSpec(dir string) (*Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, SpecFile))
	if err != nil {
		return nil, fmt.Errorf("read VM spec: %w", err)
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("read VM spec %s: %w", filepath.Join(dir, SpecFile), err)
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}
