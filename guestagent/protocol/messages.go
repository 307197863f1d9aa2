package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Message bodies are JSON objects. A receiver ignores fields it does not
// know, so a newer sender may add optional fields without a new version;
// anything a receiver must understand needs a new protocol version.

// Hello is the host's first frame on a connection (stream 0).
type Hello struct {
	// MinVersion and MaxVersion are the protocol versions the host speaks.
	MinVersion int `json:"min_version"`
	MaxVersion int `json:"max_version"`
	// Client names the host program, for the agent's log.
	Client string `json:"client,omitempty"`
	// Window is the credit the host grants on each agent→host channel of a
	// new stream (0 means DefaultWindow).
	Window uint32 `json:"window,omitempty"`
}

// HelloReply answers Hello. When the two version ranges do not overlap,
// Version is 0 and the agent closes the connection after sending it.
type HelloReply struct {
	// Version is the protocol version chosen for this connection.
	Version int `json:"version"`
	// MinVersion and MaxVersion are the versions the agent speaks.
	MinVersion int `json:"min_version"`
	MaxVersion int `json:"max_version"`
	// AgentVersion is the agent's build version.
	AgentVersion string `json:"agent_version"`
	// Window is the credit the agent grants on each host→agent channel of a
	// new stream (0 means DefaultWindow).
	Window uint32 `json:"window,omitempty"`
	// Boot holds the agent's boot timings.
	Boot BootTimes `json:"boot"`
	// Mounts reports each configured mount and whether it succeeded.
	Mounts []MountStatus `json:"mounts,omitempty"`
	// Warnings are other problems met while starting (a hostname that
	// could not be set), for the host to show the user. A config the agent
	// cannot use is no warning: the agent exits saying why (agents before
	// this rule served with an empty config and reported it here).
	Warnings []string `json:"warnings,omitempty"`
	// Hostname, Arch (a GOARCH) and Kernel (uname release) describe the guest.
	Hostname string `json:"hostname,omitempty"`
	Arch     string `json:"arch,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
	// FileEvents says whether host changes to the shares reach the
	// guest's file watchers (protocol version 2; nil from older agents).
	FileEvents *FileEventsStatus `json:"file_events,omitempty"`
}

// BootTimes are instants on the guest's CLOCK_BOOTTIME, which starts at 0
// when the guest kernel boots.
type BootTimes struct {
	// AgentStart is when the agent's main function began: the time the
	// kernel and libkrun's init took.
	AgentStart time.Duration `json:"agent_start_ns"`
	// Ready is when the agent was listening, mounts done.
	Ready time.Duration `json:"ready_ns"`
}

// MountStatus is the outcome of one configured mount.
type MountStatus struct {
	Mount
	// Error is empty when the mount succeeded.
	Error string `json:"error,omitempty"`
}

// Error codes that are not errno names. Every other Error.Code is the name
// of a Linux errno value, such as "ENOENT".
const (
	CodeProtocol    = "protocol"     // the peer broke the protocol; the connection closes
	CodeCanceled    = "canceled"     // the host cancelled the request
	CodeUnknownUser = "unknown_user" // exec: the user or group is not in the guest's passwd/group
	CodeShutdown    = "shutdown"     // the agent is shutting down
	CodeInternal    = "internal"     // the agent failed in a way no errno describes
)

// Error is the body of an Error frame.
type Error struct {
	// Code classifies the error: an errno name ("ENOENT", "EEXIST",
	// "ENOTDIR", "EACCES", ...) or one of the Code constants.
	Code string `json:"code"`
	// Op is the operation that failed: for a process that could not start,
	// "exec" (not found, not executable), "chdir" (bad working directory)
	// or "user" (bad user); for files, the file operation.
	Op string `json:"op,omitempty"`
	// Path is the file, directory, program or user concerned.
	Path string `json:"path,omitempty"`
	// Message is a human-readable description.
	Message string `json:"message"`
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteByte(' ')
	}
	if e.Path != "" {
		fmt.Fprintf(&b, "%s: ", e.Path)
	}
	b.WriteString(e.Message)
	return b.String()
}

// WindowSize is a terminal size, the body of a Resize frame.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Validate implements Request.
func (w *WindowSize) Validate() error {
	if w.Rows == 0 || w.Cols == 0 {
		return fmt.Errorf("window size %dx%d: rows and cols must be positive", w.Rows, w.Cols)
	}
	return nil
}

// ExecRequest starts a process. Its stream then carries stdin on ChanIn,
// stdout on ChanOut and stderr on ChanErr (with a terminal, everything on
// ChanOut), Signal and Resize frames from the host, and ExecStarted and
// ExecExit (or Error) from the agent.
type ExecRequest struct {
	// Argv is the program and its arguments. A program without a slash is
	// looked up in PATH of the process's environment.
	Argv []string `json:"argv"`
	// Env entries (KEY=VALUE) override the defaults (PATH, HOME, USER,
	// LOGNAME, TERM with a terminal, and the boot config's env). Nothing
	// comes from the agent's own environment.
	Env []string `json:"env,omitempty"`
	// Dir is the working directory; empty means the boot config's workdir,
	// or "/".
	Dir string `json:"dir,omitempty"`
	// User is a user name or uid, optionally with ":group" (name or gid),
	// resolved in the guest's /etc/passwd and /etc/group; empty means the
	// boot config's user, or the agent's own.
	User string `json:"user,omitempty"`
	// TTY, when set, runs the process on a new pseudo-terminal of this size.
	TTY *WindowSize `json:"tty,omitempty"`
	// Stdin says the host will send stdin; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// Timeout, when positive, kills the process group that long after start.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Main makes the process the sandbox's main command ("krunbox run"):
	// it outlives its connection (when the connection ends, its stdin is
	// closed and its output goes to the agent's console), and when it
	// exits the agent shuts down, which stops the VM. A Cancel frame still
	// kills it.
	Main bool `json:"main,omitempty"`
	// Detach, with Main, leaves the process to the agent from the start:
	// ExecStarted ends the stream, and its output goes to the console.
	// It takes neither stdin nor a terminal.
	Detach bool `json:"detach,omitempty"`
}

// Validate implements Request.
func (r *ExecRequest) Validate() error {
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return errors.New("exec: empty argv")
	}
	for _, s := range append(append([]string(nil), r.Argv...), r.Env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return errors.New("exec: NUL byte in argv or env")
		}
	}
	for _, e := range r.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("exec: env entry %q is not KEY=VALUE", e)
		}
	}
	if r.TTY != nil {
		if err := r.TTY.Validate(); err != nil {
			return err
		}
	}
	if r.Timeout < 0 {
		return errors.New("exec: negative timeout")
	}
	if r.Detach && (!r.Main || r.Stdin || r.TTY != nil) {
		return errors.New("exec: detach is for a main command without stdin or terminal")
	}
	return nil
}

// ExecStarted tells the host the process runs.
type ExecStarted struct {
	Pid int `json:"pid"`
}

// ExecExit is the last frame of an exec stream, sent after the output
// channels' EOF.
type ExecExit struct {
	// Code is the exit status, or 128+N for a process killed by signal N.
	Code int `json:"code"`
	// Signal is the name of the signal that killed the process ("SIGKILL"),
	// empty when it exited.
	Signal string `json:"signal,omitempty"`
	// CoreDumped is set when the kill dumped core.
	CoreDumped bool `json:"core_dumped,omitempty"`
	// TimedOut is set when the agent killed the group for the timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Shutdown is set when the process ended while the agent was shutting
	// down (the sandbox stopping), which terminates every process.
	Shutdown bool `json:"shutdown,omitempty"`
}

// SignalRequest sends a signal to an exec's process group.
type SignalRequest struct {
	// Signal is a signal name such as "SIGTERM" (or "TERM").
	Signal string `json:"signal"`
}

// Validate implements Request.
func (r *SignalRequest) Validate() error {
	if r.Signal == "" {
		return errors.New("signal: no signal name")
	}
	return nil
}

// PathRequest names one file: the body of Stat, ReadDir and Readlink.
// Relative paths are resolved against the boot config's workdir (or "/").
type PathRequest struct {
	Path string `json:"path"`
	// NoFollow makes Stat describe a symbolic link itself (lstat).
	NoFollow bool `json:"no_follow,omitempty"`
}

// Validate implements Request.
func (r *PathRequest) Validate() error { return checkPath("path", r.Path) }

// ReadFileRequest reads a file. The agent answers with Reply{FileInfo},
// then the content as Data on ChanOut, then EOF with FlagEnd (or Error).
type ReadFileRequest struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	// Limit, when positive, stops after that many bytes.
	Limit int64 `json:"limit,omitempty"`
}

// Validate implements Request.
func (r *ReadFileRequest) Validate() error {
	if r.Offset < 0 || r.Limit < 0 {
		return errors.New("read: negative offset or limit")
	}
	return checkPath("path", r.Path)
}

// WriteFileRequest writes a file from the Data the host sends on ChanIn
// until EOF. By default the content goes to a temporary file in the same
// directory that replaces the target by rename when complete, so readers
// never see a partial file, and a failed or cancelled write leaves the old
// file as it was. Writing to a symbolic link replaces the file it points to.
type WriteFileRequest struct {
	Path string `json:"path"`
	// Mode is the permission bits (with setuid, setgid, sticky) of the file;
	// nil means 0644. The process umask does not apply.
	Mode *uint32 `json:"mode,omitempty"`
	// KeepMode keeps an existing file's permission bits: Mode then applies
	// to a new file only.
	KeepMode bool `json:"keep_mode,omitempty"`
	// MkdirAll creates missing parent directories (mode 0755).
	MkdirAll bool `json:"mkdir_all,omitempty"`
	// Append writes at the end of the file, in place.
	Append bool `json:"append,omitempty"`
	// Exclusive fails with EEXIST when the file exists; it writes in place.
	Exclusive bool `json:"exclusive,omitempty"`
	// InPlace truncates and writes the file itself rather than replacing it
	// (keeps its inode, hard links and ownership; readers may see a partial
	// file).
	InPlace bool `json:"in_place,omitempty"`
	// Sync flushes the file (and, for a replace, its directory) to stable
	// storage before answering.
	Sync bool `json:"sync,omitempty"`
}

// Validate implements Request.
func (r *WriteFileRequest) Validate() error {
	if r.Mode != nil {
		if err := checkMode("write", *r.Mode); err != nil {
			return err
		}
	}
	return checkPath("path", r.Path)
}

// WriteFileResult answers a completed WriteFileRequest.
type WriteFileResult struct {
	Written int64 `json:"written"`
}

// FileInfo describes a file, as lstat or stat sees it.
type FileInfo struct {
	// Name is the base name (for ReadDir) or the path asked for.
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Mode is st_mode: the S_IFMT type bits and the permission bits.
	Mode uint32 `json:"mode"`
	// ModTime is the modification time in nanoseconds since the epoch.
	ModTime int64  `json:"mtime_ns"`
	Uid     uint32 `json:"uid"`
	Gid     uint32 `json:"gid"`
	Nlink   uint64 `json:"nlink,omitempty"`
	Ino     uint64 `json:"ino,omitempty"`
	// Target is a symbolic link's target (ReadDir and lstat only).
	Target string `json:"target,omitempty"`
}

// MkdirRequest creates a directory.
type MkdirRequest struct {
	Path string `json:"path"`
	// Mode is the permission bits; the process umask applies, as for mkdir(2).
	Mode uint32 `json:"mode"`
	// All creates missing parents and succeeds if the directory exists.
	All bool `json:"all,omitempty"`
}

// Validate implements Request.
func (r *MkdirRequest) Validate() error {
	if err := checkMode("mkdir", r.Mode); err != nil {
		return err
	}
	return checkPath("path", r.Path)
}

// RemoveRequest removes a file or an empty directory.
type RemoveRequest struct {
	Path string `json:"path"`
	// All removes a directory with its content and succeeds when the path
	// does not exist, like os.RemoveAll.
	All bool `json:"all,omitempty"`
}

// Validate implements Request.
func (r *RemoveRequest) Validate() error {
	if r.All && (r.Path == "/" || r.Path == "") {
		return errors.New("remove: refusing to remove / recursively")
	}
	return checkPath("path", r.Path)
}

// RenameRequest renames (moves) OldPath to NewPath, replacing NewPath.
type RenameRequest struct {
	OldPath string `json:"old_path"`
	NewPath string `json:"new_path"`
}

// Validate implements Request.
func (r *RenameRequest) Validate() error {
	if err := checkPath("old_path", r.OldPath); err != nil {
		return err
	}
	return checkPath("new_path", r.NewPath)
}

// SymlinkRequest creates NewPath as a symbolic link to Target.
type SymlinkRequest struct {
	Target  string `json:"target"`
	NewPath string `json:"new_path"`
}

// Validate implements Request.
func (r *SymlinkRequest) Validate() error {
	if r.Target == "" || strings.IndexByte(r.Target, 0) >= 0 {
		return errors.New("symlink: empty target or NUL byte in it")
	}
	return checkPath("new_path", r.NewPath)
}

// ReadlinkResult answers a Readlink request.
type ReadlinkResult struct {
	Target string `json:"target"`
}

// ChmodRequest changes a file's permission bits (following symlinks).
type ChmodRequest struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
}

// Validate implements Request.
func (r *ChmodRequest) Validate() error {
	if err := checkMode("chmod", r.Mode); err != nil {
		return err
	}
	return checkPath("path", r.Path)
}

// ShutdownRequest asks the agent to stop the VM.
type ShutdownRequest struct {
	// Grace is how long processes get between SIGTERM and SIGKILL
	// (0 means DefaultShutdownGrace).
	Grace time.Duration `json:"grace_ns,omitempty"`
}

// Validate implements Request.
func (r *ShutdownRequest) Validate() error {
	if r.Grace < 0 {
		return errors.New("shutdown: negative grace period")
	}
	return nil
}

// DefaultShutdownGrace is how long a shutdown waits for processes to exit
// after SIGTERM before it kills them.
const DefaultShutdownGrace = 5 * time.Second

// Health answers a Health request.
type Health struct {
	// Uptime is the guest's CLOCK_BOOTTIME now.
	Uptime time.Duration `json:"uptime_ns"`
	Boot   BootTimes     `json:"boot"`
	// Load is the 1, 5 and 15 minute load averages.
	Load [3]float64 `json:"load"`
	// Memory is from /proc/meminfo, in bytes.
	Memory MemoryStats `json:"memory"`
	// Disk is the file system of the guest's /.
	Disk DiskStats `json:"disk"`
	// Processes is the number of processes the agent started that still run.
	Processes    int    `json:"processes"`
	AgentVersion string `json:"agent_version"`
}

// MemoryStats are guest memory figures, in bytes.
type MemoryStats struct {
	Total     uint64 `json:"total"`
	Available uint64 `json:"available"`
	Free      uint64 `json:"free"`
}

// DiskStats are a file system's figures, in bytes.
type DiskStats struct {
	Path      string `json:"path"`
	Total     uint64 `json:"total"`
	Free      uint64 `json:"free"`
	Available uint64 `json:"available"`
}

// Request is a message body that can check its own fields.
type Request interface {
	Validate() error
}

// ErrMalformed wraps the error for a body that is not the JSON object its
// frame type calls for: the peer is broken, and the connection closes.
var ErrMalformed = errors.New("malformed message body")

// ErrInvalid wraps the error for a well-formed request whose fields make no
// sense (an empty argv, a mode with bits beyond 07777): the request fails with EINVAL.
var ErrInvalid = errors.New("invalid request")

// Decode decodes a JSON body into v and validates it when v is a Request.
// Unknown fields are ignored. Errors wrap ErrMalformed or ErrInvalid.
func Decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: %T: %v", ErrMalformed, v, err)
	}
	if r, ok := v.(Request); ok {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// Encode encodes a message body.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Every message type is plain data; this is a programming error.
		panic(fmt.Sprintf("protocol: encode %T: %v", v, err))
	}
	return b
}

// checkMode refuses mode bits beyond permissions, setuid, setgid, sticky.
func checkMode(op string, mode uint32) error {
	if mode&^0o7777 != 0 {
		return fmt.Errorf("%s: mode %#o has bits beyond 07777", op, mode)
	}
	return nil
}

// MaxPath bounds the paths of requests, as Linux's PATH_MAX does.
const MaxPath = 4096

func checkPath(field, p string) error {
	if p == "" {
		return fmt.Errorf("empty %s", field)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("NUL byte in %s", field)
	}
	if len(p) > MaxPath {
		return fmt.Errorf("%s longer than %d bytes", field, MaxPath)
	}
	return nil
}
