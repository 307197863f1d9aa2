// Package protocol defines the wire protocol between the krunbox host and
// the guest agent, and the agent's boot configuration. The host side
// (hostapi) imports this package and nothing else of the agent's.
//
// # Transport and boot
//
// The agent listens on vsock port Config.Port (DefaultPort); libkrun maps
// it to a unix socket on the host. Before boot the host writes the agent to
// AgentPath and its Config, as JSON, to ConfigPath in the sandbox's root;
// libkrun's init runs "AgentPath --config ConfigPath". Nothing goes on the
// kernel command line.
//
// # Frames
//
// Both directions carry frames: a fixed 12-byte header (see Header: body
// length, stream id, type, flags, channel) and a body of at most MaxBody
// (4 MiB). Bodies are JSON objects, except Data (raw bytes) and Credit (a
// 4-byte big-endian count). A frame that cannot be read (a length over
// MaxBody, a body cut short), an unknown type, a body that is not the JSON
// its type calls for, or a frame that breaks the rules below is a protocol
// error: the receiver sends Error on stream 0 (the agent does), closes that
// connection, and nothing else is affected. Neither side panics on input.
//
// # Hello and versions
//
// The host's first frame is Hello on stream 0, with the range of versions
// it speaks and the window it grants. The agent answers HelloReply with the
// highest version both speak (or 0 and a close when there is none), its
// own range, its version, its window, its boot timings (CLOCK_BOOTTIME at
// the start of its main, and when it was ready), each mount's outcome and
// other warnings. A host that cannot use the agent's range reports both
// ranges to the user.
//
// Compatibility rules: a receiver ignores JSON fields it does not know, so
// optional fields are added freely. Every type records the version that
// introduced it (Type.Since); a sender never sends a type newer than the
// negotiated version, so a new host falls back, feature by feature, for an
// old agent still running in a VM, and a new type gets a new version. The
// header layout and the Hello exchange never change.
//
// # Streams
//
// Stream 0 is the connection. The host opens every other stream by sending
// a request (a type for which Type.IsRequest is true) on a new id, larger
// than any before on the connection; the agent ends it with a frame
// carrying FlagEnd, after which the id is dead. Frames that arrive for a
// stream that ended are ignored (they crossed on the way); frames for a
// stream never opened are a protocol error. Many streams run at once on
// one connection; the host may also use several connections.
//
// A request the agent can decode but not accept (an empty argv, a bad
// mode) ends with Error{Code: "EINVAL"}; a failed operation ends with an
// Error whose Code is the errno name ("ENOENT", "EEXIST", "ENOTDIR",
// "EACCES", ...) or one of the Code constants. The host may send Cancel on
// any stream: the agent kills an exec's process group, abandons a transfer
// (a write leaves the old file), and ends the stream. When a connection
// closes, every stream on it is cancelled.
//
// # Data and flow control
//
// Byte streams travel as Data frames on a stream's channels (ChanIn from
// the host; ChanOut and ChanErr from the agent), at most MaxChunk bytes
// each, and end with EOF. Each channel has a window: at the start of a
// stream the sender may send as many bytes as the receiver's hello
// announced (Window, default DefaultWindow); the receiver sends Credit
// frames as its reader consumes data. Sending beyond the credit is a
// protocol error. So a reader that is slow makes the sender wait, which
// for process output means the process blocks on its pipe; memory stays
// bounded by one window per channel on each side; and one slow channel
// never stalls another, nor the other streams of the connection.
//
// # Requests
//
// Ping: Reply (empty) with FlagEnd. Health: Reply{Health}. Neither counts
// as activity for Config.IdleTimeout.
//
// Shutdown{ShutdownRequest}: the agent sends SIGTERM to every process
// group it started, SIGKILL to what is left after the grace period, syncs,
// answers Reply, and exits 0, which stops the VM.
//
// Exec{ExecRequest}: the agent answers ExecStarted{pid} or, when the
// process cannot start, Error with Op "exec" (not found: ENOENT, not
// executable: EACCES or ENOEXEC), "chdir" (bad working directory) or
// "user" (unknown user: CodeUnknownUser). Then stdout on ChanOut and
// stderr on ChanErr (with a terminal, the terminal on ChanOut), stdin from
// the host on ChanIn when asked for (EOF closes it, or sends ^D to a
// terminal). The host may send Signal{SignalRequest} (to the process
// group) and Resize{WindowSize}. The last frame is ExecExit, sent after
// both output channels' EOF; output written after the process exited by
// a child that kept the pipe is forwarded while it keeps coming (100 ms
// idle at most). The process runs in its own process group (session, with
// a terminal); its environment is built from defaults, the config's Env
// and the request's Env, never the agent's own.
// A Main exec (ExecRequest.Main) is not tied to its connection: when the
// connection ends the process keeps running, its stdin closed and its
// output written to the agent's console; once it exits, the agent shuts
// down as for Shutdown (after the host that watches it, if any, has
// closed its connection, or a few seconds), which stops the VM. With
// Detach, ExecStarted (FlagEnd) is the stream's last frame and the output
// goes to the console from the start.
//
// ReadFile{ReadFileRequest}: Reply{FileInfo} (not FlagEnd), then the
// content as Data on ChanOut, then EOF with FlagEnd (or Error).
//
// WriteFile{WriteFileRequest}: the host sends the content as Data on
// ChanIn and EOF; the agent answers Reply{WriteFileResult} once the file
// is in place, or Error at any point (the host stops sending).
//
// ReadDir{PathRequest}: Reply (empty, not FlagEnd), then one JSON
// FileInfo (lstat) per line as Data on ChanOut, then EOF with FlagEnd.
//
// Stat{PathRequest} (NoFollow for lstat): Reply{FileInfo}.
// Readlink{PathRequest}: Reply{ReadlinkResult}. Mkdir, Remove, Rename,
// Symlink, Chmod: an empty Reply. Relative paths in file requests are
// resolved against Config.Workdir (or "/").
//
// FileEvents{FileEventsRequest} (version 2): the host's changes to the
// shares, at most MaxFileEvents per request, named by guest paths that
// must lie in a share (a mount of Config.Mounts; else EINVAL, and nothing
// is fired). The agent fires each in the guest kernel, skipping the files
// the guest wrote itself within GuestChangeWindow, and answers
// Reply{FileEventsResult}. It does not count as activity. The host sends
// it only when the hello reports FileEventsStatus.Delivered, and one at a
// time: a slow guest makes the host coalesce more, never queue more.
package protocol
